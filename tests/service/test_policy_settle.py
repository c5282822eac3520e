"""Settling failure-policy triggers in a real database: a trigger whose action fails in an
unexpected way undoes only its own writes and is settled as skipped with the reason, and the
rest of the pass goes on; so one bad row can never stop every pass after it."""

from __future__ import annotations

import json

import pytest

from gpuplaned.service.passes import failure_policies
from gpuplaned.store.database import open_writer
from gpuplaned.store.event_rows import EventRow, insert_events

POLICIES = json.dumps({"on_oom": {"retry": 1, "env": {}}})


@pytest.fixture
def conn(tmp_path):
    c = open_writer(tmp_path / "g.db")
    for job_id in ("job_a", "job_b"):
        c.execute("INSERT INTO jobs (id, name, type, status, command, created_at, policies) "
                  "VALUES (?, 'train', 'TRAIN', 'FAILED', '[]', 1, ?)", (job_id, POLICIES))
    insert_events(c, [EventRow(f"ev_{j}", 10, "OOM", "critical", None, f"job_{j}", None, None, "oom", {})
                      for j in ("a", "b")])
    yield c
    c.close()


def test_a_row_that_fails_is_skipped_with_its_reason_and_the_pass_goes_on(conn, monkeypatch):
    def settle_one(conn, row, now, out, **_limits):
        conn.execute("UPDATE jobs SET priority = 99 WHERE id = ?", (row.job_id,))
        if row.job_id == "job_a":
            out.events.append(EventRow("ev_half", now, "POLICY_ACTION", "info", None, "job_a", None, None, "half", {}))
            raise RuntimeError("disk on fire")
        out.events.append(EventRow("ev_done", now, "POLICY_ACTION", "info", None, "job_b", None, None, "done", {}))
        return True

    monkeypatch.setattr(failure_policies, "_settle_one", settle_one)
    conn.execute("BEGIN IMMEDIATE")
    settled = failure_policies.settle(conn, 1000)
    conn.execute("COMMIT")
    assert [e.id for e in settled.events] == ["ev_done"] and settled.requeued
    rows = dict(((job, (state, action, reason)) for job, state, action, reason in conn.execute(
        "SELECT job_id, state, action, reason FROM policy_actions")))
    assert rows["job_a"][:2] == ("done", "skip") and "disk on fire" in rows["job_a"][2]
    priorities = dict(conn.execute("SELECT id, priority FROM jobs"))
    assert priorities == {"job_a": 0, "job_b": 99}  # job_a's own write undone, job_b's kept
    assert [r[0] for r in conn.execute("SELECT id FROM events WHERE type = 'POLICY_ACTION'")] == ["ev_done"]
