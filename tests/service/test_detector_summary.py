"""The summary fold's events through ``[detector]``: a rule switched off records nothing (the
summary still folds the points), and each event recorded carries evidence bound to its run."""

from __future__ import annotations

import math

import pytest

from gpuplaned import tsdb
from gpuplaned.config import DetectorConfig
from gpuplaned.service.api.sessions import summarize
from gpuplaned.store.database import open_writer


@pytest.fixture
def conn(tmp_path):
    db = open_writer(tmp_path / "gpuplane.db")
    db.execute("INSERT INTO runs (id, source, status, created_at) VALUES ('run_1', 'sdk', 'RUNNING', 0)")
    yield db
    db.close()


def _batch(conn, rules: DetectorConfig):
    steps = list(range(40))
    values = [1.0 + 0.01 * (s % 3) for s in steps[:30]] + [50.0] + [1.0] * 8 + [math.nan]
    metrics = {"train/loss": {"step": steps, "ts": steps, "value": values}}
    tsdb.ingest(conn, "run", "run_1", metrics, source="s", seq=0)
    return summarize(conn, "run_1", metrics, 0, rules)


@pytest.mark.parametrize("rules, expected", [
    (DetectorConfig(), ["LOSS_SPIKE", "LOSS_NAN"]),
    (DetectorConfig(loss_nan=False), ["LOSS_SPIKE"]),
    (DetectorConfig(loss_spike=False), ["LOSS_NAN"]),
    (DetectorConfig(loss_nan=False, loss_spike=False), []),
])
def test_switches(conn, rules, expected):
    rows = _batch(conn, rules)
    assert [r.type for r in rows] == expected
    stored = [t for (t,) in conn.execute("SELECT type FROM events ORDER BY rowid")]
    assert stored == expected
    assert conn.execute("SELECT summary FROM runs").fetchone()[0] is not None
    for row in rows:
        (pointer,) = row.context["evidence"]
        assert pointer["run_id"] == "run_1" and pointer["steps"] == [row.step, row.step]
