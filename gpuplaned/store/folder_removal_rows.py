"""The folders of removed jobs still to delete (migration ``folder_removals``): scheduled in the
transaction that removes the jobs (``job_removal_rows``), done by
``gpuplaned.service.passes.folder_removal`` on the host that holds them.

A job's folder lies on this daemon's own home (``node_id`` '': its own node's attempts, and every
job's ``jobs/<id>/`` that exists here) and on each remote agent's node that ran one of its attempts.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

import attrs

from gpuplaned.store.paging import one_of

HERE = ""  # node_id of this daemon's own home


@attrs.frozen
class Pending:
    node_id: str  # HERE, or a remote agent's node
    job_ids: tuple[str, ...]
    keep: tuple[str, ...]  # their registered checkpoints' paths


def schedule(conn: sqlite3.Connection, job_ids: Sequence[str], now_ms: int) -> None:
    """Record the folders of ``job_ids`` to delete: here, and on each agent's node that ran them.
    Call it in the removal's transaction, before the jobs' rows go."""
    for start in range(0, len(job_ids), 500):
        chunk = list(job_ids[start:start + 500])
        keep: dict[str, list[str]] = {job_id: [] for job_id in chunk}
        for job_id, path in conn.execute(
                f"SELECT r.job_id, c.path FROM checkpoints c JOIN runs r ON r.id = c.run_id "
                f"WHERE {one_of('r.job_id', chunk)} AND c.deleted_at IS NULL", chunk):
            keep[job_id].append(path)
        hosts: dict[str, set[str]] = {job_id: {HERE} for job_id in chunk}
        for job_id, node_id in conn.execute(
                f"SELECT DISTINCT r.job_id, r.node_id FROM runs r JOIN nodes n ON n.id = r.node_id "
                f"WHERE {one_of('r.job_id', chunk)} AND n.uplink = 1", chunk):
            hosts[job_id].add(node_id)
        conn.executemany(
            "INSERT OR REPLACE INTO folder_removals (job_id, node_id, keep, created_at) VALUES (?, ?, ?, ?)",
            [(job_id, node_id, json.dumps(keep[job_id]), now_ms) for job_id in chunk for node_id in hosts[job_id]])


def pending(conn: sqlite3.Connection, node_ids: Sequence[str], limit: int = 1000) -> list[Pending]:
    """What is left to do on ``node_ids`` (HERE for this daemon's home), at most ``limit`` jobs a node."""
    out = []
    for node_id in node_ids:
        rows = conn.execute("SELECT job_id, keep FROM folder_removals WHERE node_id = ? ORDER BY job_id LIMIT ?",
                            (node_id, limit)).fetchall()
        if rows:
            out.append(Pending(node_id, tuple(r[0] for r in rows),
                               tuple(path for r in rows for path in json.loads(r[1]))))
    return out


def nodes_with_pending(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT DISTINCT node_id FROM folder_removals ORDER BY node_id")]


def done(conn: sqlite3.Connection, node_id: str, job_ids: Sequence[str]) -> None:
    for start in range(0, len(job_ids), 500):
        chunk = list(job_ids[start:start + 500])
        conn.execute(f"DELETE FROM folder_removals WHERE node_id = ? AND {one_of('job_id', chunk)}",
                     (node_id, *chunk))
