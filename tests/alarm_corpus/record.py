"""Records the corpus's real PyTorch runs into ``real_runs.json`` (run it again to regenerate;
about two minutes on a CPU):

    .venv/bin/python tests/alarm_corpus/record.py

- ``examples/train.py`` (the quick start) at five seeds, as its own process; its curves are
  read back from the TensorBoard file its SummaryWriter wrote (with our own reader, as the
  node's tail reads them);
- a noisier twin in this process (batches of 16, SGD with momentum) under the schedules
  that move a loss on purpose: linear warm-up then cosine, warm restarts (SGDR), step
  decay; half of them written through a SummaryWriter and read back, half kept as the
  Python floats the SDK would send;
- real faults: a learning rate raised until the loss diverges to NaN (a range test run too
  far), and the quick start on a tenth of its data for long enough to overfit.

Values keep 3 significant digits (far finer than a minibatch loss's noise; the file stays
small); each metric is ``{"steps": [first, every], "values": [...]}`` when its steps are
evenly spaced, else ``{"steps": [...], "values": [...]}``; the quick start's training loss
also keeps its real wall-clock gaps (``"ms"``, from each point to the next, for RUN_STALLED).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpuplaned.tensorboard import EventFileReader  # noqa: E402

OUT = Path(__file__).resolve().parent / "real_runs.json"
KEEP = ("loss", "val/loss")


def _example():
    spec = importlib.util.spec_from_file_location("example_train", ROOT / "examples" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read_tb(directory: Path) -> dict[str, tuple[list[int], list[float], list[float]]]:
    """``{tag: (steps, wall seconds, values)}`` of every event file under ``directory``."""
    out: dict[str, tuple[list[int], list[float], list[float]]] = {}
    for path in sorted(directory.rglob("events.out.tfevents.*")):
        reader = EventFileReader(path)
        for tag, cols in reader.read(0.0).scalars.items():
            steps, walls, values = out.setdefault(tag, ([], [], []))
            steps += cols.steps.tolist()
            walls += cols.walls.tolist()
            values += cols.values.tolist()
        reader.close()
    return out


def _compact(steps: list[int], values: list[float], walls: list[float] | None = None) -> dict:
    keep = [float(f"{v:.3g}") if math.isfinite(v) else v for v in values]
    every = steps[1] - steps[0] if len(steps) > 1 else 1
    even = all(b - a == every for a, b in zip(steps, steps[1:]))
    out = {"steps": [steps[0], every] if even else list(steps), "values": keep}
    if walls is not None:
        ms = [round((w - walls[0]) * 1000) for w in walls]
        out["ms"] = [b - a for a, b in zip([0] + ms, ms)]  # the gaps between points
    return out


def _run(name: str, source: str, series: dict, faults: list[dict] | None = None, real_time: bool = False) -> dict:
    metrics = {}
    for tag in KEEP:
        if tag in series:
            steps, walls, values = series[tag]
            metrics[tag] = _compact(steps, values, walls if tag == "loss" and real_time else None)
    return {"name": name, "source": source, "faults": faults or [], "metrics": metrics}


def quick_start(seed: int, extra: list[str], tmp: Path) -> dict:
    out = tmp / f"train-{seed}-{len(extra)}"
    env = dict(os.environ, GPUPLANE_HOME=str(tmp / "home"), GPUPLANE_RUNTIME_DIR=str(tmp / "rt"),
               GPUPLANE_SPOOL_MAX_BYTES="0")
    subprocess.run([sys.executable, str(ROOT / "examples" / "train.py"), "--seed", str(seed), "--out", str(out),
                    *extra], check=True, env=env, stdout=subprocess.DEVNULL)
    return _read_tb(out / "tb")


def noisy_twin(seed: int, schedule: str, steps: int, tmp: Path | None) -> dict:
    """The spiral MLP with batches of 16 and SGD + momentum under ``schedule``; through a
    SummaryWriter into ``tmp`` and back when ``tmp`` is given."""
    example = _example()
    torch.manual_seed(seed)
    x, y = example.spirals(3000, seed)
    x_val, y_val, x_train, y_train = x[:600], y[:600], x[600:], y[600:]
    model = example.make_model(64)
    lr = {"diverge": 0.01}.get(schedule, 0.1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    warm = 200
    schedulers = {
        "warmup_cosine": lambda: torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / (steps - warm)))),
        "sgdr": lambda: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=300, T_mult=2),
        "step": lambda: torch.optim.lr_scheduler.StepLR(optimizer, step_size=steps // 3, gamma=0.1),
        # A range test run too far: x1.004 a step, until the loss blows up.
        "diverge": lambda: torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.004 ** s),
    }
    scheduler = schedulers[schedule]()
    batches = torch.Generator().manual_seed(seed + 1)
    writer = SummaryWriter(log_dir=str(tmp)) if tmp is not None else None
    series: dict[str, tuple[list[int], list[float], list[float]]] = {t: ([], [], []) for t in KEEP}

    def log(tag: str, step: int, value: float, wall: float) -> None:
        if writer is not None:
            writer.add_scalar(tag, value, step, walltime=wall)
        else:
            for column, item in zip(series[tag], (step, wall, value)):
                column.append(item)

    start = time.time()
    for step in range(1, steps + 1):
        index = torch.randint(len(x_train), (16,), generator=batches)
        logits = model(x_train[index])
        if schedule == "diverge":  # squared error: it blows up to infinity where cross entropy's ReLUs just die
            loss = F.mse_loss(logits, F.one_hot(y_train[index], 3).float())
        else:
            loss = F.cross_entropy(logits, y_train[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        wall = start + step * 0.05  # a steady 20 steps/s, as a GPU job would log
        scheduler.step()
        log("loss", step, loss.item(), wall)
        if step % 50 == 0:
            with torch.no_grad():
                log("val/loss", step, F.cross_entropy(model(x_val), y_val).item(), wall)
        if not math.isfinite(loss.item()) and step > 50:
            break  # diverged: a real job would go on logging NaN; a few are enough
    if writer is not None:
        writer.close()
        return _read_tb(tmp)
    return series


def main() -> None:
    torch.set_num_threads(1)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for seed in range(5):
            runs.append(_run(f"quick start, seed {seed}", f"examples/train.py --seed {seed}",
                             quick_start(seed, [], tmp), real_time=True))
        for seed, (schedule, steps) in enumerate([("warmup_cosine", 3000), ("sgdr", 2100), ("step", 3000),
                                                  ("warmup_cosine", 3000), ("sgdr", 2100), ("step", 3000)]):
            via_tb = tmp / f"twin-{seed}" if seed % 2 else None
            runs.append(_run(f"noisy twin, {schedule}, seed {seed}" + (", TensorBoard" if via_tb else ""),
                             f"record.py noisy_twin({seed}, {schedule!r})", noisy_twin(seed, schedule, steps, via_tb)))
        series = noisy_twin(0, "diverge", 3000, tmp / "diverge")
        first_bad = next(s for s, v in zip(series["loss"][0], series["loss"][2]) if not math.isfinite(v))
        runs.append(_run("noisy twin, learning rate raised until it diverges", "record.py noisy_twin(0, 'diverge')",
                         series, [{"rule": "LOSS_NAN", "steps": [first_bad, first_bad]},
                                  {"rule": "LOSS_SPIKE", "steps": [first_bad - 300, first_bad]}]))
        args = ["--samples", "100", "--hidden", "512", "--steps", "3000", "--eval-every", "50", "--lr", "0.01"]
        runs.append(_run("quick start on 100 samples (overfits)", "examples/train.py " + " ".join(args),
                         quick_start(0, args, tmp), [{"rule": "OVERFITTING_SUSPECTED", "steps": [500, 3000]}]))
    OUT.write_text(json.dumps({"runs": runs}, separators=(",", ":")) + "\n")
    print(f"{OUT}: {len(runs)} runs, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
