"""The ``[detector]`` settings beyond the switches of the metric rules, in a real database:
LOSS_SPIKE's window and MAD multiple (validated, the rule's constants by default), the
lifecycle events' switches, the TensorBoard tailer's ingest judged with the daemon's rules,
and the cap on restarts for a stall."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from gpuplaned.config import ConfigError, DetectorConfig, load_config
from gpuplaned.domain.rules import loss_spike
from gpuplaned.domain.rules.loss_spike import MADS, WINDOW, SpikePolicy
from gpuplaned.protocol.tb_frames import TbCursor, TbFile, TbPoints, TbSeries
from gpuplaned.service.link.tb_points import store_points
from gpuplaned.service.passes import failure_policies
from gpuplaned.service.passes.detector import fingerprint, lifecycle_pass, spike_policy
from gpuplaned.store.database import open_writer
from gpuplaned.store.event_rows import EventRow, insert_events

T0 = 1_700_000_000_000


def _load(tmp_path, text: str) -> DetectorConfig:
    path = tmp_path / "gpuplaned.toml"
    path.write_text(text)
    env = {"HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    return load_config({"config": str(path)}, env).detector


@pytest.fixture
def conn(tmp_path):
    db = open_writer(tmp_path / "g.db")
    yield db
    db.close()


def test_the_defaults_are_the_rules_constants():
    cfg = DetectorConfig()
    assert spike_policy(cfg) == SpikePolicy() == SpikePolicy(window=WINDOW, mads=MADS) == SpikePolicy(64, 6.0)
    assert (cfg.spike_hold, cfg.spike_extreme) == (loss_spike.HOLD, loss_spike.EXTREME) == (100, 8.0)
    assert cfg.run_started and cfg.run_finished
    assert cfg.stall_restarts == failure_policies.STALL_RESTARTS == 3


def test_settable_from_the_file(tmp_path):
    cfg = _load(tmp_path, "[detector]\nspike_window = 33\nspike_mads = 4.5\nrun_started = false\n"
                          "run_finished = false\nstall_restarts = 0\nspike_hold = 40\nspike_extreme = 12\n")
    assert spike_policy(cfg) == SpikePolicy(33, 4.5, hold=40, extreme=12.0)
    assert (cfg.run_started, cfg.run_finished, cfg.stall_restarts) == (False, False, 0)


@pytest.mark.parametrize("line", ["spike_window = 19", "spike_window = 64.5", "spike_window = 10001",
                                  "spike_mads = 0", "spike_mads = \"6\"", "run_started = 1",
                                  "run_finished = \"no\"", "stall_restarts = -1", "stall_restarts = 1.5",
                                  "spike_hold = 2", "spike_hold = 1.5", "spike_extreme = 0.5"])
def test_a_bad_value_is_refused_naming_the_key(tmp_path, line):
    with pytest.raises(ConfigError, match=f"detector.{line.split()[0]}"):
        _load(tmp_path, f"[detector]\n{line}\n")


def _run(conn, run_id, started, finished=None, status="RUNNING"):
    conn.execute("INSERT INTO runs (id, name, source, status, created_at, started_at, finished_at) "
                 "VALUES (?, 'n', 'sdk', ?, ?, ?, ?)", (run_id, status, started, started, finished))


@pytest.mark.parametrize("started, finished", [(False, True), (True, False), (False, False)])
def test_each_lifecycle_event_can_be_switched_off(conn, started, finished):
    _run(conn, "r1", T0 + 1000, T0 + 5000, "SUCCEEDED")
    rows = lifecycle_pass(conn, T0 + 6000, T0, started=started, finished=finished)
    want = [t for t, on in (("RUN_STARTED", started), ("RUN_FINISHED", finished)) if on]
    assert [r.type for r in rows] == want
    assert lifecycle_pass(conn, T0 + 7000, T0, started=started, finished=finished) == []  # and once only
    stored = [t for (t,) in conn.execute("SELECT type FROM events ORDER BY rowid")]
    assert stored == want


# The TensorBoard tailer's points: the same rules as the SDK's.

def _series(name, steps, values):
    def b64(a, dtype):
        return base64.b64encode(np.asarray(a, dtype=dtype).tobytes()).decode()
    return TbSeries(name, b64(steps, "<i8"), b64([T0 + s for s in steps], "<i8"), b64(values, "<f8"))


def _tb_pass(conn, rules):
    conn.execute("INSERT INTO jobs (id, name, type, status, command, created_at) "
                 "VALUES ('job_a', 'train', 'TRAIN', 'RUNNING', '[]', 1)")
    conn.execute("INSERT INTO runs (id, job_id, attempt, source, status, created_at) "
                 "VALUES ('run_a', 'job_a', 1, 'job', 'RUNNING', 1)")
    values = [1.0 + 0.01 * (i % 5) for i in range(40)] + [1.3]  # 1.3: over median + 6 MADs, under + 40
    steps = list(range(len(values)))
    part = TbFile("/w/events.out.tfevents.1.h", None, TbCursor(7, 100), (_series("train/loss", steps, values),), (),
                  (), ())
    _stored, events = store_points(conn, TbPoints("job_a", 1, "run_a", (part,)), 5000, None, rules)
    return [e.type for e in events]


@pytest.mark.parametrize("rules, raised", [(DetectorConfig(), ["LOSS_SPIKE"]),
                                           (DetectorConfig(spike_mads=40.0), []),
                                           (DetectorConfig(loss_spike=False), []),
                                           (DetectorConfig(spike_window=20), ["LOSS_SPIKE"])])
def test_the_tailers_points_are_judged_with_the_daemons_rules(conn, rules, raised):
    assert _tb_pass(conn, rules) == raised
    stored = [t for (t,) in conn.execute("SELECT type FROM events")]
    assert stored == raised


# on_stalled = restart, at most stall_restarts times per job.

STALL_POLICY = json.dumps({"on_stalled": {"after": "1s", "action": "restart"}})


def _running_job(conn):
    conn.execute("INSERT INTO jobs (id, name, type, status, command, created_at, policies, attempt, max_attempts) "
                 "VALUES ('job_s', 'train', 'TRAIN', 'RUNNING', '[]', 1, ?, 1, 1)", (STALL_POLICY,))


def _stall(conn, n, attempt, ts):
    insert_events(conn, [EventRow(f"ev_stall{n}", ts, "RUN_STALLED", "warning", None, "job_s", None, None, "silent",
                                  {"attempt": attempt, "silent_ms": 5000})])


def _settle(conn, now, limit):
    conn.execute("BEGIN IMMEDIATE")
    settled = failure_policies.settle(conn, now, stall_restarts=limit)
    conn.execute("COMMIT")
    return [(e.type, e.context["action"]) for e in settled.events]


def _attempt_ends_and_the_next_runs(conn, attempt):
    conn.execute("UPDATE jobs SET status = 'CANCELLED', finished_at = 1 WHERE id = 'job_s'")
    assert _settle(conn, T0 + attempt * 100_000 + 50, 2) == [("POLICY_ACTION", "restarted")]
    assert conn.execute("SELECT status FROM jobs WHERE id = 'job_s'").fetchone()[0] == "QUEUED"
    conn.execute("UPDATE jobs SET status = 'RUNNING', attempt = ?, cancel_requested = 0 WHERE id = 'job_s'",
                 (attempt + 1,))


def test_a_job_is_restarted_for_stalls_at_most_n_times_then_the_policy_gives_up(conn):
    _running_job(conn)
    for attempt in (1, 2):
        _stall(conn, attempt, attempt, T0 + attempt * 100_000)
        assert _settle(conn, T0 + attempt * 100_000 + 10, 2) == [("POLICY_ACTION", "restart")]
        assert conn.execute("SELECT cancel_requested FROM jobs WHERE id = 'job_s'").fetchone()[0] == 1
        _attempt_ends_and_the_next_runs(conn, attempt)
    _stall(conn, 3, 3, T0 + 300_000)
    conn.execute("BEGIN IMMEDIATE")
    settled = failure_policies.settle(conn, T0 + 300_010, stall_restarts=2)
    conn.execute("COMMIT")
    (gave_up,) = settled.events
    assert (gave_up.type, gave_up.context["action"], gave_up.severity) == ("POLICY_SKIPPED", "give_up", "warning")
    assert "restarted for a stall 2 times already (at most 2): gave up" in gave_up.context["reason"]
    assert (gave_up.context["restarts"], gave_up.context["limit"]) == (2, 2)
    assert settled.cancels == [] and not settled.requeued
    # The job keeps running untouched, the trigger is settled once, with the reason on record.
    assert conn.execute("SELECT status, cancel_requested FROM jobs WHERE id = 'job_s'").fetchone() == ("RUNNING", 0)
    assert conn.execute("SELECT state, action, reason FROM policy_actions WHERE event_id = 'ev_stall3'").fetchone() \
        == ("done", "give_up", gave_up.context["reason"])
    assert [t for (t,) in conn.execute("SELECT type FROM events WHERE id = ?", (gave_up.id,))] == ["POLICY_SKIPPED"]
    assert _settle(conn, T0 + 300_020, 2) == []


def test_no_restart_at_all_with_a_cap_of_zero(conn):
    _running_job(conn)
    _stall(conn, 1, 1, T0)
    assert _settle(conn, T0 + 10, 0) == [("POLICY_SKIPPED", "give_up")]


def test_the_fingerprint_is_public_and_follows_the_runs_points(conn):
    _running_job(conn)
    assert fingerprint(conn, "job_s", 1, None) == [["points", 0]]
