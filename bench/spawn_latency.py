#!/usr/bin/env python3
"""How long from ``await launcher.spawn(...)`` to a running job, and how many spawns a second.

Three figures over N sequential spawns (each job is waited for before the next starts):

1. **reply**: from calling ``spawn`` to its return (command exec'd, ``runtime.json``
   written and fsynced, reply read back).
2. **child running**: from calling ``spawn`` (wall clock) to the job's own first action:
   the job is ``date +%s%N``, whose output is the wall clock at which it ran. This is an
   upper bound on exec (it includes ``date``'s own start-up).
3. **runtime.json**: from calling ``spawn`` to ``runtime.json`` existing, seen by a thread
   polling every 0.1 ms (a separate pass with ``true`` as the job, so the poller does not
   disturb 1 and 2).

Then, for each ``--concurrency`` level C (default 1 and 8), **throughput**: N spawns of
``true`` issued from C trio tasks, each starting its next spawn as soon as its last one
returned (jobs are not waited for until all N are started): spawns/s over the whole pass,
and the spawn() -> reply latency of each.

Job dirs are left to the shim to create (it does, since the launcher was pipelined, so the
runner need not); ``--premake`` creates them before the clock starts instead, as the runner
used to. ``--prefork N`` sets how many idle shims the launcher keeps (0: fork on request;
only for a launcher that has the option). Job dirs go to a temp dir on ``/tmp``'s file
system unless ``--dir``: use ``--dir /dev/shm`` to leave out the fsyncs (and disk noise) and
see the CPU path alone. Also printed for comparison:
a bare ``python -I -S -c pass`` start, which is what a shim per job started as a fresh
interpreter would cost at least.

Usage::

    .venv/bin/python bench/spawn_latency.py              # 200 spawns per pass
    .venv/bin/python bench/spawn_latency.py -n 50 --json
    .venv/bin/python bench/spawn_latency.py --concurrency 1,4,16
    .venv/bin/python bench/spawn_latency.py --dir /dev/shm   # no fsync cost: the CPU path
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

from gpuplaned.launching.client import SpawnRequest, open_launcher  # noqa: E402
from gpuplaned.launching.job_files import read_exit  # noqa: E402

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


def request(root: Path, n: int | str, argv: list[str], premake: bool) -> SpawnRequest:
    if premake:
        (root / f"job-{n}").mkdir()
    return SpawnRequest(
        id=f"bench-{n}", job_dir=root / f"job-{n}", argv=argv, cwd=root,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}, grace_s=1.0,
    )


async def run_throughput(launcher, root: Path, n: int, concurrency: int,
                         premake: bool) -> dict[str, float]:
    """N spawns of ``true`` from ``concurrency`` tasks; spawns/s and reply latency."""

    async def one_pass(tag: str, count: int, reply_ms: list[float]) -> float:
        reqs = iter([request(root, f"{tag}-{i}", ["true"], premake) for i in range(count)])
        done: list[tuple[SpawnRequest, object]] = []

        async def worker() -> None:
            for req in reqs:  # shared: each task takes the next request
                t0 = time.perf_counter()
                spawned = await launcher.spawn(req)
                reply_ms.append((time.perf_counter() - t0) * 1e3)
                done.append((req, spawned))

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(worker)
        elapsed = time.perf_counter() - t0
        for req, spawned in done:
            await launcher.wait_exit(spawned.id)  # shims are reused: the launcher reports the job's end
            record = read_exit(req.job_dir)
            if record is None or record.exit_code != 0:
                raise SystemExit(f"job {req.id} failed: {record}")
        return elapsed

    await one_pass(f"c{concurrency}-warm", max(WARMUP, concurrency * 2), [])
    reply_ms: list[float] = []
    elapsed = await one_pass(f"c{concurrency}", n, reply_ms)
    return {"concurrency": concurrency, "spawns_per_s": n / elapsed, **summary(reply_ms)}


async def run_bench(root: Path, n: int, concurrency: list[int], premake: bool,
                    launcher_options: dict[str, object]) -> dict[str, dict[str, float]]:
    reply_ms: list[float] = []
    child_ms: list[float] = []
    runtime_ms: list[float] = []
    replies_true_ms: list[float] = []
    throughput = {}
    async with open_launcher(**launcher_options) as launcher:
        # Pass 1: reply and child-running latency.
        for i in range(WARMUP + n):
            req = request(root, i, ["date", "+%s%N"], premake)
            called_wall_ns = time.time_ns()
            t0 = time.perf_counter()
            spawned = await launcher.spawn(req)
            t1 = time.perf_counter()
            await launcher.wait_exit(spawned.id)  # shims are reused: the launcher reports the job's end
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
                req = request(root, 100_000 + i, ["true"], premake)
                poller.watch(req.job_dir / "runtime.json")
                t0 = time.perf_counter()
                spawned = await launcher.spawn(req)
                t1 = time.perf_counter()
                await launcher.wait_exit(spawned.id)  # shims are reused: the launcher reports the job's end
                while poller.seen_at is None:  # it exists by now; the poller just has to look
                    await trio.sleep(0.0001)
                if i >= WARMUP:
                    runtime_ms.append((poller.seen_at - t0) * 1e3)
                    replies_true_ms.append((t1 - t0) * 1e3)
        finally:
            poller.close()
        # Pass 3: throughput at each concurrency level.
        for level in concurrency:
            throughput[f"c{level}"] = await run_throughput(launcher, root, n, level, premake)
    return {
        "reply": summary(reply_ms),
        "child_running": summary(child_ms),
        "runtime_json": summary(runtime_ms),
        "reply_with_poller": summary(replies_true_ms),
        "throughput": throughput,
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
    parser.add_argument("--concurrency", default="1,8", metavar="N[,N...]",
                        help="spawns in flight at once for the throughput pass (default 1,8)")
    parser.add_argument("--premake", action="store_true",
                        help="create each job dir before its spawn (off the clock)")
    parser.add_argument("--prefork", type=int, default=None,
                        help="idle shims the launcher keeps ready (default: the launcher's)")
    args = parser.parse_args()
    if args.n < 1:
        parser.error("-n must be >= 1")
    try:
        concurrency = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        parser.error("--concurrency takes integers separated by commas")
    if any(c < 1 for c in concurrency):
        parser.error("--concurrency levels must be >= 1")
    options = {} if args.prefork is None else {"prefork": args.prefork}
    with tempfile.TemporaryDirectory(prefix="gpuplane-spawn-", dir=args.dir) as tmp:
        figures = trio.run(run_bench, Path(tmp), args.n, concurrency, args.premake, options)
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
    for f in figures["throughput"].values():
        label = f"{f['concurrency']} in flight: spawn() -> reply"
        print(f"  {label:42s} median {f['median_ms']:6.2f} ms  p99 {f['p99_ms']:6.2f} ms"
              f"  max {f['max_ms']:6.2f} ms  {f['spawns_per_s']:6.0f} spawns/s")
    print(f"  {'python -I -S -c pass (for comparison)':42s} median {figures['python_start']['median_ms']:6.2f} ms")
    verdict = "meets" if figures["reply"]["median_ms"] <= TARGET_MEDIAN_MS else "MISSES"
    print(f"  target: median reply <= {TARGET_MEDIAN_MS:g} ms -> {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
