"""A small, real PyTorch training script that reports to GPUPlane.

An MLP learns to tell apart the three arms of a generated spiral (no download; the same
data and the same result for the same ``--seed``). Each step it logs ``loss``, ``acc`` and
``lr`` with the GPUPlane SDK, and ``val/loss``, ``val/acc`` every ``--eval-every`` steps; it
writes the same scalars as TensorBoard events under ``OUT/tb`` and a checkpoint to
``OUT/checkpoints/step_NNNNNN.pt`` every ``--ckpt-every`` steps and at the end.

It runs the same on its own and as a GPUPlane job::

    python examples/train.py --steps 2000
    gpuplanectl submit --gpu 0 -- python examples/train.py --steps 2000

Under ``gpuplanectl submit`` the SDK reports into the job's run (``GPUPLANE_RUN_ID``); with
no daemon at all it is a no-op and training goes on. ``OUT`` defaults to ``runs/<run id>``
in the working directory. SIGTERM (``gpuplanectl job cancel``) stops at the next step
boundary, after a last checkpoint, with exit code 143.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.tensorboard import SummaryWriter

try:
    import gpuplane
except ImportError:  # run from a checkout without `pip install ./sdk`: use the SDK beside us
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))
    import gpuplane

CLASSES = 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000, help="optimizer steps")
    parser.add_argument("--lr", type=float, default=0.01, help="peak learning rate (cosine decay)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=128, help="width of the MLP's two hidden layers")
    parser.add_argument("--samples", type=int, default=3000, help="generated points (a fifth held out)")
    parser.add_argument("--eval-every", type=int, default=100, help="steps between validations")
    parser.add_argument("--ckpt-every", type=int, default=500, help="steps between checkpoints")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="auto (cuda if there is one), cpu, cuda, cuda:1, ...")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads for torch (a model this small only loses from more on a busy machine)")
    parser.add_argument("--out", default=None, help="checkpoints and TensorBoard logs [default: runs/<run id>]")
    parser.add_argument("--name", default="spiral-mlp", help="the run's name")
    return parser.parse_args(argv)


def spirals(samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``samples`` 2-D points on three noisy spiral arms, and their arm (the label)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(samples) % CLASSES
    radius = torch.rand(samples, generator=g)
    angle = labels * (2 * math.pi / CLASSES) + radius * 3 * math.pi + torch.randn(samples, generator=g) * 0.3
    points = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    order = torch.randperm(samples, generator=g)
    return points[order], labels[order]


def make_model(hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, CLASSES))


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def default_out(run_id: str | None) -> Path:
    return Path("runs") / (run_id or time.strftime("local-%Y%m%d-%H%M%S-") + str(os.getpid()))


def save_checkpoint(directory: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler, config: dict) -> Path:
    """Write ``step_NNNNNN.pt`` whole or not at all (a temp file renamed into place)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step_{step:06d}.pt"
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "config": config}, tmp)
    os.replace(tmp, path)
    return path


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = F.cross_entropy(logits, y).item()
        acc = (logits.argmax(1) == y).float().mean().item()
    model.train()
    return loss, acc


class StopFlag:
    """Set by SIGTERM: the loop ends at the next step boundary instead of dying mid-step."""

    def __init__(self) -> None:
        self.set = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        self.set = True


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = pick_device(args.device)
    stop = StopFlag()

    x, y = spirals(args.samples, args.seed)
    n_val = args.samples // 5
    x, y = x.to(device), y.to(device)
    x_val, y_val, x_train, y_train = x[:n_val], y[:n_val], x[n_val:], y[n_val:]
    model = make_model(args.hidden).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, args.steps))
    batches = torch.Generator().manual_seed(args.seed + 1)

    with gpuplane.init(project="examples", name=args.name, config=vars(args)) as run:
        out = Path(args.out) if args.out else default_out(run.id)
        ckpt_dir = out / "checkpoints"
        print(f"run {run.id or '-'} out {out} device {device}", flush=True)
        writer = SummaryWriter(log_dir=str(out / "tb"), flush_secs=10)
        config = vars(args)
        step = 0

        def keep_checkpoint(step: int) -> None:
            path = save_checkpoint(ckpt_dir, step, model, optimizer, scheduler, config)
            run.log_checkpoint(path, step=step)  # registered with the run; the file stays where it is
            print(f"checkpoint {path}", flush=True)

        try:
            for step in range(1, args.steps + 1):
                index = torch.randint(len(x_train), (args.batch_size,), generator=batches).to(device)
                logits = model(x_train[index])
                loss = F.cross_entropy(logits, y_train[index])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                lr = scheduler.get_last_lr()[0]
                scheduler.step()

                scalars = {"loss": loss.item(), "acc": (logits.argmax(1) == y_train[index]).float().mean().item(),
                           "lr": lr}
                if step % args.eval_every == 0 or step == args.steps:
                    scalars["val/loss"], scalars["val/acc"] = evaluate(model, x_val, y_val)
                    print(f"step {step} loss {scalars['loss']:.4f} val/acc {scalars['val/acc']:.3f}", flush=True)
                run.log(scalars, step=step)
                for tag, value in scalars.items():
                    writer.add_scalar(tag, value, step)
                if step % args.ckpt_every == 0 or stop.set:
                    keep_checkpoint(step)
                if stop.set:
                    print(f"SIGTERM: stopped after step {step}", flush=True)
                    run.log_event("stopped", {"signal": "SIGTERM"}, step=step)  # info: a stop asked for
                    run.finish("CANCELLED")
                    return 128 + signal.SIGTERM
            if step % args.ckpt_every:
                keep_checkpoint(step)
        finally:
            writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
