"""Checkpoints the node's watcher found, as the server keeps them in a real database: once per
(run, path) and fingerprint, linked to the job's run, beside the ones the SDK registered."""

from __future__ import annotations

import pytest

from gpuplaned.domain.run_records import parse_checkpoints
from gpuplaned.protocol.agent import FoundCheckpoint
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service.api.run_records import checkpoint_table, store_found, store_records
from gpuplaned.store import checkpoint_rows
from gpuplaned.store.database import open_writer

FP1, FP2 = "sha1:" + "1" * 40, "sha1:" + "2" * 40


@pytest.fixture
def conn(tmp_path):
    c = open_writer(tmp_path / "g.db")
    for job_id in ("job_a", "job_b"):
        c.execute("INSERT INTO jobs (id, name, type, status, command, created_at) "
                  "VALUES (?, 'train', 'TRAIN', 'RUNNING', '[]', 1)", (job_id,))
    c.execute("INSERT INTO runs (id, job_id, source, status, created_at) VALUES ('run_a', 'job_a', 'job', 'RUNNING', 1)")
    yield c
    c.close()


def _events(conn):
    return conn.execute("SELECT type, job_id, run_id, step, context FROM events ORDER BY ts, id").fetchall()


def test_a_find_is_registered_once_and_a_rewrite_again(conn):
    first = FoundCheckpoint("/w/checkpoints/step_5.pt", "file", 100, 9, FP1, 5)
    rows = store_found(conn, "job_a", "run_a", [first], 1000)
    assert [(r.type, r.job_id, r.run_id, r.step) for r in rows] == [("CHECKPOINT_CREATED", "job_a", "run_a", 5)]
    assert rows[0].context["fingerprint"] == FP1
    assert store_found(conn, "job_a", "run_a", [first], 2000) == []  # resent: nothing new
    (ck,) = checkpoint_rows.list_for_run(conn, "run_a")
    assert (ck.path, ck.step, ck.size_bytes, ck.fingerprint, ck.metadata, ck.created_at) == (
        "/w/checkpoints/step_5.pt", 5, 100, FP1, {"source": "watcher", "kind": "file"}, 1000)
    rewritten = FoundCheckpoint("/w/checkpoints/step_5.pt", "file", 120, 19, FP2, 5)
    assert len(store_found(conn, "job_a", "run_a", [rewritten], 3000)) == 1
    (again,) = checkpoint_rows.list_for_run(conn, "run_a")
    assert (again.id, again.size_bytes, again.fingerprint) == (ck.id, 120, FP2)
    assert len(_events(conn)) == 2
    table = checkpoint_table(conn, "run_a", None)
    assert [c.fingerprint for c in table.checkpoints] == [FP2]


def test_a_path_the_script_registered_gains_the_fingerprint_and_no_second_event(conn):
    store_records(conn, "run_a", "job_a", [], parse_checkpoints({"checkpoints": [{"path": "/w/out/a.pt", "step": 7}]}),
                  500)
    assert store_found(conn, "job_a", "run_a", [FoundCheckpoint("/w/out/a.pt", "file", 3, 1, FP1)], 600) == []
    (ck,) = checkpoint_rows.list_for_run(conn, "run_a")
    assert (ck.step, ck.fingerprint, ck.size_bytes) == (7, FP1, 3)  # the script's step is kept
    assert len(_events(conn)) == 1


def test_a_find_for_a_run_that_is_not_the_jobs_registers_nothing(conn):
    for job_id, run_id in (("job_b", "run_a"), ("job_a", "run_nope")):
        with pytest.raises(ApiError) as caught:
            store_found(conn, job_id, run_id, [FoundCheckpoint("/w/x.pt", "file", 1, 1, FP1)], 1)
        assert caught.value.code == ErrorCode.NOT_FOUND
    assert checkpoint_rows.list_for_run(conn, "run_a") == []


def test_the_script_registering_a_file_the_watcher_found_first_adds_its_word_and_no_second_event(conn):
    store_found(conn, "job_a", "run_a", [FoundCheckpoint("/w/out/b.pt", "file", 3, 1, FP1)], 500)
    told = parse_checkpoints({"checkpoints": [{"path": "/w/out/b.pt", "step": 9, "size_bytes": 3,
                                               "metadata": {"val_loss": 0.5}}]})
    assert store_records(conn, "run_a", "job_a", [], told, 600) == []
    (ck,) = checkpoint_rows.list_for_run(conn, "run_a")
    assert (ck.step, ck.fingerprint, ck.metadata) == (9, FP1, {"source": "watcher", "kind": "file", "val_loss": 0.5})
    assert [e[0] for e in _events(conn)] == ["CHECKPOINT_CREATED"]
    # The same path at another step is the file saved anew: news, as before.
    moved = parse_checkpoints({"checkpoints": [{"path": "/w/out/b.pt", "step": 20}]})
    assert [r.step for r in store_records(conn, "run_a", "job_a", [], moved, 700)] == [20]
    assert checkpoint_rows.list_for_run(conn, "run_a")[0].fingerprint is None


def test_a_file_another_run_registered_as_it_is_is_not_this_runs(conn):
    """An evaluation job in the training's folder: its watcher sees the training's checkpoint."""
    conn.execute("INSERT INTO runs (id, job_id, source, status, created_at) VALUES ('run_b', 'job_b', 'job', 'RUNNING', 1)")
    training = FoundCheckpoint("/w/checkpoints/step_5.pt", "file", 100, 9, FP1, 5)
    assert len(store_found(conn, "job_a", "run_a", [training], 1000)) == 1
    assert store_found(conn, "job_b", "run_b", [training], 2000) == []
    assert checkpoint_rows.list_for_run(conn, "run_b") == []
    saved_again = FoundCheckpoint("/w/checkpoints/step_5.pt", "file", 120, 19, FP2, 5)  # the other job wrote it
    assert [r.run_id for r in store_found(conn, "job_b", "run_b", [saved_again], 3000)] == ["run_b"]
