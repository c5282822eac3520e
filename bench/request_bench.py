#!/usr/bin/env python3
"""What a control-socket request costs the daemon on a connection of its own against one a
client keeps alive (``gpuplanectl.client.DaemonClient`` keeps one since 2026-12-07).

One fresh daemon (``--gpus none``, its scheduler stopped, so a submit only queues) in a temp
dir; this process sends, with ``DaemonClient``, ``--requests`` of each request kind, first on a
new connection each (``DaemonClient.close()`` after every request, as before), then on the kept
one, ``--reps`` times interleaved. Reported per kind and way: the median round trip and the
daemon's CPU a request (its process's utime+stime over the requests, psutil), and the ratio.

Usage::

    .venv/bin/python bench/request_bench.py                 # 3 reps of 300 requests a kind and way
    .venv/bin/python bench/request_bench.py --reps 5 --requests 500 --root /dev/shm

Exits 0 unless the arguments are wrong; the daemon is stopped and its temp dir removed on the
way out.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs_bench import Daemon, JobDaemons  # noqa: E402

WAYS = ("a connection each", "kept alive")
WARM_UP = 30


def kinds(d: Daemon, job_id: str) -> dict[str, Callable[[], Any]]:
    return {
        "GET /api/v1/daemon": lambda: d.client.get("/api/v1/daemon"),
        "GET /api/v1/jobs/{id}": lambda: d.job(job_id),
        "POST /api/v1/jobs": lambda: d.submit(["true"], gpu=0),
    }


def measure(d: Daemon, proc: psutil.Process, request: Callable[[], Any], n: int, kept: bool) -> tuple[float, float]:
    """(median round trip, daemon CPU a request), in seconds."""
    def one() -> None:
        request()
        if not kept:
            d.client.close()

    for _ in range(WARM_UP):
        one()
    times = []
    before = proc.cpu_times()
    for _ in range(n):
        t = time.perf_counter()
        one()
        times.append(time.perf_counter() - t)
    after = proc.cpu_times()
    return statistics.median(times), ((after.user + after.system) - (before.user + before.system)) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="requests of each kind, each way, a rep")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--root", type=Path, default=None, help="where the daemon's temp dir goes")
    args = parser.parse_args()
    if args.requests < 1 or args.reps < 1:
        parser.error("--requests and --reps must be at least 1")
    root = Path(tempfile.mkdtemp(prefix="gpuplane-request-bench-", dir=args.root))
    dm = JobDaemons(sys.executable, root, "warning")
    d = dm.start("--gpus", "none", "--max-cpu-jobs", "1")
    try:
        d.client.post("/api/v1/actors/scheduler/stop", {})
        proc = psutil.Process(d.proc.pid)
        job_id = d.submit(["true"], gpu=0)["id"]
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _ in range(args.reps):
            for name, request in kinds(d, job_id).items():
                for way in WAYS:
                    results.setdefault((name, way), []).append(
                        measure(d, proc, request, args.requests, kept=way == "kept alive"))
    finally:
        dm.stop(d.proc)
        shutil.rmtree(root, ignore_errors=True)

    print(f"{args.reps} reps of {args.requests} requests a kind and way, interleaved; medians over the reps")
    print(f"{'request':24s} {'way':18s} {'round trip':>11s} {'daemon CPU':>11s}")
    for name in kinds(d, job_id):
        cpu = {}
        for way in WAYS:
            runs = results[(name, way)]
            wall, cpu[way] = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
            print(f"{name:24s} {way:18s} {wall * 1e3:8.2f} ms {cpu[way] * 1e3:8.2f} ms")
        print(f"{'':24s} {'kept / each':18s} {'':>11s} {cpu['kept alive'] / cpu['a connection each']:10.2f}x")


if __name__ == "__main__":
    main()
