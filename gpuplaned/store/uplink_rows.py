"""Uplink rows: each remote node's record high-water marks (``uplink_streams``) and its link columns
on ``nodes`` (``uplink``, ``agent_id``). Migration ``0015_uplink.sql``.

``claim`` (``claim_batch`` for a batch of one stream) is the exactly-once guard: a record's effect
runs in the transaction that claims its seq, so a record is stored once however often the agent
resends it.
"""

from __future__ import annotations

import bisect
import sqlite3
from collections.abc import Sequence

import attrs


def claim(conn: sqlite3.Connection, node_id: str, stream: str, seq: int) -> bool:
    """Raise ``(node_id, stream)``'s mark to ``seq``; False (and nothing changed) when ``seq`` is at
    or below it: the record was applied before. A gap (the agent's spool dropped records) is fine."""
    row = conn.execute("SELECT seq FROM uplink_streams WHERE node_id = ? AND stream = ?",
                       (node_id, stream)).fetchone()
    if row is not None and seq <= row[0]:
        return False
    conn.execute("INSERT INTO uplink_streams (node_id, stream, seq) VALUES (?, ?, ?) "
                 "ON CONFLICT (node_id, stream) DO UPDATE SET seq = excluded.seq", (node_id, stream, seq))
    return True


def claim_batch(conn: sqlite3.Connection, node_id: str, stream: str, seqs: Sequence[int]) -> int:
    """``claim`` for a batch (``seqs`` increasing): raise the mark to ``seqs[-1]`` and return the
    index of the first seq above the old mark (``len(seqs)``, nothing changed: all applied before)."""
    row = conn.execute("SELECT seq FROM uplink_streams WHERE node_id = ? AND stream = ?",
                       (node_id, stream)).fetchone()
    mark = row[0] if row is not None else 0
    first = bisect.bisect_right(seqs, mark)
    if first < len(seqs):
        conn.execute("INSERT INTO uplink_streams (node_id, stream, seq) VALUES (?, ?, ?) "
                     "ON CONFLICT (node_id, stream) DO UPDATE SET seq = excluded.seq", (node_id, stream, seqs[-1]))
    return first


def acked(conn: sqlite3.Connection, node_id: str) -> dict[str, int]:
    """stream -> the highest seq committed (streams never heard from are absent)."""
    return dict(conn.execute("SELECT stream, seq FROM uplink_streams WHERE node_id = ?", (node_id,)).fetchall())


@attrs.frozen
class NodeLinkRow:
    node_id: str
    uplink: bool
    agent_id: str | None
    token_id: str | None = None  # the agent token the name belongs to (None: not bound yet)
    status: str = "ONLINE"


def by_name(conn: sqlite3.Connection, name: str) -> NodeLinkRow | None:
    row = conn.execute("SELECT id, uplink, agent_id, agent_token_id, status FROM nodes WHERE name = ?",
                       (name,)).fetchone()
    return NodeLinkRow(row[0], bool(row[1]), row[2], row[3], row[4]) if row else None


def by_id(conn: sqlite3.Connection, node_id: str) -> tuple[str, bool] | None:
    """``(name, uplink)`` of the node; None when there is none."""
    row = conn.execute("SELECT name, uplink FROM nodes WHERE id = ?", (node_id,)).fetchone()
    return (row[0], bool(row[1])) if row else None


def agent_node_name(conn: sqlite3.Connection, node_id: str) -> str | None:
    """The node's name when it is a remote agent's (its files are there), else None."""
    found = by_id(conn, node_id)
    return found[0] if found is not None and found[1] else None


def set_link(conn: sqlite3.Connection, node_id: str, agent_id: str | None, *, uplink: bool,
             token_id: str | None = None) -> None:
    """Record how the node reaches the server: over the uplink (with its agent's id) or in memory.
    ``token_id``: the agent token the node's name is bound to; a bound name keeps its token (only
    ``node_rows.forget_node`` frees it), and the in-memory link (the daemon's own node) unbinds it."""
    conn.execute("UPDATE nodes SET uplink = ?, agent_id = ?, agent_token_id = CASE WHEN ? THEN "
                 "coalesce(agent_token_id, ?) ELSE NULL END WHERE id = ?",
                 (int(uplink), agent_id, int(uplink), token_id, node_id))


@attrs.frozen
class RemoteNode:
    node_id: str
    name: str
    status: str
    last_heartbeat_at: int | None


def remote_nodes(conn: sqlite3.Connection) -> list[RemoteNode]:
    """Every node that said hello over the uplink."""
    rows = conn.execute("SELECT id, name, status, last_heartbeat_at FROM nodes WHERE uplink = 1 ORDER BY name")
    return [RemoteNode(*row) for row in rows]


def forget(conn: sqlite3.Connection, node_id: str) -> None:
    conn.execute("DELETE FROM uplink_streams WHERE node_id = ?", (node_id,))
