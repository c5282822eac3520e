"""How long the store's start-up check (``PRAGMA quick_check``) takes on a ~1 GB database.

Builds a store file with the real schema (``gpuplaned.store.database.open_writer``) in a
temporary dir, filled the way a long-lived store is: packed metric chunks (blobs, two
indexes), events (two indexes) and job log tails. Then it times ``open_writer``, which is
what the store's start costs (it reads the file through once, then runs the check), and
``PRAGMA quick_check`` alone, with the file in the page cache (warm, median of 3) and after
its cached pages were dropped (cold: ``posix_fadvise(DONTNEED)`` on this file only, so the
disk is read again). Alone and cold, the check reads page by page in b-tree order, which
is what the read-through avoids.

    .venv/bin/python bench/quick_check_bench.py               # ~1 GB, about a minute
    .venv/bin/python bench/quick_check_bench.py --size-mb 100 # smoke run
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuplaned.store.database import open_writer  # noqa: E402

CHUNK_BYTES = 4096  # a packed chunk of a few thousand points
EVENT_BYTES = 300  # message + JSON context
LOG_LINE_BYTES = 120
SHARES = {"chunks": 0.85, "events": 0.10, "logs": 0.05}


def build(path: Path, size_mb: int) -> None:
    open_writer(path).close()  # the real schema, migrated
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    rng = random.Random(1)
    target = size_mb << 20
    conn.execute("BEGIN")
    series = [conn.execute("INSERT INTO ts_series (kind, owner, name) VALUES ('run', ?, ?)",
                           (f"run_{i // 20}", f"train/m{i % 20}")).lastrowid for i in range(2000)]
    n = int(target * SHARES["chunks"] / (CHUNK_BYTES + 120))
    conn.executemany(
        "INSERT INTO ts_chunks (series_id, res, packed, start_ts, end_ts, n, count, nan, last_ts, data) "
        "VALUES (?, 0, 1, ?, ?, 512, 512, 0, ?, ?)",
        ((series[i % len(series)], i * 1000, i * 1000 + 999, i * 1000 + 999, rng.randbytes(CHUNK_BYTES))
         for i in range(n)))
    n = int(target * SHARES["events"] / (EVENT_BYTES + 150))
    conn.executemany(
        "INSERT INTO events (id, ts, type, severity, run_id, job_id, message, context) "
        "VALUES (?, ?, ?, 'info', ?, ?, ?, '{}')",
        ((f"ev_{i:012d}", i, ("LOSS_NAN", "OOM", "GPU_UNDERUTILIZED")[i % 3], f"run_{i % 5000}", f"job_{i % 5000}",
          rng.randbytes(EVENT_BYTES // 2).hex()) for i in range(n)))
    n = int(target * SHARES["logs"] / (LOG_LINE_BYTES + 60))
    conn.executemany(
        "INSERT INTO job_logs (job_id, attempt, stream, offset, line) VALUES (?, 1, 'stdout', ?, ?)",
        ((f"job_{i % 5000}", i, rng.randbytes(LOG_LINE_BYTES // 2).hex()) for i in range(n)))
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def time_quick_check(path: Path) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    start = time.perf_counter()
    result = conn.execute("PRAGMA quick_check").fetchall()
    elapsed = time.perf_counter() - start
    conn.close()
    assert result == [("ok",)], result
    return elapsed


def time_open(path: Path) -> float:
    start = time.perf_counter()
    open_writer(path).close()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="database size to build (default 1024)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpuplane-quick-check-"))
    path = tmp / "gpuplane.db"
    try:
        start = time.perf_counter()
        build(path, args.size_mb)
        size = path.stat().st_size
        print(f"built {path} ({size / (1 << 20):.0f} MiB) in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        drop_cache(path)
        cold = time_quick_check(path)
        drop_cache(path)
        cold_open = time_open(path)
        warm = statistics.median(time_quick_check(path) for _ in range(3))
        warm_open = statistics.median(time_open(path) for _ in range(3))
        gib = size / (1 << 30)
        print(f"database size                 {size / (1 << 20):8.0f} MiB")
        print(f"PRAGMA quick_check, cold      {cold:8.2f} s   ({cold / gib:.2f} s per GiB)")
        print(f"PRAGMA quick_check, warm      {warm:8.2f} s   ({warm / gib:.2f} s per GiB)")
        print(f"store start (open_writer), cold {cold_open:6.2f} s   (read-through + quick_check + open)")
        print(f"store start (open_writer), warm {warm_open:6.2f} s")
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
