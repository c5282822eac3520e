"""``node forget`` deletes the node's row; its events keep its id, and now its name in their
context (issue 33 item 4: the Events page showed a bare ``nd_…`` id for them)."""

from __future__ import annotations

import json

from gpuplaned.protocol.event_replies import EventRow
from gpuplaned.store import event_rows, node_rows


def _contexts(conn) -> dict[str, dict]:
    return {i: json.loads(c) if c else None for i, c in conn.execute("SELECT id, context FROM events")}


def test_a_forgotten_nodes_events_keep_its_name_in_their_context(db):
    conn, node_id = db
    event_rows.insert_events(conn, [
        EventRow("ev_1", 1, "DISK_LOW", "warning", node_id, None, None, None, "disk low", {}),
        EventRow("ev_2", 2, "GPU_LOST", "critical", node_id, None, None, None, "gone", {"gpu": 0, "node_id": node_id}),
        EventRow("ev_3", 3, "USER_EVENT", "info", None, None, None, None, "not the node's", {"node_name": "mine"}),
    ])

    node_rows.forget_node(conn, node_id, "n1")

    assert node_rows.find_node(conn, node_id) is None
    assert _contexts(conn) == {"ev_1": {"node_name": "n1"}, "ev_2": {"gpu": 0, "node_id": node_id, "node_name": "n1"},
                               "ev_3": {"node_name": "mine"}}
    assert [e.node_id for _, e in event_rows.list_events(conn, event_rows.EventFilter(node_id=node_id), 10)] == [node_id] * 2
