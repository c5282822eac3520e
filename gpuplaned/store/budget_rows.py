"""What a token's GPU-hour budget reads: its jobs (``jobs.token_id``, 0014) and their attempts' runs."""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict

from gpuplaned.domain.gpu_budget import Attempt, TokenJob
from gpuplaned.protocol.job_states import ENDED, OPEN, values


def token_jobs(conn: sqlite3.Connection, token_id: str) -> list[TokenJob]:
    """Every job the token submitted, each with its attempts in order.

    An attempt without an end time ends where its job did when it is not the job's current
    attempt, or the job has ended (a lost run never reported its end): it is then charged up to
    the job's end, or nothing when the job has no end time either.
    """
    jobs = conn.execute(
        "SELECT id, status, resources, timeout_s, attempt, finished_at FROM jobs WHERE token_id = ? ORDER BY id",
        (token_id,)).fetchall()
    runs: dict[str, list[tuple[int, int | None, int | None]]] = defaultdict(list)
    for job_id, attempt, started, finished in conn.execute(
            "SELECT r.job_id, r.attempt, r.started_at, r.finished_at FROM runs r JOIN jobs j ON j.id = r.job_id "
            "WHERE j.token_id = ? ORDER BY r.job_id, r.attempt", (token_id,)):
        runs[job_id].append((attempt or 0, started, finished))
    out = []
    for job_id, status, resources, timeout_s, current, job_finished in jobs:
        attempts = []
        for attempt, started, finished in runs.get(job_id, ()):
            if finished is None and (attempt != current or status in ENDED):
                finished = job_finished if job_finished is not None else started
            attempts.append(Attempt(started, finished))
        gpus = int(json.loads(resources).get("gpu", 1))
        out.append(TokenJob(job_id, status, gpus, timeout_s, tuple(attempts)))
    return out


def open_jobs(conn: sqlite3.Connection, token_id: str) -> list[str]:
    """The token's jobs not ended (queued, or holding a node), not already asked to stop."""
    open_ = values(OPEN)
    rows = conn.execute(f"SELECT id FROM jobs WHERE token_id = ? AND status IN ({', '.join('?' * len(open_))}) "
                        "AND cancel_requested = 0 ORDER BY id", (token_id, *open_))
    return [r[0] for r in rows]
