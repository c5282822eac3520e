"""Job groups and the queue's pause (issue 31 item 2): the rows, and the holds the scheduler
reads in its pass (``gpuplaned.domain.groups`` decides what they mean).

A group row is made by ``group set`` or by the first job submitted into it; the queue's pause is
the one ``queue_control`` row, so both survive a daemon restart.
"""

from __future__ import annotations

import sqlite3

import attrs

from gpuplaned.domain.groups import QUEUE_PAUSED, Group, Holds
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.job_states import ON_NODE, JobState, values
from gpuplaned.store import sweep_rows
from gpuplaned.store.paging import one_of

_ON_NODE = values(ON_NODE)


@attrs.frozen
class GroupCounts:
    group: Group
    queued: int
    running: int


def holds(conn: sqlite3.Connection) -> Holds:
    """What holds queued jobs back now: the queue's pause and every group with its jobs on a node."""
    # One statement, and none of the jobs read while there are no groups (a pass reads this each time).
    groups = {name: Group(name, parallel, bool(paused), running) for name, parallel, paused, running in conn.execute(
        "SELECT name, parallel, paused, (SELECT count(*) FROM jobs WHERE group_name = job_groups.name AND "
        f"{one_of('status', _ON_NODE)}) FROM job_groups", _ON_NODE)}
    return Holds(queue_paused=queue_paused(conn), groups=groups, sweeps=sweep_rows.holds(conn))


def list_groups(conn: sqlite3.Connection) -> list[GroupCounts]:
    """Every group, by name, with its queued and running (on a node) jobs counted."""
    queued = dict(conn.execute(
        "SELECT group_name, count(*) FROM jobs WHERE group_name IS NOT NULL AND status = ? GROUP BY group_name",
        (JobState.QUEUED.value,)).fetchall())
    return [GroupCounts(g, queued.get(g.name, 0), g.running)
            for g in sorted(holds(conn).groups.values(), key=lambda g: g.name)]


def get_group(conn: sqlite3.Connection, name: str) -> GroupCounts:
    """Raises ApiError not_found naming the groups there are."""
    for found in list_groups(conn):
        if found.group.name == name:
            return found
    known = [r[0] for r in conn.execute("SELECT name FROM job_groups ORDER BY name")]
    raise ApiError(ErrorCode.NOT_FOUND, f"no group {name!r}" + (f" (groups: {', '.join(known)})" if known else
                                                                 " (there are no groups yet)"),
                   {"group": name, "groups": known})


def ensure_group(conn: sqlite3.Connection, name: str) -> None:
    """Make the group if it is new: no limit, not paused."""
    conn.execute("INSERT INTO job_groups (name) VALUES (?) ON CONFLICT(name) DO NOTHING", (name,))


def set_parallel(conn: sqlite3.Connection, name: str, parallel: int | None) -> None:
    """Set the group's parallel limit (None: none), making the group if it is new."""
    ensure_group(conn, name)
    conn.execute("UPDATE job_groups SET parallel = ? WHERE name = ?", (parallel, name))
    _clear_holds(conn, "group_name = ? AND queue_reason LIKE 'group %'", (name,))


def set_group_paused(conn: sqlite3.Connection, name: str, paused: bool) -> None:
    """Pause or resume a group that exists (``get_group`` raises for one that does not)."""
    get_group(conn, name)
    conn.execute("UPDATE job_groups SET paused = ? WHERE name = ?", (int(paused), name))
    if not paused:
        _clear_holds(conn, "group_name = ? AND queue_reason LIKE 'group %'", (name,))


def queue_paused(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT paused FROM queue_control WHERE id = 1").fetchone()
    return bool(row[0]) if row else False


def set_queue_paused(conn: sqlite3.Connection, paused: bool) -> None:
    conn.execute("INSERT INTO queue_control (id, paused) VALUES (1, ?) "
                 "ON CONFLICT(id) DO UPDATE SET paused = excluded.paused", (int(paused),))
    if not paused:
        _clear_holds(conn, "queue_reason = ?", (QUEUE_PAUSED,))


def put_in_group(conn: sqlite3.Connection, job_id: str, name: str) -> None:
    """Put the new job in group ``name``, making the group if it is new."""
    ensure_group(conn, name)
    conn.execute("UPDATE jobs SET group_name = ? WHERE id = ?", (name, job_id))


def _clear_holds(conn: sqlite3.Connection, where: str, params: tuple[object, ...]) -> None:
    """A hold was lifted: the queued jobs it held wait for capacity until the next pass says
    otherwise (a pass with no slot left to give would not rewrite them)."""
    conn.execute(f"UPDATE jobs SET queue_reason = NULL WHERE status = ? AND {where}",
                 (JobState.QUEUED.value, *params))


def set_priority(conn: sqlite3.Connection, job_id: str, priority: int) -> None:
    """Change a queued job's priority: its place in the queue (``queue.ORDER``).

    Raises:
        ApiError: not_found for no such job; conflict naming the state of one not queued.
    """
    row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no job {job_id!r}", {"job_id": job_id})
    if row[0] != JobState.QUEUED.value:
        raise ApiError(ErrorCode.CONFLICT, f"job {job_id} is {row[0]}, not QUEUED: only a queued job's priority "
                       "can change", {"job_id": job_id, "status": row[0]})
    conn.execute("UPDATE jobs SET priority = ? WHERE id = ?", (priority, job_id))
