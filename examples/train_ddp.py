"""``train.py`` with DistributedDataParallel: CPU ranks over gloo, all reporting to one run.

Each rank opens its own SDK session on the same run. Rank 0 logs the ranks' mean ``loss``
and ``acc`` (all-reduced) and ``lr``, ``val/loss`` and ``val/acc``; every rank logs its own
``rank<R>/loss``. Rank 0 alone writes TensorBoard events and checkpoints (the model's
state is the same on every rank after each step).

Launch it either way::

    python examples/train_ddp.py --nproc 2            # spawns the ranks itself
    torchrun --nproc-per-node 2 examples/train_ddp.py  # or any launcher that sets RANK, WORLD_SIZE, MASTER_*

and under GPUPlane the same: ``gpuplanectl submit --gpu 0 -- python examples/train_ddp.py``.

Which run: the job's (``GPUPLANE_RUN_ID``), else ``--run-id``, else one made up here. When
this script spawns the ranks, the parent makes it and hands it to each rank's
``gpuplane.init(run_id=...)``; under another launcher rank 0 makes it and broadcasts it.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import uuid
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.tensorboard import SummaryWriter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train import default_out, evaluate, make_model, save_checkpoint, spirals  # noqa: E402

try:
    import gpuplane
except ImportError:  # run from a checkout without `pip install ./sdk`: use the SDK beside us
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))
    import gpuplane


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--nproc", type=int, default=2, help="ranks to spawn (ignored under torchrun)")
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps")
    parser.add_argument("--lr", type=float, default=0.01, help="peak learning rate (cosine decay)")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--samples", type=int, default=3000, help="generated points (a fifth held out)")
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--ckpt-every", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch, per rank")
    parser.add_argument("--out", default=None, help="checkpoints and TensorBoard logs [default: runs/<run id>]")
    parser.add_argument("--name", default="spiral-mlp-ddp", help="the run's name")
    parser.add_argument("--run-id", default=None, help="report into this run [default: the job's, or a new one]")
    return parser.parse_args(argv)


def new_run_id() -> str:
    return "run_ddp-" + uuid.uuid4().hex


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agree_on_run_id(rank: int, run_id: str | None) -> str:
    """Rank 0's run id, everywhere (used when a launcher other than ours started the ranks)."""
    box = [run_id or new_run_id()] if rank == 0 else [None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        _train(rank, world, args)
    finally:
        dist.destroy_process_group()


def _train(rank: int, world: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP also broadcasts them)
    run_id = os.environ.get("GPUPLANE_RUN_ID") or args.run_id or agree_on_run_id(rank, None)

    x, y = spirals(args.samples, args.seed)
    n_val = args.samples // 5
    x_val, y_val = x[:n_val], y[:n_val]
    x_train, y_train = x[n_val:][rank::world], y[n_val:][rank::world]  # this rank's shard
    model = DistributedDataParallel(make_model(args.hidden))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, args.steps))
    batches = torch.Generator().manual_seed(args.seed + 1 + rank)
    config = {k: v for k, v in vars(args).items() if k != "run_id"}
    config["world_size"] = world

    with gpuplane.init(project="examples", name=args.name, config=config, run_id=run_id) as run:
        out = Path(args.out) if args.out else default_out(run_id)
        # One write with its newline: both ranks share stdout, and print() writes the line and
        # its end apart, so under PYTHONUNBUFFERED the two ranks' lines could run together.
        sys.stdout.write(f"rank {rank} run {run_id} session {run.session_id or '-'} out {out}\n")
        sys.stdout.flush()
        writer = SummaryWriter(log_dir=str(out / "tb"), flush_secs=10) if rank == 0 else None
        step = 0
        try:
            for step in range(1, args.steps + 1):
                index = torch.randint(len(x_train), (args.batch_size,), generator=batches)
                logits = model(x_train[index])
                loss = F.cross_entropy(logits, y_train[index])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()  # DDP all-reduces the gradients here
                optimizer.step()
                lr = scheduler.get_last_lr()[0]
                scheduler.step()

                local_loss = loss.item()
                mean = torch.tensor([local_loss, (logits.argmax(1) == y_train[index]).float().mean().item()])
                dist.all_reduce(mean)
                mean /= world
                run.log({f"rank{rank}/loss": local_loss}, step=step)
                if rank != 0:
                    continue
                scalars = {"loss": mean[0].item(), "acc": mean[1].item(), "lr": lr}
                if step % args.eval_every == 0 or step == args.steps:
                    scalars["val/loss"], scalars["val/acc"] = evaluate(model.module, x_val, y_val)
                    print(f"step {step} loss {scalars['loss']:.4f} val/acc {scalars['val/acc']:.3f}", flush=True)
                run.log(scalars, step=step)
                for tag, value in scalars.items():
                    writer.add_scalar(tag, value, step)
                if step % args.ckpt_every == 0 or step == args.steps:
                    path = save_checkpoint(out / "checkpoints", step, model.module, optimizer, scheduler, config)
                    run.log_checkpoint(path, step=step)
                    print(f"checkpoint {path}", flush=True)
        finally:
            if writer is not None:
                writer.close()
        dist.barrier()  # no rank finishes its session before every rank's last step is done


def _spawned(rank: int, world: int, args: argparse.Namespace) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
    train(rank, world, args)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun or another launcher started us
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return 0
    if not os.environ.get("GPUPLANE_RUN_ID") and not args.run_id:
        args.run_id = new_run_id()  # one run for all the ranks
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    mp.spawn(_spawned, args=(args.nproc, args), nprocs=args.nproc, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
