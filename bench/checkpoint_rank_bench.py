"""Ranking a run's checkpoints: the metric at each checkpoint's step, as the checkpoint listing,
best-checkpoint, retention and the evaluate policy read it.

    .venv/bin/python bench/checkpoint_rank_bench.py            # 4M points, 100 checkpoints
    .venv/bin/python bench/checkpoint_rank_bench.py --quick    # 400k points

One run's loss series is ingested into a temporary database the way the store writes it
(SDK-sized batches, then compaction);
then the value at each of 100 checkpoint steps is read two ways, side by side on one
reader connection: one ``query_series(points=1)`` per checkpoint (what ranking did before)
and ``run_records.values_at_steps`` (the chunks around each step, each decoded once). Both
must agree. Prints the median of ``--repeat`` runs of each and their ratio; target: the
listing's ranking under 100 ms.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuplaned import tsdb  # noqa: E402
from gpuplaned.service.api.run_records import values_at_steps  # noqa: E402
from gpuplaned.store.database import open_reader, open_writer  # noqa: E402

T0 = 1_700_000_000_000
BATCH = 2_000  # an SDK batch's worth; compaction then packs them as the daemon does
TARGET_MS = 100.0


def fill(path: Path, points: int) -> None:
    conn = open_writer(path)
    for seq, first in enumerate(range(0, points, BATCH)):
        steps = list(range(first, min(points, first + BATCH)))
        cols = {"ts": [T0 + s for s in steps], "step": steps, "value": [1.0 / (1 + s) for s in steps]}
        conn.execute("BEGIN IMMEDIATE")
        tsdb.ingest(conn, "run", "run_bench", {"loss": cols}, source="bench", seq=seq, now_ms=T0)
        conn.execute("COMMIT")
    more = 1
    while more:
        conn.execute("BEGIN IMMEDIATE")
        more = tsdb.compact(conn)["more"]
        conn.execute("COMMIT")
    conn.close()


def one_query_each(conn, steps: list[int]) -> list[float | None]:
    out = []
    for step in steps:
        found = tsdb.query_series(conn, "run", "run_bench", ["loss"], start=0, end=step, points=1, x="step")
        out.append((found["series"].get("loss", {}).get("last") or [None])[-1])
    return out


def median_ms(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=4_000_000)
    parser.add_argument("--checkpoints", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.points = 400_000
    root = Path(tempfile.mkdtemp(prefix="gpuplane-ckrank-"))
    try:
        t = time.perf_counter()
        fill(root / "g.db", args.points)
        print(f"[bench] {args.points} points ingested in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        conn = open_reader(root / "g.db")
        every = args.points // args.checkpoints
        steps = [every * (k + 1) - 1 for k in range(args.checkpoints)]
        before_ms, before = median_ms(lambda: one_query_each(conn, steps), args.repeat)
        after_ms, after = median_ms(lambda: values_at_steps(conn, "run_bench", "loss", steps), args.repeat)
        assert before == after, "the two readings disagree"
        print(f"{args.checkpoints} checkpoints over {args.points} points (median of {args.repeat})")
        print(f"  one query_series per checkpoint   {before_ms:9.1f} ms")
        print(f"  values_at_steps                   {after_ms:9.1f} ms   {before_ms / after_ms:.1f}x faster")
        print(f"  target <= {TARGET_MS:g} ms  {'PASS' if after_ms <= TARGET_MS else 'FAIL'}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
