"""The catalog of event types holds every type a rule records."""

from __future__ import annotations

import re
from pathlib import Path

from gpuplaned.domain import event_types
from gpuplaned.domain.job_states import failure_event
from gpuplaned.domain.rules import lifecycle
from gpuplaned.domain.webhooks import matches
from gpuplaned.store.database import open_writer

ROOT = Path(__file__).resolve().parents[2] / "gpuplaned"


def test_every_type_a_rule_raises_is_in_the_catalog():
    # A rule's event starts with its type, quoted or as a constant named as its value
    # (``HealthEvent(DISK_LOW, ...)``, ``SummaryEvent("LOSS_NAN", ...)``).
    source = "\n".join(path.read_text() for path in ROOT.rglob("*.py"))
    raised = set(re.findall(r'(?:Summary|Health)Event\(\s*"?([A-Z][A-Z_]+)"?\s*,', source))
    assert {"DISK_LOW", "GPU_LOST", "LOSS_SPIKE"} <= raised
    assert raised <= set(event_types.EVENT_TYPES)
    assert {"JOB_FAILED", "JOB_TIMEOUT", "OOM", "USER_EVENT", "CHECKPOINT_CREATED"} <= set(event_types.EVENT_TYPES)


def test_job_failed_is_the_family_of_every_failed_attempt():
    assert event_types.with_kinds(["JOB_FAILED"]) == ("JOB_FAILED", "OOM", "JOB_TIMEOUT")
    assert event_types.with_kinds(["OOM", "JOB_FAILED", "OOM"]) == ("OOM", "JOB_FAILED", "JOB_TIMEOUT")
    assert event_types.with_kinds(["JOB_TIMEOUT", "RUN_FINISHED"]) == ("JOB_TIMEOUT", "RUN_FINISHED")
    # each failure reason's event type is JOB_FAILED or one of its kinds
    for reason in ("OOM", "TIMEOUT", "EXIT_CODE", "SPAWN_FAILED", "LOST", "SIGNAL(SIGSEGV)", None):
        assert failure_event(reason)[0] in event_types.with_kinds(["JOB_FAILED"])


def test_the_outbox_trigger_matches_as_the_domain_does(tmp_path):
    """0017's SQL trigger and ``domain.webhooks.matches`` agree, subscription by event."""
    conn = open_writer(tmp_path / "g.db")
    subscriptions = {"wh_family": ("JOB_FAILED",), "wh_oom": ("OOM",), "wh_all": ("*",),
                     "wh_two": ("RUN_FINISHED", "JOB_TIMEOUT"), "wh_warn": ("JOB_FAILED",)}
    for sub_id, types in subscriptions.items():
        conn.execute("INSERT INTO webhook_subscriptions (id, url, event_types, severity, created_at) "
                     "VALUES (?, 'http://127.0.0.1:9/x', ?, ?, 0)",
                     (sub_id, ",".join(types), "warning" if sub_id == "wh_warn" else "info"))
    kinds = [("JOB_FAILED", "warning"), ("OOM", "critical"), ("JOB_TIMEOUT", "warning"), ("RUN_FINISHED", "info"),
             ("USER_EVENT", "info")]
    for k, (kind, severity) in enumerate(kinds):
        conn.execute("INSERT INTO events (id, ts, type, severity) VALUES (?, 0, ?, ?)", (f"ev_{k}", kind, severity))
    queued = set(conn.execute("SELECT subscription_id, event_id FROM webhook_outbox").fetchall())
    expected = {(sub_id, f"ev_{k}") for sub_id, types in subscriptions.items()
                for k, (kind, severity) in enumerate(kinds)
                if matches(types, "warning" if sub_id == "wh_warn" else "info", kind, severity)}
    assert queued == expected
    assert {e for s, e in queued if s == "wh_family"} == {"ev_0", "ev_1", "ev_2"}


def test_lifecycle_events_are_info_whatever_the_end():
    assert lifecycle.started("r1", None, "job_1")[0] == "info"
    for status in ("SUCCEEDED", "FAILED", "CANCELLED", "LOST"):
        severity, message, context = lifecycle.finished("r1", "a", status, 0, 60_000, None)
        assert severity == "info" and context["status"] == status and status in message
