"""Script events and checkpoints: their shape checks (pure), and how a real database keeps them."""

from __future__ import annotations

import math

import pytest

from gpuplaned import tsdb
from gpuplaned.domain.run_records import best_checkpoint, parse_checkpoints, parse_events
from gpuplaned.protocol.errors import ApiError
from gpuplaned.service.api.run_records import checkpoint_table, store_records
from gpuplaned.store import event_rows
from gpuplaned.store.database import open_writer
from gpuplaned.store.event_rows import EventFilter
from gpuplaned.store.project_rows import set_primary


@pytest.fixture
def conn(tmp_path):
    c = open_writer(tmp_path / "g.db")
    c.execute("INSERT INTO runs (id, source, status, created_at) VALUES ('run_a', 'sdk', 'RUNNING', 1)")
    yield c
    c.close()


def test_events_and_checkpoints_parse_with_defaults():
    events = parse_events({"events": [{"name": "phase", "data": {"epoch": 2}, "step": 7, "ts": 5},
                                      {"name": "oops", "severity": "warning"}]})
    assert [(e.name, e.severity, e.step, e.ts, e.data) for e in events] == [
        ("phase", "info", 7, 5, {"epoch": 2}), ("oops", "warning", None, None, {})]
    cks = parse_checkpoints({"checkpoints": [{"path": "/c/a.pt", "step": 10, "epoch": 1.5, "size_bytes": 3}]})
    assert [(c.path, c.step, c.epoch, c.size_bytes, c.metadata) for c in cks] == [("/c/a.pt", 10, 1.5, 3, {})]
    assert parse_events({}) == [] and parse_checkpoints({"checkpoints": None}) == []


@pytest.mark.parametrize("body, field", [
    ({"events": {}}, "events"),
    ({"events": ["x"]}, "events[0]"),
    ({"events": [{"name": ""}]}, "events[0].name"),
    ({"events": [{"name": "a", "severity": "debug"}]}, "events[0].severity"),
    ({"events": [{"name": "a", "step": -1}]}, "events[0].step"),
    ({"events": [{"name": "a", "step": True}]}, "events[0].step"),
    ({"events": [{"name": "a", "data": [1]}]}, "events[0].data"),
    ({"events": [{"name": "a", "data": {"x": "y" * 20000}}]}, "events[0].data"),
    ({"events": [{"name": "a", "colour": 1}]}, "events[0].colour"),
    ({"events": [{"name": "a"}] * 1001}, "events"),
    ({"checkpoints": [{"step": 1}]}, "checkpoints[0].path"),
    ({"checkpoints": [{"path": "a\x00b"}]}, "checkpoints[0].path"),
    ({"checkpoints": [{"path": "/a", "epoch": math.nan}]}, "checkpoints[0].epoch"),
    ({"checkpoints": [{"path": "/a", "epoch": "1"}]}, "checkpoints[0].epoch"),
    ({"checkpoints": [{"path": "/a", "size_bytes": 1.5}]}, "checkpoints[0].size_bytes"),
])
def test_bad_records_are_refused_naming_the_field(body, field):
    with pytest.raises(ApiError) as caught:
        parse_events(body) if "events" in body else parse_checkpoints(body)
    assert caught.value.details["field"] == field


def test_best_checkpoint_follows_the_direction_and_skips_unknown_values():
    values = {"a": 3.0, "b": 1.0, "c": None, "d": math.nan, "e": 1.0}
    assert best_checkpoint(values, "minimize") == "b"  # the earlier of a tie
    assert best_checkpoint(values, "maximize") == "a"
    assert best_checkpoint(values, "none") is None
    assert best_checkpoint({"a": None}, "minimize") is None


def test_records_are_stored_with_their_events_and_a_path_saved_again_moves(conn):
    cks = parse_checkpoints({"checkpoints": [{"path": "/c/last.pt", "step": 10}, {"path": "/c/best.pt", "step": 10}]})
    rows = store_records(conn, "run_a", None, parse_events({"events": [{"name": "phase", "step": 3}]}), cks, 1000)
    assert [r.type for r in rows] == ["USER_EVENT", "CHECKPOINT_CREATED", "CHECKPOINT_CREATED"]
    assert rows[0].message == "phase" and rows[0].context == {"name": "phase"} and rows[0].ts == 1000
    first_id = rows[1].context["checkpoint_id"]
    assert first_id.startswith("ck_")
    # last.pt saved again at step 20: same row, new step
    again = store_records(conn, "run_a", None, [],
                          parse_checkpoints({"checkpoints": [{"path": "/c/last.pt", "step": 20, "ts": 2000}]}), 3000)
    assert again[0].context["checkpoint_id"] == first_id
    table = checkpoint_table(conn, "run_a", None)
    assert [(c.path, c.step) for c in table.checkpoints] == [("/c/best.pt", 10), ("/c/last.pt", 20)]
    stored = event_rows.list_events(conn, EventFilter(run_id="run_a"), 10)
    assert len(stored) == 4


def test_the_table_ranks_checkpoints_by_the_metric_at_their_step(conn):
    steps = list(range(0, 100))
    loss = [abs(50 - s) / 10 for s in steps]  # lowest at step 50
    tsdb.ingest(conn, "run", "run_a", {"val/loss": {"step": steps, "ts": steps, "value": loss}}, source="s", seq=1)
    conn.execute("INSERT INTO metric_definitions (name, direction, created_at) VALUES ('val/loss', 'minimize', 1)")
    store_records(conn, "run_a", None, [], parse_checkpoints({"checkpoints": [
        {"path": f"/c/{s}.pt", "step": s} for s in (20, 50, 55, 99)] + [{"path": "/c/nostep.pt"}]}), 1)
    table = checkpoint_table(conn, "run_a", "val/loss")
    assert table.direction == "minimize"
    got = {c.path: (c.metric_value, c.best) for c in table.checkpoints}
    assert got == {"/c/20.pt": (3.0, False), "/c/50.pt": (0.0, True), "/c/55.pt": (0.5, False),
                   "/c/99.pt": (4.9, False), "/c/nostep.pt": (None, False)}
    assert table.best_id == next(c.id for c in table.checkpoints if c.path == "/c/50.pt")
    assert checkpoint_table(conn, "run_a", "no/such").best_id is None
    with pytest.raises(ApiError):
        checkpoint_table(conn, "run_nope", None)


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_a_nan_or_infinite_value_at_a_step_is_never_best(conn, direction):
    bad = [math.nan, -math.inf if direction == "minimize" else math.inf]
    tsdb.ingest(conn, "run", "run_a", {"m": {"step": [1, 2, 3], "ts": [1, 2, 3], "value": [*bad, 0.5]}},
                source="s", seq=1)
    conn.execute("INSERT INTO metric_definitions (name, direction, created_at) VALUES ('m', ?, 1)", (direction,))
    store_records(conn, "run_a", None, [], parse_checkpoints({"checkpoints": [
        {"path": f"/c/{s}.pt", "step": s} for s in (1, 2, 3)]}), 1)
    table = checkpoint_table(conn, "run_a", "m")
    assert [(c.metric_value, c.best) for c in table.checkpoints] == [(None, False), (None, False),
                                                                               (0.5, True)]
    assert best_checkpoint({"a": math.nan, "b": math.inf, "c": -math.inf}, direction) is None


def test_without_a_metric_the_table_ranks_by_the_runs_primary_metric(conn):
    tsdb.ingest(conn, "run", "run_a", {"acc": {"step": [1, 2, 3], "ts": [1, 2, 3], "value": [0.5, 0.9, 0.7]}},
                source="s", seq=1)
    store_records(conn, "run_a", None, [], parse_checkpoints({"checkpoints": [
        {"path": f"/c/{s}.pt", "step": s} for s in (1, 2, 3)]}), 1)
    assert checkpoint_table(conn, "run_a", None).metric is None  # no primary metric anywhere yet
    set_primary(conn, "acc", 5)  # the global one; "acc" is maximized by its name
    table = checkpoint_table(conn, "run_a", None)
    assert (table.metric, table.direction) == ("acc", "maximize")
    assert [c.best for c in table.checkpoints] == [False, True, False]
