"""Checkpoint lineage in a real database: each new checkpoint's parent is the run's previous one
by step (a run's first: the checkpoint the run resumed from), kept a chain when finds arrive out
of order or a path is saved anew; the listing's nearest metrics, evaluations and deleted marks;
and what retention counts as in use."""

from __future__ import annotations

import json

import pytest

from gpuplaned import tsdb
from gpuplaned.domain.run_records import parse_checkpoints
from gpuplaned.protocol.agent import FoundCheckpoint
from gpuplaned.protocol.converter import unstructure
from gpuplaned.service.api.run_records import checkpoint_table, store_found, store_records
from gpuplaned.store import checkpoint_rows, retention_rows
from gpuplaned.store.database import open_writer

FP = "sha1:" + "1" * 40


@pytest.fixture
def conn(tmp_path):
    c = open_writer(tmp_path / "g.db")
    for job_id, status in (("job_a", "RUNNING"), ("job_b", "RUNNING"), ("job_done", "SUCCEEDED")):
        c.execute("INSERT INTO jobs (id, name, type, status, command, created_at) VALUES (?, 'j', 'TRAIN', ?, '[]', 1)",
                  (job_id, status))
    c.execute("INSERT INTO runs (id, job_id, source, status, created_at) VALUES ('run_a', 'job_a', 'job', 'RUNNING', 1)")
    yield c
    c.close()


def _sdk(conn, run_id, *steps, now=1):
    store_records(conn, run_id, None, [], parse_checkpoints({"checkpoints": [
        {"path": f"/w/{run_id}/step_{s}.pt", "step": s, "size_bytes": 10} for s in steps]}), now)


def _chain(conn, run_id):
    """{step: parent's step (or the parent id when it is another run's)}."""
    rows = checkpoint_rows.list_for_run(conn, run_id)
    by_id = {ck.id: ck for ck in rows}
    return {ck.step: (by_id[ck.parent_id].step if ck.parent_id in by_id else ck.parent_id) for ck in rows}


def test_each_checkpoint_hangs_from_the_previous_one_by_step(conn):
    _sdk(conn, "run_a", 10, 20)
    assert _chain(conn, "run_a") == {10: None, 20: 10}
    store_found(conn, "job_a", "run_a", [FoundCheckpoint("/w/run_a/step_40.pt", "file", 1, 1, FP, 40)], 2)
    store_found(conn, "job_a", "run_a", [FoundCheckpoint("/w/run_a/step_30.pt", "file", 1, 1, FP, 30)], 3)
    assert _chain(conn, "run_a") == {10: None, 20: 10, 30: 20, 40: 30}  # 30 came late: spliced in
    _sdk(conn, "run_a", 5)
    assert _chain(conn, "run_a") == {5: None, 10: 5, 20: 10, 30: 20, 40: 30}


def test_a_path_saved_anew_moves_in_the_chain_without_a_loop(conn):
    store_records(conn, "run_a", None, [], parse_checkpoints({"checkpoints": [
        {"path": "/w/last.pt", "step": 10}, {"path": "/w/best.pt", "step": 15}]}), 1)
    store_records(conn, "run_a", None, [], parse_checkpoints({"checkpoints": [{"path": "/w/last.pt", "step": 20}]}), 2)
    assert _chain(conn, "run_a") == {15: None, 20: 15}


def test_a_resumed_runs_first_checkpoint_hangs_from_what_it_resumed_from(conn):
    _sdk(conn, "run_a", 10, 20)
    parent = checkpoint_rows.list_for_run(conn, "run_a")[-1]
    conn.execute("INSERT INTO runs (id, job_id, attempt, source, status, created_at, resumed_from, resume_step) "
                 "VALUES ('run_b', 'job_a', 2, 'job', 'RUNNING', 2, ?, 20)", (parent.id,))
    store_found(conn, "job_a", "run_b", [FoundCheckpoint("/w/run_b/step_30.pt", "file", 1, 1, FP, 30)], 5)
    _sdk(conn, "run_b", 40)
    assert _chain(conn, "run_b") == {30: parent.id, 40: 30}


def test_the_listing_shows_parents_nearest_metrics_evaluations_and_deleted_ones(conn):
    steps = [0, 10, 20, 30, 40, 50]
    tsdb.ingest(conn, "run", "run_a", {"val/loss": {"step": steps, "ts": steps, "value": [9, 5, 1, 4, 6, 8]},
                                       "lr": {"step": [12, 38], "ts": [12, 38], "value": [0.1, 0.01]}},
                source="s", seq=1)
    conn.execute("INSERT INTO metric_definitions (name, direction, created_at) VALUES ('val/loss', 'minimize', 1)")
    _sdk(conn, "run_a", 20, 35, 50)
    first, middle, last = checkpoint_rows.list_for_run(conn, "run_a")
    for ev_id, created, metrics in (("ev_1", 5, {"acc": 0.5}), ("ev_2", 9, {"acc": 0.7})):
        conn.execute("INSERT INTO evaluations (id, checkpoint_id, job_id, suite, dataset, metrics, status, created_at) "
                     "VALUES (?, ?, 'job_done', 'glue', 'sst2', ?, 'SUCCEEDED', ?)",
                     (ev_id, middle.id, json.dumps(metrics), created))
    assert checkpoint_rows.mark_deleted(conn, first, 7)  # the best by value, but gone: never marked best
    table = unstructure(checkpoint_table(conn, "run_a", "val/loss"))  # as the API writes it
    rows = {c["step"]: c for c in table["checkpoints"]}
    assert (rows[20]["deleted_at"], rows[20]["best"], rows[35]["best"]) == (7, False, True)
    assert rows[35]["parent_id"] == first.id and rows[50]["parent_id"] == middle.id
    assert rows[35]["metrics"] == [{"name": "val/loss", "value": 4.0, "step": 30},  # 30 and 40 tie: the one before
                                   {"name": "lr", "value": 0.01, "step": 38}]
    assert rows[20]["metrics"][1] == {"name": "lr", "value": 0.1, "step": 12}  # none before: the nearest after
    assert [e["id"] for e in rows[35]["evaluations"]] == ["ev_2", "ev_1"]
    assert rows[35]["evaluations"][0] | {"created_at": 0} == {
        "id": "ev_2", "job_id": "job_done", "status": "SUCCEEDED", "suite": "glue", "dataset": "sst2",
        "metrics": {"acc": 0.7}, "created_at": 0}
    assert rows[50]["evaluations"] == []


def test_what_is_in_use(conn):
    _sdk(conn, "run_a", 10, 20, 30, 40, 50)
    c10, c20, c30, c40, c50 = checkpoint_rows.list_for_run(conn, "run_a")
    conn.execute("INSERT INTO evaluations (id, checkpoint_id, job_id, metrics, status, created_at) "
                 "VALUES ('ev_live', ?, 'job_b', '{}', 'RUNNING', 1), ('ev_old', ?, 'job_done', '{}', 'SUCCEEDED', 1)",
                 (c10.id, c20.id))
    conn.execute("UPDATE jobs SET resume_from = ? WHERE id = 'job_b'", (c30.id,))
    conn.execute("UPDATE jobs SET resume_from = ? WHERE id = 'job_done'", (c20.id,))  # ended: no longer in use
    conn.execute("INSERT INTO runs (id, job_id, source, status, created_at, resumed_from) "
                 "VALUES ('run_b', 'job_b', 'job', 'RUNNING', 2, ?)", (c40.id,))
    conn.execute("INSERT INTO runs (id, job_id, source, status, created_at, finished_at, resumed_from) "
                 "VALUES ('run_c', 'job_b', 'job', 'SUCCEEDED', 2, 3, ?)", (c20.id,))
    store_records(conn, "run_b", None, [], parse_checkpoints({"checkpoints": [{"path": c50.path, "step": 1}]}), 4)
    used = retention_rows.in_use(conn, "run_a", checkpoint_rows.list_for_run(conn, "run_a"))
    assert used == {c10.id: ["evaluation ev_live (job job_b) is not finished"],
                    c30.id: ["job job_b will resume from it"],
                    c40.id: ["run run_b resumed from it and has not finished"],
                    c50.id: [f"checkpoint {checkpoint_rows.list_for_run(conn, 'run_b')[0].id} of run run_b is the "
                             "same file"]}
