"""The stall pass over a real store (``gpuplaned.service.passes.detector.stall_pass``), on a clock the
test sets: a running job that falls silent raises RUN_STALLED once per episode with evidence
pointing at its last lines and point, output in time keeps it quiet, a job that ends is
forgotten, and a restarted detector (fresh state) does not raise an open episode again."""

from __future__ import annotations

import json

import pytest

from gpuplaned import tsdb
from gpuplaned.domain.rules.stall import StallPolicy
from gpuplaned.protocol.agent import LogChunk
from gpuplaned.service.api import sessions
from gpuplaned.service.passes.detector import stall_pass
from gpuplaned.store import log_rows
from gpuplaned.store.database import open_writer

S = 1000
POLICY = StallPolicy(after_ms=60 * S)


@pytest.fixture
def conn(tmp_path):
    db = open_writer(tmp_path / "gpuplane.db")
    db.execute("INSERT INTO jobs (id, name, type, status, command, attempt, created_at, run_id) "
               "VALUES ('job_1', 'j', 'process', 'RUNNING', '[\"x\"]', 1, 0, 'run_1')")
    db.execute("INSERT INTO runs (id, job_id, attempt, source, status, created_at) "
               "VALUES ('run_1', 'job_1', 1, 'sdk', 'RUNNING', 0)")
    yield db
    db.close()


def line(conn, offset: int) -> None:
    log_rows.keep_tails(conn, [LogChunk("job_1", 1, "stdout", offset, offset + 5, ((offset, f"l{offset}"),))], 100)


def point(conn, step: int) -> None:
    metrics = {"loss": {"step": [step], "ts": [step], "value": [1.0 / (step + 1)]}}
    tsdb.ingest(conn, "run", "run_1", metrics, source="s", seq=step)
    sessions.summarize(conn, "run_1", metrics, 0)


def passes(conn, states, times) -> list[tuple[int, dict]]:
    raised = []
    for t in times:
        raised += [(t, row) for row in stall_pass(conn, states, t * S, t * S, POLICY)]
    return raised


def test_quiet_while_the_job_writes_then_once_per_silence(conn):
    states: dict = {}
    for t in range(0, 200, 10):  # a line or a point every 10 s: never silent for 60 s
        line(conn, t) if t % 20 else point(conn, t)
        assert passes(conn, states, [t]) == []
    raised = passes(conn, states, range(200, 600, 10))
    assert [t for t, _ in raised] == [250]
    row = raised[0][1]
    assert row.type == "RUN_STALLED" and row.job_id == "job_1" and row.run_id == "run_1"
    assert row.context["silent_ms"] == 60 * S
    assert row.context["evidence"] == [
        {"kind": "log", "job_id": "job_1", "attempt": 1, "stream": "stdout", "offsets": [190, 190]},
        {"kind": "metric", "run_id": "run_1", "name": "loss", "steps": [180, 180], "values": [1.0 / 181]}]
    stored = conn.execute("SELECT count(*) FROM events WHERE type = 'RUN_STALLED'").fetchone()[0]
    assert stored == 1
    line(conn, 600)  # output again: the episode closes; the next silence is a new one
    assert [t for t, _ in passes(conn, states, range(600, 800, 10))] == [660]


def test_a_restarted_detector_does_not_raise_an_open_episode_again(conn):
    line(conn, 0)
    assert len(passes(conn, {}, range(0, 100, 10))) == 1
    assert passes(conn, {}, range(100, 400, 10)) == []  # a fresh detector, the same silence
    line(conn, 5)
    assert len(passes(conn, {}, range(400, 500, 10))) == 1


def test_a_job_no_longer_running_is_forgotten(conn):
    states: dict = {}
    passes(conn, states, [0])
    assert set(states) == {("job_1", 1)}
    conn.execute("UPDATE jobs SET status = 'SUCCEEDED'")
    assert passes(conn, states, range(10, 200, 10)) == [] and states == {}


def test_switched_off(conn):
    off = StallPolicy(after_ms=60 * S, enabled=False)
    states: dict = {}
    assert [r for t in range(0, 300, 10) for r in stall_pass(conn, states, t * S, t * S, off)] == []


def test_the_fingerprint_is_kept_in_the_event(conn):
    line(conn, 0)
    (_t, row), = passes(conn, {}, range(0, 100, 10))
    stored = json.loads(conn.execute("SELECT context FROM events").fetchone()[0])
    assert stored["fingerprint"] == [["stdout", 0], ["points", 0]] == row.context["fingerprint"]
