"""``import-run`` of a large TensorBoard dir on a real daemon, and what it costs everyone else.

    .venv/bin/python bench/import_bench.py                # 500k scalars in 5 tags (~1 min on 2 CPUs)
    .venv/bin/python bench/import_bench.py --points 100000

One event file is written by PyTorch's real ``SummaryWriter`` (``--points`` scalars over five
tags), then ``POST /api/v1/runs/import`` imports its dir into a daemon (``gpuplaned --gpus
fake:1`` in a temporary home). While it runs, another thread sends one small read
(``GET /api/v1/daemon``) and one small write (``POST /api/v1/projects``) at a time, back to
back: their latencies say whether the import blocks the event loop (reads) or holds the write
transaction (writes; points are stored ``import_run.BATCH_POINTS`` per transaction). Then the
same dir is imported again (nothing is read or added). Exits 0 whatever it measures; the
targets are printed beside the figures with PASS or FAIL.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpuplanectl.client import DaemonClient  # noqa: E402
from jobs_bench import JobDaemons  # noqa: E402

TAGS = ("train/loss", "train/lr", "eval/acc", "grad/norm", "throughput")


def report(label: str, value: float, unit: str, target: float) -> None:
    verdict = "PASS" if value <= target else "FAIL"
    print(f"{label:<44} {value:>10.3f} {unit:<4} target <= {target:g} {unit}  {verdict}")


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))] if values else float("nan")


def write_dir(root: Path, points: int) -> float:
    from torch.utils.tensorboard import SummaryWriter

    started = time.perf_counter()
    with SummaryWriter(root / "runs" / "big", max_queue=10_000, flush_secs=3600) as writer:
        for step in range(points // len(TAGS)):
            for i, tag in enumerate(TAGS):
                writer.add_scalar(tag, 1.0 / (1 + step) + i, step)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=500_000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="import-bench-"))
    dm = JobDaemons(sys.executable, root, None)
    try:
        wrote = write_dir(root / "data", args.points)
        size = sum(p.stat().st_size for p in (root / "data").rglob("*") if p.is_file())
        print(f"wrote {args.points} scalars ({size / 2**20:.1f} MiB) with SummaryWriter in {wrote:.1f} s")
        d = dm.start("--gpus", "fake:1")
        client = DaemonClient.discover(d.runtime_dir, timeout=600)  # the import is one long request

        def another() -> DaemonClient:
            return DaemonClient.discover(d.runtime_dir, timeout=30)

        reads: list[float] = []
        writes: list[float] = []
        done = threading.Event()

        def probe() -> None:
            other = another()
            i = 0
            while not done.is_set():
                t0 = time.perf_counter()
                other.get("/api/v1/daemon")
                reads.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                other.post("/api/v1/projects", {"name": f"probe-{i}"})
                writes.append(time.perf_counter() - t0)
                i += 1

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        t0 = time.perf_counter()
        first = client.post("/api/v1/runs/import", {"dir": str(root / "data")})
        took = time.perf_counter() - t0
        done.set()
        prober.join(30)
        points = first["imported"]["points"]
        print(f"imported {points} points in {first['imported']['series']} series in {took:.2f} s "
              f"({points / took / 1e3:.0f}k points/s); {len(reads)} reads and {len(writes)} writes meanwhile")
        report("small read during the import, p99", percentile(reads, 0.99), "s", 0.25)
        report("small read during the import, max", max(reads, default=float("nan")), "s", 0.5)
        report("small write during the import, p99", percentile(writes, 0.99), "s", 0.5)
        report("small write during the import, max", max(writes, default=float("nan")), "s", 1.0)
        t0 = time.perf_counter()
        again = client.post("/api/v1/runs/import", {"dir": str(root / "data")})
        assert again["run_id"] == first["run_id"] and not any(again["added"].values()), again
        report("importing the same dir again (nothing added)", time.perf_counter() - t0, "s", 1.0)
    finally:
        dm.stop_all()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
