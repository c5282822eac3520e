"""The early-stopping pass's read (service/passes/early_stop.judged) on a real SQLite file: what it
stops, and that a pass reads a run's points again only once a new one came."""

from __future__ import annotations

import json

import pytest

from gpuplaned.protocol.agent import GpuInfo, Hello, JobStatus
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.service.passes.dispatch import schedule
from gpuplaned.service.passes.early_stop import Seen, judged
from gpuplaned.store import job_rows
from gpuplaned.store.database import open_writer
from gpuplaned.tsdb.ingest import ingest

NOW = 1_700_000_000_000


@pytest.fixture
def db(tmp_path):
    conn = open_writer(tmp_path / "gpuplane.db")
    node_id, _ = job_rows.register_node(conn, Hello("n1", "0", (GpuInfo(0, "Fake", 1024),)), NOW)
    conn.execute("INSERT INTO sweeps (id, name, kind, template, parameters, metric, goal, early_stop, created_at) "
                 "VALUES ('swp_e', 'e', 'list', '{}', '[]', 'loss', 'min', ?, ?)",
                 (json.dumps({"rule": "median", "min_steps": 5}), NOW))
    yield conn, node_id
    conn.close()


def _trial(conn, node, k, level, *, ended):
    spec = JobSpec(name=f"t{k}", command=("true",), cwd="/", env={}, gpu=0)
    job_id = job_rows.insert_job(conn, spec, NOW, job_rows.capacities(conn, {node}))
    conn.execute("UPDATE jobs SET sweep_id = 'swp_e', sweep_trial = ?, sweep_values = ? WHERE id = ?",
                 (k, json.dumps({"k": k}), job_id))
    assert schedule(conn, NOW, {node})
    job_rows.apply_status(conn, node, JobStatus(job_id, 1, "RUNNING", at_ms=NOW), NOW)
    run_id = job_rows.get_job(conn, job_id).run_id
    _log(conn, run_id, range(20), level, seq=0)
    if ended:
        job_rows.apply_status(conn, node, JobStatus(job_id, 1, "SUCCEEDED", exit_code=0), NOW)
    return job_id, run_id


def _log(conn, run_id, steps, level, *, seq):
    steps = list(steps)
    ingest(conn, "run", run_id, {"loss": {"ts": [NOW + 100 * s for s in steps], "step": steps,
                                          "value": [level + 1 / (s + 1) for s in steps]}}, source=run_id, seq=seq)


def test_the_pass_stops_the_trial_behind_and_reads_only_what_changed(db):
    conn, node = db
    for k, level in enumerate((0.1, 0.2, 0.3)):
        _trial(conn, node, k, level, ended=True)
    behind, run_id = _trial(conn, node, 3, 2.0, ended=False)
    seen = Seen()
    [verdict] = judged(conn, NOW + 60_000, seen)
    assert (verdict.trial.job_id, verdict.stop.rule, verdict.stop.step) == (behind, "median", 19)
    assert verdict.stop.threshold == pytest.approx(0.2 + 1 / 20) and verdict.sweep.id == "swp_e"
    assert seen.reads == 4
    assert all(trial.steps == () and trial.memo for _mark, trial in seen.trials.values())  # curves kept, not points
    judged(conn, NOW + 62_000, seen)
    assert seen.reads == 4  # nothing new: nothing read again
    _log(conn, run_id, range(20, 25), 2.0, seq=1)
    [verdict] = judged(conn, NOW + 64_000, seen)
    assert seen.reads == 5 and verdict.stop.step == 24  # its new points, read once
    # Grace: a trial in its first seconds of running is not judged.
    conn.execute("UPDATE sweeps SET early_stop = ? WHERE id = 'swp_e'",
                 (json.dumps({"rule": "median", "min_steps": 5, "grace_s": 120}),))
    assert judged(conn, NOW + 64_000, seen) == []
    assert len(judged(conn, NOW + 121_000, seen)) == 1


def test_a_trial_asked_to_stop_is_not_judged_again(db):
    conn, node = db
    for k, level in enumerate((0.1, 0.2, 0.3)):
        _trial(conn, node, k, level, ended=True)
    behind, _run = _trial(conn, node, 3, 2.0, ended=False)
    job_rows.cancel_job(conn, behind, NOW, reason="EARLY_STOPPED")
    assert judged(conn, NOW + 60_000) == []
