"""The server's side of the TensorBoard tailer in a real database: a pass stored once with its
cursors (a resent or stale part adds nothing), a rewind that drops the older file's points
from a step on and remakes the run summary's view of the series, skipped records as events; one source per series: the SDK's points of a name win over the
tailer's, whichever came first."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from gpuplaned import tsdb
from gpuplaned.protocol.errors import ApiError
from gpuplaned.protocol.tb_frames import TbCursor, TbCursors, TbFile, TbPoints, TbProblem, TbRewind, TbSeries
from gpuplaned.service.api.series_owner import claim_for_sdk
from gpuplaned.service.api.sessions import summarize
from gpuplaned.service.link.tb_points import store_points, stored_cursors
from gpuplaned.store import run_rows
from gpuplaned.store.database import open_writer

A = "/w/runs/events.out.tfevents.100.h.1.0"
B = "/w/runs/events.out.tfevents.200.h.1.0"


@pytest.fixture
def conn(tmp_path):
    c = open_writer(tmp_path / "g.db")
    c.execute("INSERT INTO jobs (id, name, type, status, command, created_at) "
              "VALUES ('job_a', 'train', 'TRAIN', 'RUNNING', '[]', 1)")
    c.execute("INSERT INTO runs (id, job_id, attempt, source, status, created_at) "
              "VALUES ('run_a', 'job_a', 1, 'job', 'RUNNING', 1)")
    yield c
    c.close()


def series(name, steps, values):
    def b64(a, dtype):
        return base64.b64encode(np.asarray(a, dtype=dtype).tobytes()).decode()
    return TbSeries(name, b64(steps, "<i8"), b64([1_700_000_000_000 + s for s in steps], "<i8"), b64(values, "<f8"))


def part(path, after, offset, *points, cuts=(), rewinds=(), problems=()):
    return TbFile(path, after and TbCursor(7, after), TbCursor(7, offset), tuple(points), cuts, rewinds, problems)


def store(conn, *files):
    return store_points(conn, TbPoints("job_a", 1, "run_a", files), 5000)


def summary(conn):
    return json.loads(conn.execute("SELECT summary FROM runs WHERE id = 'run_a'").fetchone()[0])


def steps(conn, name="train/loss"):
    got = tsdb.read_points(conn, "run", "run_a", name, x="step")
    return list(zip(got["step"], got["value"]))


def test_a_pass_is_stored_once_with_its_cursor(conn):
    rewind = TbRewind("train/loss", A, "/w/runs", 0)
    first = part(A, None, 100, series("train/loss", [0, 1, 2], [3.0, 2.0, 1.0]), rewinds=(rewind,))
    stored, events = store(conn, first)
    assert (stored.stale, events) == ((), [])
    again, _ = store(conn, first)  # resent (an answer lost): stale, nothing added
    assert again.stale == (A,)
    assert steps(conn) == [(0, 3.0), (1, 2.0), (2, 1.0)]
    store(conn, part(A, 100, 150, series("train/loss", [3], [0.5])))
    assert steps(conn)[-1] == (3, 0.5)
    metric = summary(conn)["metrics"]["train/loss"]
    assert (metric["count"], metric["latest"]["step"], metric["best"]) == (4, 3, {"step": 3, "value": 0.5})
    [state] = stored_cursors(conn, TbCursors("job_a", 1)).files
    assert (state.path, state.cursor, state.rewinds) == (A, TbCursor(7, 150), (rewind,))
    assert conn.execute("SELECT tb_points FROM runs WHERE id = 'run_a'").fetchone()[0] == 4
    # Not from the stored cursor: stale.
    assert store(conn, part(A, 120, 200, series("train/loss", [9], [9.0])))[0].stale == (A,)


def test_a_newer_file_replaces_the_older_ones_points_from_its_first_step(conn):
    store(conn, part(A, None, 100, series("train/loss", list(range(10)), [1.0 - s / 100 for s in range(10)]),
                     series("train/acc", [0, 9], [0.1, 0.9])))
    assert summary(conn)["metrics"]["train/loss"]["best"] == {"step": 9, "value": 0.91}
    resumed = part(B, None, 80, series("train/loss", [5, 6, 7], [2.0, 1.5, 1.2]), cuts=(("train/loss", 5),),
                   rewinds=(TbRewind("train/loss", B, "/w/runs", 5),))
    store(conn, resumed)
    assert steps(conn) == [*((s, 1.0 - s / 100) for s in range(5)), (5, 2.0), (6, 1.5), (7, 1.2)]
    after = summary(conn)
    loss = after["metrics"]["train/loss"]
    assert loss["count"] == 8 and loss["latest"]["step"] == 7 and loss["latest"]["value"] == 1.2
    assert loss["best"] == {"step": 4, "value": 0.96}  # the dropped steps' best is gone
    assert after["metrics"]["train/acc"]["count"] == 2  # another series: untouched
    assert after["progress"] == {"step": 9}  # acc still reached step 9


def test_skipped_records_are_events_and_a_run_not_the_jobs_stores_nothing(conn):
    _, events = store(conn, part(A, None, 90, problems=(TbProblem(40, "bad data crc"),)))
    assert [(e.type, e.severity, e.run_id, e.context["offset"]) for e in events] == [
        ("TB_RECORD_SKIPPED", "warning", "run_a", 40)]
    assert conn.execute("SELECT count(*) FROM events WHERE type = 'TB_RECORD_SKIPPED'").fetchone()[0] == 1
    with pytest.raises(ApiError):
        store_points(conn, TbPoints("job_a", 2, "run_a", (part(B, None, 10),)), 1)
    assert [f.path for f in stored_cursors(conn, TbCursors("job_a", 1)).files] == [A]


def test_metric_sources_say_what_fed_the_run(conn):
    assert run_rows.get_run(conn, "run_a").metric_sources == []
    store(conn, part(A, None, 10, problems=(TbProblem(0, "file replaced"),)))
    assert run_rows.get_run(conn, "run_a").metric_sources == []  # no point yet
    store(conn, part(A, 10, 20, series("loss", [0], [1.0])))
    assert run_rows.get_run(conn, "run_a").metric_sources == ["tensorboard"]
    conn.execute("INSERT INTO sessions (id, run_id, status, points, created_at) VALUES ('s1', 'run_a', 'OPEN', 0, 1)")
    assert run_rows.get_run(conn, "run_a").metric_sources == ["tensorboard"]  # a session with no point
    conn.execute("UPDATE sessions SET points = 3")
    assert [r.metric_sources for r in run_rows.list_runs(conn)] == [["sdk", "tensorboard"]]


def test_a_part_over_a_batchs_points_is_ingested_in_slices(conn, monkeypatch):
    from gpuplaned.service.link import tb_points
    monkeypatch.setattr(tb_points, "MAX_BATCH_POINTS", 3)
    store(conn, part(A, None, 10, series("a", [0, 1, 2, 3, 4], [0.0] * 5), series("b", [0, 1], [1.0, 1.0])))
    assert [s for s, _ in steps(conn, "a")] == [0, 1, 2, 3, 4] and len(steps(conn, "b")) == 2
    assert summary(conn)["metrics"]["a"]["count"] == 5
    assert conn.execute("SELECT count(*) FROM ts_batches").fetchone()[0] == 3


def test_a_rewind_remakes_the_loss_window_without_the_dropped_values(conn):
    calm = [1.0 + (s % 5) / 100 for s in range(40)]
    _, events = store(conn, part(A, None, 100, series("train/loss", list(range(60)), calm + [100.0] * 20)))
    assert [(e.type, e.step) for e in events] == [("LOSS_SPIKE", 40)]
    dropped = part(B, None, 10, cuts=(("train/loss", 40),), rewinds=(TbRewind("train/loss", B, "/w/runs", 40),))
    store(conn, dropped)
    state = summary(conn)["_state"]["train/loss"]
    assert state["window"] == pytest.approx(calm[-64:]) and state["last_spike"] is None
    # The resumed run's own jump is judged against what is left: a spike again, not hidden
    # by the dropped values nor held back by the dropped spike's step.
    _, events = store(conn, part(B, 10, 20, series("train/loss", [40, 41], [100.0, 100.0])))
    assert [(e.type, e.step) for e in events] == [("LOSS_SPIKE", 40)]


def test_a_file_written_anew_under_the_same_inode_is_stored_though_its_offsets_repeat(conn):
    store(conn, part(A, None, 100, series("train/loss", [0, 1, 2], [3.0, 2.0, 1.0])))
    # Truncated and written again to the same length: the same inode and end offset as the
    # first read, which a batch named by them would take for that read, and drop.
    anew = part(A, 100, 100, series("train/loss", [0, 1, 2], [9.0, 8.0, 7.0]), cuts=(("train/loss", 0),),
                problems=(TbProblem(100, "file replaced"),))
    stored, events = store(conn, anew)
    assert stored.stale == () and [e.type for e in events] == ["TB_FILE_REPLACED"]
    assert steps(conn) == [(0, 9.0), (1, 8.0), (2, 7.0)]
    assert summary(conn)["metrics"]["train/loss"]["count"] == 3


def sdk_batch(conn, seq, name, points):
    """What ``sessions.add_batch`` does with an SDK batch's metrics."""
    metrics = {name: {"step": [s for s, _ in points], "ts": [1_800_000_000_000 + s for s, _ in points],
                      "value": [v for _, v in points]}}
    claim_for_sdk(conn, "run_a", list(metrics))
    tsdb.ingest(conn, "run", "run_a", metrics, source="ses_1", seq=seq)
    summarize(conn, "run_a", metrics, 6000)


def tb_points(conn):
    return conn.execute("SELECT tb_points FROM runs WHERE id = 'run_a'").fetchone()[0]


def test_the_sdk_takes_over_a_name_the_tailer_fed_first(conn):
    store(conn, part(A, None, 100, series("train/loss", [0, 1, 2], [3.0, 2.0, 1.0]),
                     series("tb_only", [0, 1], [5.0, 6.0])))
    assert tb_points(conn) == 5
    sdk_batch(conn, 0, "train/loss", [(0, 3.0), (1, 2.0)])
    assert steps(conn) == [(0, 3.0), (1, 2.0)]  # the SDK's points only: none twice
    assert steps(conn, "tb_only") == [(0, 5.0), (1, 6.0)]
    assert tb_points(conn) == 2
    assert summary(conn)["metrics"]["train/loss"]["count"] == 2


def test_the_tailers_points_of_a_name_the_sdk_logs_are_skipped_and_its_cuts_too(conn):
    sdk_batch(conn, 0, "train/loss", [(s, 1.0 / (s + 1)) for s in range(5)])
    store(conn, part(A, None, 100, series("train/loss", [0, 1, 2], [9.0, 9.0, 9.0]), cuts=(("train/loss", 0),)))
    assert steps(conn) == [(s, 1.0 / (s + 1)) for s in range(5)]
    assert tb_points(conn) == 0  # so the run's metric_sources do not say tensorboard
    assert json.loads(conn.execute("SELECT summary FROM runs").fetchone()[0])["metrics"]["train/loss"]["count"] == 5


def test_what_was_ingested_is_handed_back_for_the_live_feed_and_a_resend_hands_back_nothing(conn):
    first = part(A, None, 100, series("train/loss", [0, 1], [3.0, 2.0]))
    ingested: list = []
    store_points(conn, TbPoints("job_a", 1, "run_a", (first,)), 5000, ingested)
    [metrics] = ingested
    assert list(metrics["train/loss"]["step"]) == [0, 1] and list(metrics["train/loss"]["value"]) == [3.0, 2.0]
    again: list = []
    store_points(conn, TbPoints("job_a", 1, "run_a", (first,)), 5000, again)
    assert again == []
