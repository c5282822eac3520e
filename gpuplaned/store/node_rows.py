"""Node rows beyond a node's hello (``store.job_rows.register_node``): when it was last heard from,
and forgetting one that is gone for good (renamed, or retired)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.job_states import ACTIVE, values

_ACTIVE = values(ACTIVE)  # a LOST job does not keep its node: retry it elsewhere


def heard_from(conn: sqlite3.Connection, node_id: str, now_ms: int) -> None:
    """The node's latest sign of life: its heartbeat, as ``node show`` and the API give it."""
    conn.execute("UPDATE nodes SET last_heartbeat_at = max(coalesce(last_heartbeat_at, 0), ?) WHERE id = ?",
                 (now_ms, node_id))


def mark_offline(conn: sqlite3.Connection, node_id: str, heard_before_ms: int) -> bool:
    """A remote node silent since before ``heard_before_ms``: OFFLINE. False when it is OFFLINE
    already or was heard from since (its hello came in meanwhile): then nothing changed."""
    return conn.execute("UPDATE nodes SET status = 'OFFLINE' WHERE id = ? AND status = 'ONLINE' AND "
                        "coalesce(last_heartbeat_at, 0) < ?", (node_id, heard_before_ms)).rowcount == 1


def sdk_servers(conn: sqlite3.Connection, node_ids: Iterable[str]) -> dict[str, str]:
    """node id -> the URL its jobs reach the server's HTTP front by, for those of ``node_ids`` that
    are pooled (Slurm) nodes whose hello said one (``Hello.sdk_server``)."""
    ids = sorted(set(node_ids))
    if not ids:
        return {}
    rows = conn.execute(f"SELECT id, sdk_server FROM nodes WHERE runner = 'slurm' AND sdk_server IS NOT NULL "
                        f"AND id IN ({', '.join('?' * len(ids))})", ids)
    return dict(rows.fetchall())


def find_node(conn: sqlite3.Connection, key: str) -> tuple[str, str] | None:
    """``(id, name)`` of the node whose id or name is ``key``; None when none is."""
    row = conn.execute("SELECT id, name FROM nodes WHERE id = ? OR name = ? ORDER BY id = ? DESC LIMIT 1",
                       (key, key, key)).fetchone()  # an id wins over a node named like one
    return (row[0], row[1]) if row else None


def forget_node(conn: sqlite3.Connection, node_id: str, name: str) -> None:
    """Remove the node, its GPU slots and its metrics; its jobs and runs keep their history
    (an ended job's ``node_id`` is cleared, which the schema's foreign key requires; its runs
    still name the node; its events keep its name in their context).

    Raises:
        ApiError: conflict while a job is dispatched to or running on it.
    """
    active = [row[0] for row in conn.execute(
        f"SELECT id FROM jobs WHERE node_id = ? AND status IN ({','.join('?' * len(_ACTIVE))}) ORDER BY created_at",
        (node_id, *_ACTIVE))]
    if active:
        raise ApiError(ErrorCode.CONFLICT, f"node {name!r} has {len(active)} active job(s) ({', '.join(active[:5])}"
                       f"{', ...' if len(active) > 5 else ''}): cancel them or let them end first",
                       {"node": name, "jobs": active})
    conn.execute("UPDATE jobs SET node_id = NULL WHERE node_id = ?", (node_id,))
    # Its events keep its id, which no node row names any more: their context keeps its name
    # (``node_name``), so the Events page still says which node it was.
    conn.execute("UPDATE events SET context = json_insert(COALESCE(context, '{}'), '$.node_name', ?) WHERE node_id = ?",
                 (name, node_id))
    conn.execute("DELETE FROM gpu_slots WHERE node_id = ?", (node_id,))
    conn.execute("DELETE FROM ts_series WHERE kind = 'node' AND owner = ?", (node_id,))  # chunks go with them
    conn.execute("DELETE FROM uplink_streams WHERE node_id = ?", (node_id,))  # its agent starts afresh
    conn.execute("DELETE FROM folder_removals WHERE node_id = ?", (node_id,))  # its files are no longer ours to tidy
    conn.execute("DELETE FROM nodes WHERE id = ?", (node_id,))


# --- what a node may write about (issue 29 item 5) -------------------------------------------------

def foreign_attempts(conn: sqlite3.Connection, node_id: str,
                     attempts: Iterable[tuple[str, int | None]]) -> list[tuple[str, int | None]]:
    """Those of ``(job id, attempt)`` that are not on the node: neither the job's current attempt
    dispatched there nor a run of it that ran there (``attempt`` None: any attempt of the job)."""
    foreign = []
    for job_id, attempt in dict.fromkeys(attempts):
        row = conn.execute("SELECT node_id, attempt FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is not None and row[0] == node_id and (attempt is None or attempt == row[1]):
            continue
        ran = conn.execute("SELECT 1 FROM runs WHERE job_id = ? AND node_id = ?"
                           + ("" if attempt is None else " AND attempt = ?") + " LIMIT 1",
                           (job_id, node_id) if attempt is None else (job_id, node_id, attempt)).fetchone()
        if ran is None:
            foreign.append((job_id, attempt))
    return foreign


def run_on_node(conn: sqlite3.Connection, node_id: str, run_id: str) -> bool:
    """Whether the run ran (or runs) on the node."""
    row = conn.execute("SELECT node_id FROM runs WHERE id = ?", (run_id,)).fetchone()
    return row is not None and row[0] == node_id


# --- what `node list` shows -------------------------------------------------------------------

def node_table(conn: sqlite3.Connection, cpu_statuses: Sequence[str]) -> list[tuple[Any, ...]]:
    """Each node by name: ``(its row, its GPU slots with their jobs' names, how many of its CPU
    jobs are in ``cpu_statuses``)``. The row: id, name, status, labels, hardware, max_cpu_jobs,
    last_heartbeat_at, drained, uplink, runner, pooled_gpus_per_job, pooled_max_jobs and how many of its
    jobs (GPU or CPU) are in ``cpu_statuses`` (a pooled node's in flight); a slot: gpu_index, model,
    vram_mb, owner_job_id, job name."""
    nodes = conn.execute(
        "SELECT id, name, status, labels, hardware, max_cpu_jobs, last_heartbeat_at, drained, uplink, runner, "
        "pooled_gpus_per_job, pooled_max_jobs, (SELECT count(*) FROM jobs WHERE node_id = nodes.id AND status IN "
        f"({', '.join('?' * len(cpu_statuses))})) FROM nodes ORDER BY name", tuple(cpu_statuses)
    ).fetchall()
    out = []
    for node in nodes:
        slots = conn.execute(
            "SELECT s.gpu_index, s.model, s.vram_mb, s.owner_job_id, j.name FROM gpu_slots s "
            "LEFT JOIN jobs j ON j.id = s.owner_job_id WHERE s.node_id = ? ORDER BY s.gpu_index", (node[0],)
        ).fetchall()
        cpu_jobs = conn.execute(
            f"SELECT count(*) FROM jobs WHERE node_id = ? AND status IN ({', '.join('?' * len(cpu_statuses))}) "
            "AND json_extract(resources, '$.gpu') = 0", (node[0], *cpu_statuses)
        ).fetchone()[0]
        out.append((node, slots, cpu_jobs))
    return out


def set_drained(conn: sqlite3.Connection, node_id: str, drained: bool) -> bool:
    """False: the node already was (or was not) drained."""
    return conn.execute("UPDATE nodes SET drained = ? WHERE id = ? AND drained != ?",
                        (int(drained), node_id, int(drained))).rowcount > 0
