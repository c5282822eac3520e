"""The detector's cost per ingested point against the ingest's own CPU (issue 16: under 5% at
500k points/s).

    .venv/bin/python bench/detector_bench.py           # about 10 s
    .venv/bin/python bench/detector_bench.py --quick   # smoke run

The metric rules run inside the ingest's summary fold (LOSS_NAN, LOSS_SPIKE, OVERFITTING_SUSPECTED,
the progress marks, the events' switches and evidence), so their CPU is measured there: each
rule call is wrapped with a process-time counter while batches go through what the SDK's
batch route runs (``tsdb.ingest`` + ``sessions.summarize``, one transaction per batch). The
stall pass runs every ``[detector] interval_s`` whatever the point rate: its CPU per pass over
``--jobs`` running jobs is amortised over a second of ingest at 500k points/s. Printed as
ratios of the ingest's CPU; exits 0 whatever it measures.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuplaned import tsdb  # noqa: E402
from gpuplaned.config import DetectorConfig  # noqa: E402
from gpuplaned.domain import run_progress, run_summary  # noqa: E402
from gpuplaned.domain.rules.stall import StallPolicy  # noqa: E402
from gpuplaned.protocol.agent import LogChunk  # noqa: E402
from gpuplaned.service.api import sessions
from gpuplaned.service.passes import detector
from gpuplaned.store import log_rows  # noqa: E402
from gpuplaned.store.database import open_writer  # noqa: E402

RATE = 500_000  # points per second the target is stated at
TARGET = 0.05


class Counter:
    """Wraps ``module.name`` so that its process time adds up in ``spent``."""

    def __init__(self, module, name: str) -> None:
        self.module, self.name, self.inner = module, name, getattr(module, name)
        self.spent = 0

        def timed(*args, **kwargs):
            started = time.process_time_ns()
            try:
                return self.inner(*args, **kwargs)
            finally:
                self.spent += time.process_time_ns() - started

        setattr(module, name, timed)

    def restore(self) -> None:
        setattr(self.module, self.name, self.inner)


def batches(count: int, size: int, seed: int = 1):
    """SDK-like batches: a noisy loss and an lr on every step, a grad norm, an eval loss every 500 steps."""
    rng = random.Random(seed)
    per_step = 3
    steps_per_batch = size // per_step
    for b in range(count):
        steps = list(range(b * steps_per_batch, (b + 1) * steps_per_batch))
        ts = [1_700_000_000_000 + s * 10 for s in steps]
        loss = [2.0 * math.exp(-s / 20_000) + 0.1 + rng.gauss(0, 0.02) for s in steps]
        metrics = {"train/loss": {"step": steps, "ts": ts, "value": loss},
                   "train/lr": {"step": steps, "ts": ts, "value": [1e-3] * len(steps)},
                   "train/grad_norm": {"step": steps, "ts": ts, "value": [abs(v) for v in loss]}}
        evals = [s for s in steps if s % 500 == 499]
        if evals:
            metrics["eval/loss"] = {"step": evals, "ts": [ts[0]] * len(evals), "value": [1.0] * len(evals)}
        yield metrics


def measure_ingest(db: Path, count: int, size: int) -> tuple[int, int, dict[str, int]]:
    conn = open_writer(db)
    conn.execute("INSERT INTO runs (id, source, status, created_at) VALUES ('run_1', 'sdk', 'RUNNING', 0)")
    counters = [Counter(run_summary, "_loss_rules"), Counter(run_summary, "_overfitting"),
                Counter(run_progress, "track"), Counter(detector, "summary_events")]
    rules = DetectorConfig()
    points = total = 0
    try:
        for seq, metrics in enumerate(batches(count, size)):
            started = time.process_time_ns()
            conn.execute("BEGIN IMMEDIATE")
            result = tsdb.ingest(conn, "run", "run_1", metrics, source="bench", seq=seq)
            sessions.summarize(conn, "run_1", metrics, 0, rules)
            conn.execute("COMMIT")
            total += time.process_time_ns() - started
            points += result.points
    finally:
        for c in counters:
            c.restore()
        conn.close()
    return points, total, {c.name: c.spent for c in counters}


def measure_stall_pass(db: Path, jobs: int, repeats: int) -> float:
    conn = open_writer(db)
    for j in range(jobs):
        conn.execute("INSERT INTO jobs (id, name, type, status, command, attempt, created_at) "
                     "VALUES (?, 'j', 'process', 'RUNNING', '[\"x\"]', 1, 0)", (f"job_{j}",))
        log_rows.keep_tails(conn, [LogChunk(f"job_{j}", 1, stream, 0, 400, tuple((k * 40, "x" * 39) for k in range(10)))
                                   for stream in ("stdout", "stderr")], 1000)
    conn.commit()
    states: dict = {}
    times = []
    for k in range(repeats):
        started = time.process_time_ns()
        detector.stall_pass(conn, states, k * 1000, k * 1000, StallPolicy())
        times.append(time.process_time_ns() - started)
    conn.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--batch-points", type=int, default=30_000)
    parser.add_argument("--jobs", type=int, default=64, help="running jobs the stall pass looks at")
    parser.add_argument("--daemon-us-per-point", type=float,
                        help="the daemon's whole ingest CPU per point (bench/sdk_bench.py's ingest section prints "
                             "it): also judge the rules against that")
    args = parser.parse_args()
    count = 10 if args.quick else args.batches
    with tempfile.TemporaryDirectory() as tmp:
        points, total, spent = measure_ingest(Path(tmp) / "ingest.db", count, args.batch_points)
        stall_ns = measure_stall_pass(Path(tmp) / "stall.db", args.jobs, 5 if args.quick else 21)
    rules = sum(spent.values())
    ingest = total - rules  # the ingest's own CPU, without the rules
    per_point = ingest / points
    print(f"points ingested                {points:>12,} in {count} batches of {args.batch_points:,}")
    print(f"ingest CPU per point           {per_point:>12.1f} ns  ({1e9 / per_point:,.0f} points/s on one core)")
    for name, ns in spent.items():
        print(f"  rule {name:<24}{ns / points:>12.1f} ns/point  ({ns / ingest * 100:.2f}% of ingest)")
    ratio = rules / ingest
    added = (rules - spent["_loss_rules"]) / ingest
    # _loss_rules (LOSS_NAN, LOSS_SPIKE) predates the detector: numpy over a big batch (the points'
    # conversion to float64 is most of it), a Python step per point over a small one.
    print(f"rules new with the detector    {added:>12.4f}     (overfitting, progress marks, switches and evidence)")
    print(f"metric rules / ingest          {ratio:>12.4f}     target < {TARGET}  {'PASS' if ratio < TARGET else 'FAIL'}")
    interval = DetectorConfig().interval_s
    second = per_point * RATE  # the ingest's CPU for one second of points at RATE
    stall_ratio = stall_ns / interval / second
    print(f"stall pass ({args.jobs} running jobs)   {stall_ns / 1e6:>12.3f} ms per pass, every {interval:g} s: "
          f"{stall_ratio:.5f} of the ingest's CPU at {RATE:,} points/s")
    total_ratio = ratio + stall_ratio
    print(f"detector / ingest at {RATE:,}/s {total_ratio:>9.4f}     target < {TARGET}  "
          f"{'PASS' if total_ratio < TARGET else 'FAIL'}  (against the store's part of the ingest alone)")
    if args.daemon_us_per_point:
        # The daemon's ingest is more than tsdb.ingest: the HTTP request, JSON, the session's checks.
        whole = rules / points / (args.daemon_us_per_point * 1000) + stall_ratio * per_point / (
            args.daemon_us_per_point * 1000)
        print(f"detector / the daemon's ingest {whole:>9.4f}     target < {TARGET}  "
              f"{'PASS' if whole < TARGET else 'FAIL'}  ({args.daemon_us_per_point:g} us/point of daemon CPU)")


if __name__ == "__main__":
    main()
