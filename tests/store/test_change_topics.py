"""The change triggers on the writer connection (``gpuplaned.store.change_topics``) over a real
SQLite file and the store's own group commit (``writer.commit_batch``): each table marks its
topic on insert, update and delete; what a write or a batch rolled back marked never goes out;
the metric, log and time-series tables mark nothing."""

from __future__ import annotations

import sqlite3

import pytest

from gpuplaned.protocol.change_replies import TOPICS
from gpuplaned.runtime.call import Reply
from gpuplaned.store import change_topics
from gpuplaned.store.database import open_writer
from gpuplaned.store.writer import Write, commit_batch


@pytest.fixture
def writer(tmp_path):
    conn = open_writer(tmp_path / "g.db")
    marks = change_topics.track(conn)
    yield conn, marks
    conn.close()


def commit(conn, marks, *applies) -> list[tuple[bool, object]]:
    return commit_batch(conn, [Write(apply, Reply()) for apply in applies], marks)


def columns(conn, table) -> list[tuple[str, object]]:
    """A value for each column of ``table``: NULL where allowed, else one of its type."""
    out = []
    for _, name, kind, notnull, _, pk in conn.execute(f"PRAGMA table_info({table})"):
        kind = (kind or "").upper()
        value = 7 if "INT" in kind else 1.5 if "REAL" in kind else f"{table}-{name}"
        out.append((name, value if notnull or pk else None))
    return out


def test_every_topic_is_one_the_stream_names_and_every_table_exists(writer):
    conn, _ = writer
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert set(change_topics.TABLE_TOPICS) <= tables
    assert set(change_topics.TABLE_TOPICS.values()) == set(TOPICS)
    assert list(TOPICS) == sorted(TOPICS)


def test_a_row_inserted_updated_and_deleted_marks_its_table_s_topic_each_time(writer):
    conn, marks = writer
    conn.execute("PRAGMA foreign_keys = OFF")  # lone rows, without the rows they refer to
    for table, topic in change_topics.TABLE_TOPICS.items():
        row = columns(conn, table)
        names = ", ".join(name for name, _ in row)
        first = row[0][0]

        def insert(c, table=table, row=row, names=names):
            c.execute(f"INSERT OR REPLACE INTO {table} ({names}) VALUES ({', '.join('?' * len(row))})",
                      [1 if table == "queue_control" else value for _, value in row])  # its one row: id 1

        for apply in (insert,
                      lambda c, table=table, first=first: c.execute(f"UPDATE {table} SET {first} = {first}"),
                      lambda c, table=table: c.execute(f"DELETE FROM {table}")):
            [(ok, error)] = commit(conn, marks, apply)
            assert ok, (table, error)
            assert marks.take() == {topic}, table
    assert marks.take() == frozenset()  # taken: nothing left over


def test_the_metric_log_and_series_tables_mark_nothing(writer):
    conn, marks = writer
    triggered = {row[0] for row in conn.execute("SELECT tbl_name FROM sqlite_temp_master WHERE type = 'trigger'")}
    assert triggered == set(change_topics.TABLE_TOPICS)
    for table in ("metrics_raw", "metrics_rollup", "node_metrics_raw", "job_logs", "ts_chunks", "ts_series",
                  "ts_batches"):
        assert table not in triggered


def test_an_insert_that_inserted_nothing_marks_nothing(writer):
    conn, marks = writer
    commit(conn, marks, lambda c: c.execute(
        "INSERT OR IGNORE INTO metric_definitions (name, direction, created_at) VALUES ('loss', 'min', 1)"))
    assert marks.take() == {"runs"}
    commit(conn, marks, lambda c: c.execute(
        "INSERT OR IGNORE INTO metric_definitions (name, direction, created_at) VALUES ('loss', 'min', 2)"))
    assert marks.take() == frozenset()


def failing(c):
    c.execute("INSERT INTO job_groups (name) VALUES ('g')")
    raise ValueError("refused after its row")


def project(name):
    return lambda c: c.execute("INSERT INTO projects (id, name, created_at) VALUES (?, ?, 1)", (name, name))


def test_a_write_rolled_back_alone_marks_nothing_and_its_batch_keeps_the_rest(writer):
    conn, marks = writer
    [(ok, error)] = commit(conn, marks, failing)  # a batch of one: its transaction is rolled back
    assert not ok and isinstance(error, ValueError)
    assert marks.take() == frozenset()
    outcomes = commit(conn, marks, project("p1"), failing, project("p2"))  # savepoints
    assert [ok for ok, _ in outcomes] == [True, False, True]
    assert marks.take() == {"runs"}
    assert conn.execute("SELECT count(*) FROM job_groups").fetchone() == (0,)


def test_a_batch_that_fails_to_commit_marks_nothing_that_goes_out(writer):
    conn, marks = writer

    def breaks_the_transaction(c):
        c.execute("INSERT INTO projects (id, name, created_at) VALUES ('p', 'p', 1)")
        c.execute("COMMIT")  # ends the batch's transaction under it: the batch fails as a whole

    with pytest.raises(sqlite3.Error):
        commit(conn, marks, project("p0"), breaks_the_transaction)
    marks.discard()  # what the store actor does when a batch raises
    assert marks.take() == frozenset()


def test_a_token_s_job_marks_tokens_only_when_it_is_submitted_changes_state_or_goes(writer):
    conn, marks = writer
    conn.execute("PRAGMA foreign_keys = OFF")
    job = ("INSERT INTO jobs (id, name, type, status, command, created_at, token_id) "
           "VALUES (?, 'j', 'TRAIN', 'QUEUED', '[]', 1, ?)")
    commit(conn, marks, lambda c: c.execute(job, ("mine", "tok_1")), lambda c: c.execute(job, ("anyone", None)))
    assert marks.take() == {"jobs", "tokens"}
    commit(conn, marks, lambda c: c.execute("UPDATE jobs SET status = 'QUEUED', priority = 5"))
    assert marks.take() == {"jobs"}  # no state changed: its budget use did not
    commit(conn, marks, lambda c: c.execute("UPDATE jobs SET status = 'RUNNING' WHERE id = 'anyone'"))
    assert marks.take() == {"jobs"}
    commit(conn, marks, lambda c: c.execute("UPDATE jobs SET status = 'RUNNING' WHERE id = 'mine'"))
    assert marks.take() == {"jobs", "tokens"}
    commit(conn, marks, lambda c: c.execute("DELETE FROM jobs WHERE id = 'mine'"))
    assert marks.take() == {"jobs", "tokens"}
