"""The store with real SQLite files: migrations, refusal of bad files, group commit, readers."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import uuid

import attrs
import pytest
import trio
import trio.testing
from gpuplaned.actors import store

from gpuplaned.config import Config
from gpuplaned.runtime.broadcast import Broadcast
from gpuplaned.runtime.call import Reply
from gpuplaned.runtime.spec import ActorSpec
from gpuplaned.runtime.supervisor import ActorStartError, Supervisor
from gpuplaned.store.database import Migration, StoreError, load_migrations, open_writer
from gpuplaned.store.readers import Readers
from gpuplaned.store.writer import Write, commit_batch, write

SEED_TABLES = {
    "projects", "experiments", "nodes", "gpu_slots", "jobs", "runs", "metric_definitions",
    "project_primary_metrics", "experiment_primary_metrics", "events", "checkpoints",
    "evaluations", "artifacts", "webhook_subscriptions",
    # 0003 replaced the seed's row-per-point metric tables with packed chunks.
    "ts_series", "ts_chunks", "ts_rollup_state", "ts_batches",
    "api_tokens",  # 0004
    "idempotency_keys",  # 0005
    "sessions",  # 0006
}


def tables(conn):
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def test_fresh_database_gets_the_seed_schema_and_pragmas(tmp_path):
    conn = open_writer(tmp_path / "db" / "g.db")
    assert SEED_TABLES <= tables(conn)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(load_migrations())
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    conn.close()
    conn = open_writer(tmp_path / "db" / "g.db")  # reopening is a no-op
    conn.close()


def test_migrations_apply_in_order_from_the_recorded_version(tmp_path):
    path = tmp_path / "g.db"
    base = [Migration(1, "0001_a.sql", "CREATE TABLE a (x INTEGER);")]
    open_writer(path, base).close()
    more = base + [Migration(2, "0002_b.sql", "ALTER TABLE a ADD COLUMN y TEXT; CREATE TABLE b (z);")]
    conn = open_writer(path, more)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    assert [r[1] for r in conn.execute("PRAGMA table_info(a)")] == ["x", "y"]
    conn.close()


def test_failed_migration_leaves_the_previous_version(tmp_path):
    path = tmp_path / "g.db"
    base = [Migration(1, "0001_a.sql", "CREATE TABLE a (x);")]
    open_writer(path, base).close()
    broken = base + [Migration(2, "0002_bad.sql", "CREATE TABLE c (q); CREATE TABLE a (x);")]
    with pytest.raises(StoreError, match="0002_bad.sql failed"):
        open_writer(path, broken)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert "c" not in tables(conn)
    conn.close()


def test_not_a_database_is_refused_and_untouched(tmp_path):
    path = tmp_path / "g.db"
    path.write_bytes(b"these are my notes, not a database\n" * 100)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not a SQLite database"):
        open_writer(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.db"]


def test_damaged_database_is_refused_and_untouched(tmp_path):
    path = tmp_path / "g.db"
    open_writer(path).close()
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # keep the magic, wreck the first page
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="damaged"):
        open_writer(path)
    assert path.read_bytes() == bytes(data)


def test_newer_database_is_refused_and_untouched(tmp_path):
    path = tmp_path / "g.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="schema version 999, newer than this gpuplaned"):
        open_writer(path)
    assert path.read_bytes() == before


# --- the actor -------------------------------------------------------------


@attrs.define
class Shared:
    config: Config
    changes: Broadcast[frozenset[str]] = attrs.field(factory=Broadcast)  # what the store publishes


def store_spec():
    return ActorSpec("store", store.run, frozenset({"all"}), graceful_stop=True, inbox_size=1024)


async def start_store(nursery, tmp_path, **cfg):
    shared = Shared(Config(home=tmp_path / "home", **cfg))
    sup = Supervisor([store_spec()], shared)
    await nursery.start(sup.run)
    return sup, shared


def insert_project(n):
    def apply(conn):
        conn.execute("INSERT INTO projects (id, name, created_at) VALUES (?, ?, 0)", (f"p{n}", f"name{n}"))
        return n

    return apply


async def test_group_commit_folds_concurrent_writes_into_few_transactions(nursery, tmp_path):
    sup, shared = await start_store(nursery, tmp_path)
    port = sup.ports["store"]
    results = []

    async def writer(n):
        results.append(await write(port, insert_project(n)))

    async with trio.open_nursery() as writers:
        for n in range(200):
            writers.start_soon(writer, n)
    assert sorted(results) == list(range(200))
    stats = sup.handle("store").statistics()
    assert stats.writes == 200
    assert stats.batches < 20, stats
    assert stats.largest_batch > 10
    readers = Readers(shared.config.db_path)
    count = await readers.run(lambda c: c.execute("SELECT count(*) FROM projects").fetchone()[0])
    readers.close()
    assert count == 200


async def test_a_write_and_the_write_of_a_task_it_woke_share_a_transaction(nursery, tmp_path):
    """A job's end wakes the scheduler, then sends its report: the pass the scheduler sends on
    waking is committed with it (trio runs woken tasks in either order; the store let the
    report go alone half the time, a commit and a store wake-up more per job)."""
    sup, _ = await start_store(nursery, tmp_path)
    port = sup.ports["store"]
    for n in range(0, 40, 2):
        await trio.testing.wait_all_tasks_blocked()
        before = sup.handle("store").statistics().batches
        woken = trio.Event()

        async def scheduler(n=n, woken=woken):
            await woken.wait()
            await write(port, insert_project(n + 1), small=True)

        async with trio.open_nursery() as tasks:
            tasks.start_soon(scheduler)
            await trio.testing.wait_all_tasks_blocked()
            woken.set()
            await write(port, insert_project(n), small=True)
        assert sup.handle("store").statistics().batches == before + 1, n


async def test_small_writes_commit_on_the_event_loop_thread_and_the_rest_on_a_worker(nursery, tmp_path):
    sup, _ = await start_store(nursery, tmp_path)
    port = sup.ports["store"]
    loop_thread = threading.get_ident()

    def where(conn):
        name = uuid.uuid4().hex
        conn.execute("INSERT INTO projects (id, name, created_at) VALUES (?, ?, 0)", (name, name))
        return threading.get_ident()

    assert await write(port, where, small=True) == loop_thread
    assert await write(port, where) != loop_thread
    async with trio.open_nursery() as n:  # in one batch with a write that is not small: a worker
        results = []
        n.start_soon(lambda: _append(results, write(port, where, small=True)))
        n.start_soon(lambda: _append(results, write(port, where)))
    assert len(set(results)) == 1 and results[0] != loop_thread


async def _append(results, awaitable):
    results.append(await awaitable)


async def test_the_store_checkpoints_the_log_itself_after_commits(nursery, tmp_path, monkeypatch):
    # Real time (a checkpoint runs on a real thread, which a mock clock would not wait for),
    # with a short interval.
    monkeypatch.setattr(store, "CHECKPOINT_INTERVAL_S", 0.05)
    sup, shared = await start_store(nursery, tmp_path)
    port = sup.ports["store"]

    def in_the_database_file() -> int:
        # immutable: the database file alone, the write-ahead log ignored
        alone = sqlite3.connect(f"file:{shared.config.db_path}?mode=ro&immutable=1", uri=True)
        try:
            return alone.execute("SELECT count(*) FROM projects").fetchone()[0]
        finally:
            alone.close()

    await trio.sleep(0.3)
    assert sup.handle("store").statistics().checkpoints == 0  # nothing written: nothing to do
    for n in range(3):
        await write(port, insert_project(n), small=True)
    # No commit copies the log into the database by itself (some run on the event loop).
    assert sup.handle("store")._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    with trio.fail_after(10):
        while in_the_database_file() < 3:
            await trio.sleep(0.02)
    with trio.fail_after(10):
        while sup.handle("store").unchecked:  # the last checkpoint's thread reports back
            await trio.sleep(0.02)
    done = sup.handle("store").statistics().checkpoints
    assert done >= 1
    await trio.sleep(0.3)
    assert sup.handle("store").statistics().checkpoints == done  # and not again until more commits


async def test_a_failing_write_is_rolled_back_alone(nursery, tmp_path):
    sup, _ = await start_store(nursery, tmp_path)
    port = sup.ports["store"]
    outcomes = {}

    async def attempt(key, apply):
        try:
            outcomes[key] = await write(port, apply)
        except Exception as exc:
            outcomes[key] = exc

    def half_then_fail(conn):
        conn.execute("INSERT INTO projects (id, name, created_at) VALUES ('bad', 'bad', 0)")
        conn.execute("INSERT INTO experiments (id, project_id, name, created_at) VALUES ('e', 'nope', 'e', 0)")

    async with trio.open_nursery() as n:
        n.start_soon(attempt, "a", insert_project(1))
        n.start_soon(attempt, "bad", half_then_fail)  # foreign key violation
        n.start_soon(attempt, "b", insert_project(2))
    assert outcomes["a"] == 1 and outcomes["b"] == 2
    assert isinstance(outcomes["bad"], sqlite3.IntegrityError)
    conn = sqlite3.connect(tmp_path / "home" / "gpuplane.db")
    assert sorted(r[0] for r in conn.execute("SELECT id FROM projects")) == ["p1", "p2"]
    conn.close()
    assert sup.handle("store").statistics().failed_writes == 1


def test_a_batch_of_one_write_is_its_own_transaction(tmp_path):
    """One write alone takes no savepoint (the store's batches in a drain are mostly one write);
    failing, it is undone alone all the same, and the connection goes on."""
    conn = open_writer(tmp_path / "g.db")
    said = []
    conn.set_trace_callback(said.append)

    def one(name):
        return Write(lambda c: c.execute("INSERT INTO projects (id, name, created_at) VALUES (?, ?, 0)",
                                         (name, name)).rowcount, Reply())

    def half_then_fail(c):
        c.execute("INSERT INTO projects (id, name, created_at) VALUES ('bad', 'bad', 0)")
        c.execute("INSERT INTO experiments (id, project_id, name, created_at) VALUES ('e', 'nope', 'e', 0)")

    assert commit_batch(conn, [one("p1")]) == [(True, 1)]
    assert said == ["BEGIN IMMEDIATE", "INSERT INTO projects (id, name, created_at) VALUES ('p1', 'p1', 0)", "COMMIT"]
    [(ok, error)] = commit_batch(conn, [Write(half_then_fail, Reply())])
    assert not ok and isinstance(error, sqlite3.IntegrityError) and not conn.in_transaction
    assert [(True, 1), (True, 1)] == commit_batch(conn, [one("p2"), one("p3")])
    assert [r[0] for r in conn.execute("SELECT id FROM projects ORDER BY id")] == ["p1", "p2", "p3"]
    conn.close()


async def test_stop_commits_what_is_queued(nursery, tmp_path):
    sup, _ = await start_store(nursery, tmp_path)
    port = sup.ports["store"]
    replies = []
    for n in range(50):
        reply = Reply()
        await port.send(Write(insert_project(n), reply))
        replies.append(reply)
    await sup.stop("store")
    assert all(r.done for r in replies)
    assert [await r.wait() for r in replies] == list(range(50))
    conn = sqlite3.connect(tmp_path / "home" / "gpuplane.db")
    assert conn.execute("SELECT count(*) FROM projects").fetchone()[0] == 50
    conn.close()


async def test_corrupt_database_fails_the_store_start(tmp_path):
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "gpuplane.db").write_text("not sqlite")
    sup = Supervisor([store_spec()], Shared(Config(home=tmp_path / "home")))
    with pytest.raises(ActorStartError, match="not a SQLite database"):
        await sup.run()


async def test_readers_keep_working_after_a_failed_query(tmp_path):
    open_writer(tmp_path / "g.db").close()
    readers = Readers(tmp_path / "g.db", size=1)
    with pytest.raises(sqlite3.OperationalError):
        await readers.run(lambda c: c.execute("SELECT * FROM no_such_table").fetchall())
    assert await readers.run(lambda c: c.execute("SELECT 1").fetchone()[0]) == 1
    with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only|attempt to write"):
        await readers.run(lambda c: c.execute("INSERT INTO projects VALUES ('x','x',NULL,0)"))
    readers.close()


async def test_a_read_sees_one_commit_whatever_commits_meanwhile(tmp_path):
    """All of a read's statements see the same commit: a write committed between two of them
    is in neither (each statement alone would see it in the second)."""
    writer = open_writer(tmp_path / "g.db")
    readers = Readers(tmp_path / "g.db", size=1)

    def read_write_read(conn):
        before = conn.execute("SELECT count(*) FROM projects").fetchone()[0]
        writer.execute("INSERT INTO projects (id, name, created_at) VALUES ('p', 'p', 0)")  # autocommit
        return before, conn.execute("SELECT count(*) FROM projects").fetchone()[0]

    assert await readers.run(read_write_read) == (0, 0)
    assert await readers.run(lambda c: c.execute("SELECT count(*) FROM projects").fetchone()[0]) == 1
    readers.close()
    writer.close()



def test_another_process_closing_its_connection_leaves_the_writers_log_alone(tmp_path):
    """The store's opening reads the file raw (header, read-through) before it connects: a
    descriptor closed after would drop this process's locks, the next process to close its
    own connection would take itself for the last user and delete the write-ahead log, and
    every later commit would go into the deleted log (lost at the next start)."""
    path = tmp_path / "gpuplane.db"
    open_writer(path).close()  # an existing database, as at a daemon's restart
    conn = open_writer(path)
    reader = ("import sqlite3, sys\n"
              "c = sqlite3.connect(sys.argv[1])\n"
              "print(c.execute('SELECT count(*) FROM meta_probe').fetchone()[0])\n"
              "c.close()\n")
    conn.execute("CREATE TABLE meta_probe (n INTEGER)")
    conn.execute("INSERT INTO meta_probe VALUES (1)")
    first = subprocess.run([sys.executable, "-c", reader, str(path)], capture_output=True, text=True, check=True)
    conn.execute("INSERT INTO meta_probe VALUES (2)")  # after the other process closed its connection
    second = subprocess.run([sys.executable, "-c", reader, str(path)], capture_output=True, text=True, check=True)
    assert (first.stdout.strip(), second.stdout.strip()) == ("1", "2")
    assert path.with_name("gpuplane.db-wal").exists()
    conn.close()
