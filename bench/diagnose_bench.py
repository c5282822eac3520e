#!/usr/bin/env python3
"""Benchmark ``diagnose_run`` (issue 16): a real daemon's 1M-point run, diagnosed repeatedly.

A gpuplaned is started in a temporary directory (``--gpus fake:1``); this process logs a run
through the SDK: ``--steps`` (default 1,000,000) points of ``train/loss`` (a noisy decaying
curve with one spike) and ``val/loss`` every 1000 steps. Once every point is stored (and
the daemon's compaction had a moment), it times:

1. ``GET /api/v1/runs/{id}/diagnosis`` over the Unix socket, ``--repeat`` times, once the
   daemon's compaction packed the run (within a minute or so of its last point): p50 and p99
   against the 200 ms target (seed 000 / issue 16); and ``FRESH`` times at once, before that
   (every point still in plain chunks, decoded outright: the worst case);
2. ``gpuplaned.service.api.diagnosis.diagnosis_data`` on a read-only connection to the daemon's
   database in this process: the reads and the rules without HTTP.

Usage::

    .venv/bin/python bench/diagnose_bench.py            # about a minute on 2 CPUs
    .venv/bin/python bench/diagnose_bench.py --quick    # 100k points, a smoke run

Always exits 0 (a benchmark, not a test) unless the arguments are wrong; the daemon is
stopped and the temp dir removed on the way out.
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO / "sdk"))

from jobs_bench import JobDaemons, stats  # noqa: E402

TARGET_P50_MS = 200.0
FRESH = 5  # diagnoses timed at once, before compaction packs the run's chunks


def log_run(d, steps: int) -> str:
    from gpuplane import Run

    run = Run(name="diagnose-bench", config={"lr": 3e-4},
              env={"GPUPLANE_RUNTIME_DIR": str(d.runtime_dir), "GPUPLANE_HOME": str(d.home)})
    rng = random.Random(1)
    spike = steps * 3 // 5
    for step in range(steps):
        loss = (2.0 * math.exp(-step / (steps / 5)) + 0.1) * (1 + rng.uniform(-0.05, 0.05))
        points = {"train/loss": loss * (8 if step == spike else 1)}
        if step % 1000 == 999:
            points["val/loss"] = loss * 1.1
        run.log(points, step=step)
        if step % 10_000 == 0:
            while run.stats()["queued"] > 100_000:  # pace to the daemon: the SDK drops the oldest past 400k
                time.sleep(0.01)
    run.finish()
    assert run.stats()["dropped"] == 0, run.stats()
    return run.id


def stored(d, run_id: str) -> int:
    body = d.client.get(f"/api/v1/runs/{run_id}/metrics?names=train/loss&x=step&points=1")
    return sum(c or 0 for c in body["series"].get("train/loss", {}).get("count", []))


def wait_packed(d, run_id: str, timeout: float = 180.0) -> float:
    """Until the rollup actor's compaction (once a minute, then backlog passes) has packed
    every chunk of the run, as a run read after its first minute is; seconds waited."""
    from gpuplaned.store.database import open_reader

    conn = open_reader(d.home / "gpuplane.db")
    t = time.perf_counter()
    try:
        while time.perf_counter() - t < timeout:
            left = conn.execute("SELECT count(*) FROM ts_chunks c JOIN ts_series s ON s.id = c.series_id "
                                "WHERE s.kind = 'run' AND s.owner = ? AND c.packed = 0", (run_id,)).fetchone()[0]
            if left == 0:
                break
            time.sleep(0.5)
    finally:
        conn.close()
    return time.perf_counter() - t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="100k points, 10 repeats")
    parser.add_argument("--profile", action="store_true", help="profile one in-process diagnosis (stderr)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeat = 100_000, 10
    root = Path(tempfile.mkdtemp(prefix="gpuplane-diagnose-bench-"))
    dm = JobDaemons(sys.executable, root, None)
    try:
        d = dm.start("--gpus", "fake:1")
        t = time.perf_counter()
        run_id = log_run(d, args.steps)
        while stored(d, run_id) < args.steps:
            if time.perf_counter() - t > 300:
                raise SystemExit(f"only {stored(d, run_id)} of {args.steps} points stored after 300 s")
            time.sleep(0.2)
        print(f"[bench] {args.steps} points logged and stored in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        fresh_ms = []
        for _ in range(FRESH):
            t = time.perf_counter()
            d.client.get(f"/api/v1/runs/{run_id}/diagnosis")
            fresh_ms.append((time.perf_counter() - t) * 1000)
        waited = wait_packed(d, run_id)
        print(f"[bench] compacted {waited:.0f} s after", file=sys.stderr)

        http_ms = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            found = d.client.get(f"/api/v1/runs/{run_id}/diagnosis")
            http_ms.append((time.perf_counter() - t) * 1000)

        from gpuplaned.service.api.diagnosis import diagnosis_data
        from gpuplaned.store.database import open_reader

        conn = open_reader(d.home / "gpuplane.db")
        direct_ms = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            diagnosis_data(conn, run_id)
            direct_ms.append((time.perf_counter() - t) * 1000)
        if args.profile:
            import cProfile
            import pstats

            profile = cProfile.Profile()
            profile.runcall(diagnosis_data, conn, run_id)
            pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(20)
        conn.close()
    finally:
        dm.stop_all()
        shutil.rmtree(root, ignore_errors=True)

    print(f"diagnose_run on a {args.steps}-point run ({args.repeat} times each)")
    for label, values in (("GET, just stored (unpacked)", fresh_ms), ("GET /runs/{id}/diagnosis", http_ms),
                          ("diagnosis_data, in process", direct_ms)):
        s = stats(values)
        verdict = "PASS" if s["median"] <= TARGET_P50_MS else "FAIL"
        print(f"  {label:<30} p50 {s['median']:7.1f} ms  p99 {s['p99']:7.1f} ms  "
              f"(target p50 <= {TARGET_P50_MS:.0f} ms: {verdict})")
    print(f"  summary: {found['summary']}")
    for f in found["findings"]:
        print(f"    [{f['severity']}] {f['kind']}: {f['claim']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
