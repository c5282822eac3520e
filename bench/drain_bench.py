#!/usr/bin/env python3
"""The daemon's CPU per job while it drains a queue, this checkout against an earlier commit,
interleaved: what a change to the job path saves, on a machine whose speed moves by half within
minutes (bench/README.md, "Two things on this box").

Each run starts a fresh daemon (``--gpus none --max-cpu-jobs SLOTS``, as ``jobs_bench.py``'s
drains), queues ``--jobs`` ``true`` jobs behind one blocker per slot, releases them, and measures
from the release until the last job has ended: jobs/s, the daemon's CPU a job (utime+stime, all
threads), and that CPU split into the event loop's thread and the worker threads. ``--against
REV`` runs the same drain on a checkout of REV (a ``git worktree`` in the temp dir, imported
through ``PYTHONPATH``) before each run of this checkout, ``--pairs`` times. ``--stop ACTOR,...``
stops those actors (``POST /api/v1/actors/{name}/stop``) before the drain: what an actor costs
the job path is the difference (a node actor only reads the jobs' files; the jobs run without it).

Usage::

    .venv/bin/python bench/drain_bench.py --against HEAD~3                # 1 slot, 1,000 jobs, 4 pairs
    .venv/bin/python bench/drain_bench.py --against main --slots 2 --pairs 3
    .venv/bin/python bench/drain_bench.py --stop tbtail,ckptwatch,logs    # this checkout alone
    .venv/bin/python bench/drain_bench.py --log-level warning             # without a job's log lines
    .venv/bin/python bench/drain_bench.py --root /tmp                     # the homes on disk (default tmpfs)

Always exits 0 unless the arguments are wrong; daemons are stopped and the temp dir (and the
worktree) removed on the way out, Ctrl-C included. Standard library, attrs, psutil and the other
benches' helpers.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import psutil

from daemon_bench import guarded_run, progress, raise_interrupt, report, run_meta
from jobs_bench import FILE_POLL, JOB_TIMEOUT, Daemon, JobDaemons, queue_behind_blockers, wait_all_ended, wait_until

REPO = Path(__file__).resolve().parent.parent


def checkout(rev: str, root: Path) -> Path:
    """A worktree of ``rev`` that imports as ``gpuplaned`` from ``PYTHONPATH`` (its ``actors/``
    linked in as ``gpuplaned.actors``, as the package's ``package-dir`` maps it when installed)."""
    tree = root / "against"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(tree), rev], check=True)
    (tree / "gpuplaned" / "actors").symlink_to("../actors")
    return tree


def remove_checkout(tree: Path) -> None:
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False,
                   capture_output=True)


def thread_cpu(proc: psutil.Process) -> dict[int, float]:
    return {t.id: t.user_time + t.system_time for t in proc.threads()}


@attrs.frozen
class Mark:
    """A daemon's CPU (its process, and per thread) and the wall clock, at one moment."""

    cpu: Any
    wall: float
    threads: dict[int, float]

    @classmethod
    def now(cls, proc: psutil.Process) -> Mark:
        return cls(proc.cpu_times(), time.perf_counter(), thread_cpu(proc))


def figures(jobs: int, main_thread: int, start: Mark, end: Mark, by_status: dict[str, int],
            posts: list[float] | None = None) -> dict[str, Any]:
    """A drain's figures from its marks: jobs/s, and the CPU a job, all of it, on the event
    loop's thread (``main_thread``) and on the others."""
    used = {tid: end.threads[tid] - start.threads.get(tid, 0.0) for tid in end.threads}
    loop_s = used.get(main_thread, 0.0)
    cpu_s = (end.cpu.user + end.cpu.system) - (start.cpu.user + start.cpu.system)
    return {"jobs_per_s": jobs / (end.wall - start.wall), "cpu_ms": cpu_s / jobs * 1e3, "loop_ms": loop_s / jobs * 1e3,
            "workers_ms": (sum(used.values()) - loop_s) / jobs * 1e3,
            "post_ms": statistics.median(posts) * 1e3 if posts else None, "by_status": by_status}


def started(dm: JobDaemons, slots: int, stop: list[str]) -> Daemon:
    """A fresh daemon of ``slots`` CPU slots, with the actors ``stop`` names stopped."""
    d: Daemon = dm.start("--gpus", "none", "--max-cpu-jobs", str(slots))
    for name in stop:
        d.client.post(f"/api/v1/actors/{name}/stop", {})
    return d


def ended(d: Daemon, proc: psutil.Process, ids: list[str]) -> tuple[Mark, dict[str, int]]:
    """Wait until every job of ``ids`` has ended: the mark as the last one did, and the jobs' count
    by status."""
    last: list[Mark] = []
    by_status = wait_all_ended(d, ids, on_last=lambda: last.append(Mark.now(proc)))
    return last[0], by_status


def drain(dm: JobDaemons, slots: int, jobs: int, stop: list[str], one_by_one: bool = False) -> dict[str, Any]:
    """One fresh daemon draining ``jobs`` queued ``true`` jobs at ``slots``; ``one_by_one``: the
    jobs POSTed one at a time to free slots instead (measured from the first POST)."""
    d = started(dm, slots, stop)
    posts: list[float] = []
    try:
        proc = psutil.Process(d.proc.pid)
        if one_by_one:
            for _ in range(20):  # warm up: the first jobs' code paths and the database's pages
                d.submit(["true"], gpu=0)
            time.sleep(0.5)
            start = Mark.now(proc)
            ids = []
            for _ in range(jobs):  # a new connection each, as the CLI makes
                sent = time.perf_counter()
                ids.append(d.submit(["true"], gpu=0)["id"])
                posts.append(time.perf_counter() - sent)
        else:
            go, ids = queue_behind_blockers(d, slots, jobs)
            time.sleep(0.5)  # the submits' passes and tails settle
            start = Mark.now(proc)
            go.touch()
        wait_until(lambda: (d.attempt_dir(ids[-1]) / "exit.json").exists(), JOB_TIMEOUT, FILE_POLL, "the last exit")
        end, by_status = ended(d, proc, ids)
    finally:
        dm.stop(d.proc)
    # The event loop runs on the process's first thread.
    return figures(jobs, d.proc.pid, start, end, by_status, posts)


def drain_together(dm: JobDaemons, trees: list[tuple[str, str | None]], slots: int, jobs: int,
                   stop: list[str]) -> list[dict[str, Any]]:
    """One fresh daemon per tree, each with ``jobs`` queued behind its blockers, released at the
    same moment and drained side by side: a swing of the machine's speed meets both. Each
    daemon's CPU a job is its own process's (its event loop and worker threads), so it still
    compares; jobs/s less so (the two share the cores)."""
    queued: list[tuple[str, Daemon, psutil.Process, Path, list[str]]] = []
    try:
        for name, path in trees:
            with daemons_import(path):
                d = started(dm, slots, stop)
            go, ids = queue_behind_blockers(d, slots, jobs)
            queued.append((name, d, psutil.Process(d.proc.pid), go, ids))
        time.sleep(0.5)  # the submits' passes and tails settle
        starts = [Mark.now(proc) for _, _, proc, _, _ in queued]
        for _, _, _, go, _ in queued:
            go.touch()
        ends: list[tuple[Mark, dict[str, int]] | None] = [None] * len(queued)

        def finish(i: int) -> None:
            _, d, proc, _, ids = queued[i]
            ends[i] = ended(d, proc, ids)

        waiters = [threading.Thread(target=finish, args=(i,)) for i in range(len(queued))]
        for waiter in waiters:
            waiter.start()
        for waiter in waiters:
            waiter.join()
    finally:
        for _, d, _, _, _ in queued:
            dm.stop(d.proc)
    runs = []
    for (name, d, _, _, _), start, found in zip(queued, starts, ends, strict=True):
        if found is None:
            raise RuntimeError(f"{name}: its drain did not finish")
        runs.append({"tree": name, **figures(jobs, d.proc.pid, start, *found)})
    return runs


def render(res: dict[str, Any]) -> str:
    meta = res["meta"]
    how = "POSTed one by one to" if meta["one_by_one"] else "queued, drained at"
    lines = [f"{meta['jobs']} true jobs {how} {meta['slots']} slot(s), a fresh daemon each run"
             f"{', the pair drained side by side' if meta['together'] else ''} "
             f"(load average at start {'/'.join(f'{x:.2f}' for x in meta['loadavg_start'])})"]
    if meta["stop"]:
        lines.append(f"actors stopped before each drain: {', '.join(meta['stop'])}")
    lines.append(f"{'run':<26} {'jobs/s':>8} {'CPU ms/job':>11} {'loop':>7} {'workers':>8} {'POST ms':>8}  ended")
    for run in res["runs"]:
        post = f"{run['post_ms']:.2f}" if run["post_ms"] is not None else "-"
        lines.append(f"{run['tree']:<26} {run['jobs_per_s']:>8.0f} {run['cpu_ms']:>11.2f} {run['loop_ms']:>7.2f} "
                     f"{run['workers_ms']:>8.2f} {post:>8}  {run['by_status']}")
    trees = list(dict.fromkeys(run["tree"] for run in res["runs"]))
    if len(trees) == 2:
        a, b = ([r for r in res["runs"] if r["tree"] == t] for t in trees)
        pairs = list(zip(a, b))
        lines.append("")
        keys = (("cpu_ms", "CPU a job"), ("jobs_per_s", "jobs/s"), ("post_ms", "POST"))
        for key, what in keys[:3 if meta["one_by_one"] else 2]:
            ratios = [y[key] / x[key] for x, y in pairs]
            lines.append(f"{what}, {trees[1]} / {trees[0]}, per pair: {', '.join(f'{r:.2f}' for r in ratios)} "
                         f"(median {statistics.median(ratios):.2f})")
    for error in res["errors"]:
        lines.append(f"error: {error}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", metavar="REV", help="also drain on this commit, before each run of this checkout")
    parser.add_argument("--slots", type=int, default=1, help="--max-cpu-jobs of each daemon (default 1)")
    parser.add_argument("--jobs", type=int, default=1000, help="queued jobs a drain (default 1000)")
    parser.add_argument("--pairs", type=int, default=4, help="runs of each (default 4)")
    parser.add_argument("--stop", default="", metavar="ACTOR,...", help="actors to stop before each drain")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                        help="the daemons' --log-level (default: theirs, info); warning drops a job's log lines")
    parser.add_argument("--one-by-one", action="store_true",
                        help="POST the jobs one at a time to free slots (a new connection each, as the CLI does), "
                             "measured from the first POST, instead of queueing them behind blockers")
    parser.add_argument("--together", action="store_true",
                        help="with --against: drain the pair's two daemons at the same time (each its CPU a job), "
                             "so that the machine's changes of speed meet both; the order they start in alternates")
    parser.add_argument("--root", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                        help="where the daemons' homes go (default /dev/shm: the disk out of the comparison)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs the daemons")
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = parser.parse_args(argv)
    if args.slots < 1 or args.jobs < 1 or args.pairs < 1:
        parser.error("--slots, --jobs and --pairs must be at least 1")
    if args.together and (not args.against or args.one_by_one):
        parser.error("--together drains a pair of queues: it needs --against, and not --one-by-one")
    args.quick = False
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_interrupt)
    root = Path(tempfile.mkdtemp(prefix="gpuplane-drain-bench-", dir=args.root))
    stop = [name for name in args.stop.split(",") if name]
    res: dict[str, Any] = {"meta": run_meta(args, slots=args.slots, jobs=args.jobs, stop=stop,
                                                      one_by_one=args.one_by_one, together=args.together), "runs": [],
                           "errors": []}
    trees: list[tuple[str, str | None]] = [("this checkout", None)]
    t_start = time.perf_counter()
    dm = JobDaemons(args.python, root, args.log_level)
    worktree: list[Path] = []
    with guarded_run(res, root, args.keep, t_start, "daemons", dm.stop_all,
                     lambda: [remove_checkout(t) for t in worktree]):
        if args.against:
            worktree.append(checkout(args.against, root))
            trees.insert(0, (args.against, str(worktree[0])))
        for n in range(args.pairs):
            if args.together:
                progress(f"pair {n + 1}/{args.pairs}: both")
                order = trees if n % 2 == 0 else trees[::-1]
                runs = {run["tree"]: run for run in drain_together(dm, order, args.slots, args.jobs, stop)}
                res["runs"] += [runs[name] for name, _ in trees]  # each pair in the same order, for render
                continue
            for name, path in trees:
                progress(f"pair {n + 1}/{args.pairs}: {name}")
                with daemons_import(path):
                    res["runs"].append({"tree": name, **drain(dm, args.slots, args.jobs, stop, args.one_by_one)})
    return report(res, args.json, render)


@contextmanager
def daemons_import(path: str | None) -> Iterator[None]:
    """Daemons started meanwhile import ``gpuplaned`` from ``path`` (None: this checkout's);
    the bench's own modules stay this checkout's."""
    saved = os.environ.get("PYTHONPATH")
    if path is not None:
        os.environ["PYTHONPATH"] = path
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


if __name__ == "__main__":
    sys.exit(main())
