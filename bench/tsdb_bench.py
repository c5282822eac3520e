"""Time-series engine: ingest rate, bytes per point and chart query latency (docs/timeseries.md).

    .venv/bin/python bench/tsdb_bench.py           # full run, about 20 s on 2 CPUs
    .venv/bin/python bench/tsdb_bench.py --quick   # smoke run with smaller data

Every database lives in a temporary dir removed at the end. Writes run the way the store
actor runs them: BEGIN IMMEDIATE, a SAVEPOINT per call, COMMIT every few calls. Query
times are the median of repeated runs on a read-only connection. Exits 0 whatever it
measures; each figure is printed beside its target with PASS or FAIL.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuplaned import tsdb  # noqa: E402
from gpuplaned.store.database import open_reader, open_writer  # noqa: E402

T0 = 1_700_000_100_000 // 300_000 * 300_000
DAY_MS = 86_400_000
SERIES_PER_CALL = 20
POINTS_PER_SERIES = 500
CALLS_PER_COMMIT = 10


def report(label: str, value: float, unit: str, target: float, higher_is_better: bool, note: str = "") -> None:
    ok = value >= target if higher_is_better else value <= target
    sign = ">=" if higher_is_better else "<="
    print(f"{label:<44} {value:>12,.1f} {unit:<8} target {sign} {target:,} {unit:<8} "
          f"{'PASS' if ok else 'FAIL'}{'  ' + note if note else ''}", flush=True)


def info(label: str, text: str) -> None:
    print(f"{label:<44} {text}", flush=True)


def in_transactions(conn: sqlite3.Connection, applies) -> None:
    """The store actor's write shape: one transaction per CALLS_PER_COMMIT calls."""
    for i, apply in enumerate(applies):
        if i % CALLS_PER_COMMIT == 0:
            conn.execute("BEGIN IMMEDIATE")
        conn.execute("SAVEPOINT write")
        apply(conn)
        conn.execute("RELEASE write")
        if i % CALLS_PER_COMMIT == CALLS_PER_COMMIT - 1:
            conn.execute("COMMIT")
    if conn.in_transaction:
        conn.execute("COMMIT")


def training_series(n: int, seed: int = 1) -> tuple[list[int], list[int], list[float]]:
    """A noisy decaying loss: step +1, ts +100..300 ms."""
    rnd = random.Random(seed)
    ts, t = [], T0
    for _ in range(n):
        t += rnd.randint(100, 300)
        ts.append(t)
    values = [0.1 + 2.5 * math.exp(-i / (n / 5)) + 0.05 * rnd.gauss(0, 1) * math.exp(-i / n) for i in range(n)]
    return ts, list(range(n)), values


def node_series(n: int, start: int, seed: int) -> tuple[list[int], list[float]]:
    """GPU utilization every 2 s: busy plateaus with idle dips, integer percent."""
    rnd = random.Random(seed)
    ts = [start + 2000 * i + rnd.randint(-20, 20) for i in range(n)]
    values, busy = [], True
    for _ in range(n):
        if rnd.random() < 0.002:
            busy = not busy
        values.append(float(min(100, max(0, rnd.gauss(96, 3)))) // 1 if busy else float(rnd.choice((0, 0, 1))))
    return ts, values


def db_size(path: Path, conn: sqlite3.Connection) -> int:
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def bench_ingest(tmp: Path, calls: int) -> None:
    names = [f"metric{i}" for i in range(SERIES_PER_CALL)]
    rnd = random.Random(3)
    values = [[rnd.gauss(1, 0.1) for _ in range(POINTS_PER_SERIES)] for _ in names]
    batches = []
    for c in range(calls):
        ts = [T0 + (c * POINTS_PER_SERIES + i) * 200 for i in range(POINTS_PER_SERIES)]
        steps = list(range(c * POINTS_PER_SERIES, (c + 1) * POINTS_PER_SERIES))
        batches.append((ts, steps))
    total = calls * SERIES_PER_CALL * POINTS_PER_SERIES

    conn = open_writer(tmp / "ingest.db")
    applies = [
        (lambda c, ts=ts, steps=steps, seq=seq: tsdb.ingest(
            c, "run", "run-1", {n: {"ts": ts, "step": steps, "value": v} for n, v in zip(names, values)},
            source="sdk-1", seq=seq))
        for seq, (ts, steps) in enumerate(batches)
    ]
    t = time.perf_counter()
    in_transactions(conn, applies)
    rate = total / (time.perf_counter() - t)
    t = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    tsdb.compact(conn)
    conn.execute("COMMIT")
    compact_rate = total / (time.perf_counter() - t)
    conn.close()

    # The seed's row-per-point shape (0001_initial.sql metrics_raw with its index).
    base = sqlite3.connect(tmp / "baseline.db", isolation_level=None)
    base.execute("PRAGMA journal_mode = WAL")
    base.execute("PRAGMA synchronous = NORMAL")
    base.execute("CREATE TABLE metrics_raw (run_id TEXT NOT NULL, ts INTEGER NOT NULL, step INTEGER,"
                 " name TEXT NOT NULL, value REAL NOT NULL)")
    base.execute("CREATE INDEX idx_metrics_raw ON metrics_raw(run_id, name, ts)")
    base_applies = [
        (lambda c, ts=ts, steps=steps: [c.executemany(
            "INSERT INTO metrics_raw (run_id, ts, step, name, value) VALUES ('run-1', ?, ?, ?, ?)",
            zip(ts, steps, [n] * len(ts), v)) for n, v in zip(names, values)])
        for ts, steps in batches
    ]
    t = time.perf_counter()
    in_transactions(base, base_applies)
    base_rate = total / (time.perf_counter() - t)
    base_bytes = db_size(tmp / "baseline.db", base) / total
    base.close()
    report(f"ingest ({calls} calls x {SERIES_PER_CALL} series x {POINTS_PER_SERIES})", rate, "points/s",
           1_000_000, True, f"row-per-point executemany: {base_rate:,.0f}/s ({rate / base_rate:.1f}x)")
    info("compaction (merge + compress the above)", f"{compact_rate:,.0f} points/s; ingest and compaction "
         f"together {1 / (1 / rate + 1 / compact_rate):,.0f} points/s")
    info("row-per-point baseline size", f"{base_bytes:.1f} bytes/point")


def bench_training(tmp: Path, n: int, repeats: int) -> None:
    path = tmp / "training.db"
    conn = open_writer(path)
    empty = db_size(path, conn)
    ts, steps, values = training_series(n)
    applies = [
        (lambda c, i=i: tsdb.ingest(c, "run", "run-1", {"loss": {
            "ts": ts[i:i + 500], "step": steps[i:i + 500], "value": values[i:i + 500]}}, source="sdk", seq=i))
        for i in range(0, n, 500)
    ]
    in_transactions(conn, applies)
    conn.execute("BEGIN IMMEDIATE")
    tsdb.compact(conn)
    conn.execute("COMMIT")
    size = db_size(path, conn) - empty
    conn.close()
    report(f"size, training series ({n:,} points)", size / n, "B/point", 16, False)

    reader = open_reader(path)
    points = n // 500  # the target's shape: 1M points to 2000, 500 points a bucket
    for x in ("step", "ts"):
        timings, buckets = [], 0
        for _ in range(repeats):
            t = time.perf_counter()
            q = tsdb.query_series(reader, "run", "run-1", ["loss"], points=points, x=x)
            timings.append((time.perf_counter() - t) * 1000)
            buckets = len(q["x"])
        report(f"downsample {n:,} points to {points} (x={x})", statistics.median(timings), "ms", 30, False,
               f"{buckets} buckets, min {min(timings):.1f} ms")
    reader.close()


def bench_node(tmp: Path, n_series: int, days: int, repeats: int) -> None:
    path = tmp / "node.db"
    conn = open_writer(path)
    empty = db_size(path, conn)
    now = T0 + days * DAY_MS
    per_series = days * DAY_MS // 2000
    data = {f"gpu{i}.utilization": node_series(per_series, T0, seed=i) for i in range(n_series)}
    # An agent's report every 10 minutes (300 samples per series), one transaction per 10 reports.
    applies = [
        (lambda c, i=i: tsdb.ingest(c, "node", "node-1", {
            name: {"ts": ts[i:i + 300], "value": vs[i:i + 300]} for name, (ts, vs) in data.items()},
            source="node-1", seq=i))
        for i in range(0, per_series, 300)
    ]
    in_transactions(conn, applies)
    t = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    built = tsdb.rollup_pass(conn, now)
    conn.execute("COMMIT")
    rollup_s = time.perf_counter() - t
    size_all = db_size(path, conn) - empty
    total = n_series * per_series
    info(f"rollup pass over {days} days x {n_series} series", f"{rollup_s:.1f} s "
         f"({built['1m']:,} 1m + {built['5m']:,} 5m buckets, compaction included)")
    report(f"size, node series ({total:,} points at 2 s)", size_all / total, "B/point", 16, False,
           "raw + 1m + 5m rollups")
    conn.close()

    reader = open_reader(path)
    names = list(data)
    timings, q = [], {}
    for _ in range(repeats):
        t = time.perf_counter()
        q = tsdb.query_series(reader, "node", "node-1", names, now - 7 * DAY_MS, now, points=1000)
        timings.append((time.perf_counter() - t) * 1000)
    report(f"7-day query, {n_series} series, 1000 points", statistics.median(timings), "ms", 50, False,
           f"resolution {q['resolution']}, {len(q['x'])} buckets, min {min(timings):.1f} ms")
    timings = []
    for _ in range(repeats):
        t = time.perf_counter()
        q = tsdb.query_series(reader, "node", "node-1", names, now - DAY_MS, now, points=1000)
        timings.append((time.perf_counter() - t) * 1000)
    info(f"1-day query, {n_series} series, 1000 points", f"{statistics.median(timings):.1f} ms "
         f"(resolution {q['resolution']}, {len(q['x'])} buckets)")
    reader.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller data, fewer repeats")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tsdb-bench-"))
    try:
        print(f"python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs"
              f"{', quick' if args.quick else ''}", flush=True)
        bench_ingest(tmp, calls=40 if args.quick else 200)
        bench_training(tmp, n=200_000 if args.quick else 1_000_000, repeats=3 if args.quick else 9)
        bench_node(tmp, n_series=10, days=7, repeats=3 if args.quick else 9)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
