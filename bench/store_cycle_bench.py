#!/usr/bin/env python3
"""Benchmark the store's side of one job's cycle in this process, with no daemon around it, and
what a cold cache does to it.

A queue drained at one slot costs the store two transactions a job (``jobs_bench.py`` section
2): the previous job's end with the scheduling pass that dispatches this one, then this job's
RUNNING report. Here the same functions run on the real schema, with the change triggers
(``store.change_topics``), on a fresh database: ``job_rows.apply_status`` and
``passes.dispatch.schedule`` in ``store.writer.commit_batch``, back to back for ``--jobs`` jobs.

Then again with other work between the transactions: ``--pollute`` small dicts made and dropped
before each one, as the daemon's other actors (the runner, the launcher's replies, the log and
TensorBoard tailers, the HTTP front) run between two of the store's transactions and take the
CPU's caches. ``jobs_bench.py`` gives the daemon's CPU a job; this gives the floor under the
store's part of it, and how far cache misses lift that floor (on this project's 2-core VMs the
daemon's store actor spends about three times the first figure a job).

Usage::

    .venv/bin/python bench/store_cycle_bench.py                       # 1,000 jobs, pollute 0/2,000/20,000
    .venv/bin/python bench/store_cycle_bench.py --jobs 300 --pollute 0,5000
    .venv/bin/python bench/store_cycle_bench.py --root /tmp           # the database there (default: tmpfs)

Exits 0 unless the arguments are wrong. Standard library and the daemon's own packages.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuplaned.protocol.agent import Hello, JobStatus
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.runtime.call import Reply
from gpuplaned.service.passes import dispatch
from gpuplaned.store import change_topics, job_rows
from gpuplaned.store.database import open_writer
from gpuplaned.store.writer import Write, commit_batch

PARTS = ("end + pass, one transaction", "RUNNING, one transaction", "the pass", "the end's apply_status",
         "RUNNING's apply_status")


class Store:
    """A fresh store with one node of one CPU slot, written as the store actor writes."""

    def __init__(self, folder: Path) -> None:
        self.conn = open_writer(folder / "gpuplane.db")
        self.marks = change_topics.track(self.conn)
        self.node_id, _ = self.write(lambda c: job_rows.register_node(c, Hello("bench", "0", (), max_cpu_jobs=1),
                                                                      _now_ms()))

    def write(self, apply: Callable[[sqlite3.Connection], Any]) -> Any:
        [(ok, value)] = commit_batch(self.conn, [Write(apply, Reply(), True)], self.marks)  # the outcome comes back here
        self.marks.take()
        if not ok:
            raise value
        return value

    def queue(self, count: int) -> None:
        nodes = self.write(lambda c: job_rows.capacities(c, {self.node_id}))
        spec = JobSpec(name="bench", command=("true",), cwd="/tmp", env={"PATH": "/bin"}, gpu=0)
        for _ in range(count):
            self.write(lambda c: job_rows.insert_job(c, spec, _now_ms(), nodes))

    def close(self) -> None:
        self.conn.close()


def _now_ms() -> int:
    return int(time.time() * 1000)


def cycles(store: Store, count: int, pollute: int, running: Any = None) -> tuple[dict[str, Any], Any]:
    """``count`` job cycles after ``running`` (the job on the slot, None: it is free); per part,
    seconds a job, the process's CPU a job, and the job left running."""
    spent: Counter[str] = Counter()

    def timed(part: str, apply: Callable[[sqlite3.Connection], Any]) -> Callable[[sqlite3.Connection], Any]:
        def run(conn: sqlite3.Connection) -> Any:
            start = time.perf_counter()
            try:
                return apply(conn)
            finally:
                spent[part] += time.perf_counter() - start
        return run

    def other_work() -> None:
        if pollute:
            [{"i": i, "s": str(i)} for i in range(pollute)]  # made and dropped

    node_id = store.node_id
    previous = running
    cpu0 = time.process_time()
    for _ in range(count):
        ended = previous

        def end_and_pass(conn: sqlite3.Connection) -> Any:
            if ended is not None:
                timed("the end's apply_status", lambda c: job_rows.apply_status(
                    c, node_id, JobStatus(ended.job_id, ended.attempt, "SUCCEEDED", exit_code=0), _now_ms()))(conn)
            return timed("the pass", lambda c: dispatch.schedule(c, _now_ms(), {node_id}))(conn)

        other_work()
        start = time.perf_counter()
        [placed] = store.write(end_and_pass)
        spent["end + pass, one transaction"] += time.perf_counter() - start
        job = previous = placed.job
        other_work()
        start = time.perf_counter()
        store.write(timed("RUNNING's apply_status", lambda c: job_rows.apply_status(
            c, node_id, JobStatus(job.job_id, job.attempt, "RUNNING", pid=1), _now_ms())))
        spent["RUNNING, one transaction"] += time.perf_counter() - start
    cpu = time.process_time() - cpu0
    per_job = {part: spent[part] / count for part in PARTS}
    return {"pollute": pollute, "jobs": count, "per_job_s": per_job,
            "store_s": per_job["end + pass, one transaction"] + per_job["RUNNING, one transaction"],
            "process_cpu_s": cpu / count}, previous


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, help="job cycles per setting (default 1000)")
    parser.add_argument("--pollute", default="0,2000,20000",
                        help="dicts made and dropped before each transaction, per setting (default 0,2000,20000)")
    parser.add_argument("--root", type=Path, default=Path("/dev/shm") if os.path.isdir("/dev/shm") else None,
                        help="where the database's temp dir is made (default /dev/shm: no disk in the figures)")
    args = parser.parse_args(argv)
    try:
        settings = [int(p) for p in args.pollute.split(",") if p.strip()]
    except ValueError:
        parser.error("--pollute takes comma-separated integers")
    if args.jobs < 1 or not settings or min(settings) < 0:
        parser.error("counts must be positive")
    os.umask(0o077)  # the database is made private, as the daemon's is
    results = []
    for pollute in settings:
        folder = Path(tempfile.mkdtemp(prefix="gpuplane-store-cycle-", dir=args.root))
        try:
            store = Store(folder)
            try:
                warm_up = min(50, args.jobs)
                store.queue(warm_up + args.jobs + 1)
                _, running = cycles(store, warm_up, pollute)  # imports, SQLite's statement cache
                results.append(cycles(store, args.jobs, pollute, running)[0])
            finally:
                store.close()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    print(f"the store's side of a job cycle, in process ({sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"database under {args.root or tempfile.gettempdir()}, {args.jobs} jobs a setting)")
    width = 36
    print(f"{'other work before each transaction':<{width}}" + "".join(f"{str(r['pollute']) + ' dicts':>16}" for r in results))
    base = results[0]["store_s"]
    rows = [("the store a job (two transactions)", [r["store_s"] for r in results])]
    rows += [(f"  {part}", [r["per_job_s"][part] for r in results]) for part in PARTS]
    for label, values in rows:
        print(f"{label:<{width}}" + "".join(f"{v * 1e6:>13.1f} us" for v in values))
    print(f"{'against no other work':<{width}}" + "".join(f"{r['store_s'] / base:>15.2f}x" for r in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
