#!/usr/bin/env python3
"""How long from ``await launcher.spawn(...)`` to a running job.

Three figures over N sequential spawns (each job is waited for before the next starts):

1. **reply**: from calling ``spawn`` to its return (command exec'd, ``runtime.json``
   written and fsynced, reply read back).
2. **child running**: from calling ``spawn`` (wall clock) to the job's own first action:
   the job is ``date +%s%N``, whose output is the wall clock at which it ran. This is an
   upper bound on exec (it includes ``date``'s own start-up).
3. **runtime.json**: from calling ``spawn`` to ``runtime.json`` existing, seen by a thread
   polling every 0.1 ms (a separate pass with ``true`` as the job, so the poller does not
   disturb 1 and 2).

Job dirs are created before the clock starts, as the runner does. Also printed for
comparison: a bare ``python -I -S -c pass`` start, which is what a shim per job started as
a fresh interpreter would cost at least.

Usage::

    .venv/bin/python bench/spawn_latency.py              # 200 spawns per pass
    .venv/bin/python bench/spawn_latency.py -n 50 --json
    .venv/bin/python bench/spawn_latency.py --dir /some/fs   # job dirs there (fsync cost)

Target: median reply <= 10 ms. Always exits 0 unless the arguments are wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpuplaned.launcher import (  # noqa: E402
    SpawnRequest,
    open_launcher,
    read_exit,
    wait_process_exit,
)

WARMUP = 10
TARGET_MEDIAN_MS = 10.0


def summary(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    p99 = ordered[min(len(ordered) - 1, max(0, round(0.99 * len(ordered)) - 1))]
    return {
        "n": len(ordered),
        "median_ms": statistics.median(ordered),
        "p99_ms": p99,
        "max_ms": ordered[-1],
        "mean_ms": statistics.fmean(ordered),
    }


class Poller:
    """Polls for one path at a time from a thread; records when it first exists."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._path: str | None = None
        self.seen_at: float | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def watch(self, path: Path) -> None:
        with self._lock:
            self._path, self.seen_at = str(path), None

    def _run(self) -> None:
        while not self._stop:
            with self._lock:
                path = self._path
            if path is not None and os.path.exists(path):
                now = time.perf_counter()
                with self._lock:
                    if self._path == path:
                        self.seen_at, self._path = now, None
            time.sleep(0.0001)

    def close(self) -> None:
        self._stop = True
        self._thread.join()


def request(root: Path, n: int, argv: list[str]) -> SpawnRequest:
    (root / f"job-{n}").mkdir()  # the runner creates the job dir before it spawns, too
    return SpawnRequest(
        id=f"bench-{n}", job_dir=root / f"job-{n}", argv=argv, cwd=root,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}, grace_s=1.0,
    )


async def run_bench(root: Path, n: int) -> dict[str, dict[str, float]]:
    reply_ms: list[float] = []
    child_ms: list[float] = []
    runtime_ms: list[float] = []
    replies_true_ms: list[float] = []
    async with open_launcher() as launcher:
        # Pass 1: reply and child-running latency.
        for i in range(WARMUP + n):
            req = request(root, i, ["date", "+%s%N"])
            called_wall_ns = time.time_ns()
            t0 = time.perf_counter()
            spawned = await launcher.spawn(req)
            t1 = time.perf_counter()
            await wait_process_exit(spawned.shim_pid, spawned.shim_start_time)
            record = read_exit(req.job_dir)
            if record is None or record.exit_code != 0:
                raise SystemExit(f"job {req.id} failed: {record}")
            ran_ns = int((req.job_dir / "stdout.log").read_text().split()[0])
            if i >= WARMUP:
                reply_ms.append((t1 - t0) * 1e3)
                child_ms.append((ran_ns - called_wall_ns) / 1e6)
        # Pass 2: runtime.json latency, seen from a polling thread.
        poller = Poller()
        try:
            for i in range(WARMUP + n):
                req = request(root, 100_000 + i, ["true"])
                poller.watch(req.job_dir / "runtime.json")
                t0 = time.perf_counter()
                spawned = await launcher.spawn(req)
                t1 = time.perf_counter()
                await wait_process_exit(spawned.shim_pid, spawned.shim_start_time)
                while poller.seen_at is None:  # it exists by now; the poller just has to look
                    await trio.sleep(0.0001)
                if i >= WARMUP:
                    runtime_ms.append((poller.seen_at - t0) * 1e3)
                    replies_true_ms.append((t1 - t0) * 1e3)
        finally:
            poller.close()
    return {
        "reply": summary(reply_ms),
        "child_running": summary(child_ms),
        "runtime_json": summary(runtime_ms),
        "reply_with_poller": summary(replies_true_ms),
    }


def interpreter_start_ms(runs: int = 5) -> float:
    samples = []
    for _ in range(runs + 1):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples[1:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=200, help="spawns per pass (default 200)")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the job dirs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.n < 1:
        parser.error("-n must be >= 1")
    with tempfile.TemporaryDirectory(prefix="gpuplane-spawn-", dir=args.dir) as tmp:
        figures = trio.run(run_bench, Path(tmp), args.n)
    figures["python_start"] = {"median_ms": interpreter_start_ms()}
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"spawn latency over {args.n} spawns ({os.cpu_count()} CPUs, Python {sys.version.split()[0]})")
    labels = {
        "reply": "spawn() call -> reply",
        "child_running": "spawn() call -> child running (date)",
        "runtime_json": "spawn() call -> runtime.json exists",
        "reply_with_poller": "spawn() call -> reply (pass 2, poller on)",
    }
    for key, label in labels.items():
        f = figures[key]
        print(f"  {label:42s} median {f['median_ms']:6.2f} ms  p99 {f['p99_ms']:6.2f} ms"
              f"  max {f['max_ms']:6.2f} ms")
    print(f"  {'python -I -S -c pass (for comparison)':42s} median {figures['python_start']['median_ms']:6.2f} ms")
    verdict = "meets" if figures["reply"]["median_ms"] <= TARGET_MEDIAN_MS else "MISSES"
    print(f"  target: median reply <= {TARGET_MEDIAN_MS:g} ms -> {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
