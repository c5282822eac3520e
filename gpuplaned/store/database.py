"""Opening the database safely: checks, pragmas and numbered migrations.

A database that is not SQLite, is damaged (``PRAGMA quick_check`` at every open: 2.1 s for
a 1.1 GiB file read from disk, 0.5 s from the page cache, ``bench/quick_check_bench.py``),
or was written by a newer gpuplaned is a ``StoreError`` at start, which names the file and
what to do. It is never recreated, truncated or migrated "just in case": the file on disk is
exactly as we found it. The file is created 0600 (``gpuplaned.home.private_file``).

The file is read raw (its header, a read-through that warms the page cache) only before this
process has a SQLite connection to it. POSIX record locks belong to the process: closing *any*
descriptor of the file drops every lock its SQLite connections hold there, and SQLite cannot
know. A daemon that lost its shared lock looks gone to any other process: one closing its own
connection (``gpuplanectl backup``, the sqlite3 shell) then takes the database as its last
user, folds the write-ahead log in and deletes it, and every later commit of the daemon goes
into the deleted log, to be lost at the next restart.
"""

from __future__ import annotations

import re
import sqlite3
from importlib import resources
from pathlib import Path

import attrs

from gpuplaned.home import private_file

SQLITE_MAGIC = b"SQLite format 3\x00"
# The files (device, inode) this process has read raw already: a store actor started again,
# its readers still open, reads them through SQLite only. See the module docstring.
_READ_RAW: set[tuple[int, int]] = set()
_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


class StoreError(Exception):
    """The database cannot be used; the message names the file and the problem."""


class SchemaTooNew(StoreError):
    """The database was written by a newer gpuplaned: no retry of this binary will open it."""


@attrs.frozen
class Migration:
    version: int
    name: str
    sql: str


def load_migrations() -> list[Migration]:
    """The packaged migrations, numbered 1, 2, 3... without gaps."""
    found = []
    for entry in resources.files("gpuplaned.store").joinpath("migrations").iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise RuntimeError(f"migration {migration.name} out of sequence (expected {expected:04d})")
    return found


def _read_raw_once(path: Path) -> None:
    """The header check and the read-through, done before any connection of this process
    holds a lock on the file, so never again for the same file (see the module docstring)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot read database {path}: {exc.strerror}") from None
    if (st.st_dev, st.st_ino) in _READ_RAW:
        return
    _check_header(path)
    _read_through(path)
    _READ_RAW.add((st.st_dev, st.st_ino))


def _check_header(path: Path) -> None:
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot read database {path}: {exc.strerror}") from None
    if head and head != SQLITE_MAGIC:
        raise StoreError(
            f"{path} is not a SQLite database (or its header is damaged); "
            "gpuplaned will not overwrite it: move it aside or restore a backup"
        )


def _quick_check(conn: sqlite3.Connection, path: Path) -> None:
    """``PRAGMA quick_check``: every page of every table and index is read once, so damage
    is found at start rather than by failing requests (``bench/quick_check_bench.py``).

    Raises:
        StoreError: naming the first problems found.
    """
    problems = [row[0] for row in conn.execute("PRAGMA quick_check(3)").fetchall()]
    if problems != ["ok"]:
        raise StoreError(_damaged(path, "; ".join(problems)))


def _read_through(path: Path) -> None:
    """Read the file once, front to back, so that quick_check finds its pages in the page
    cache: read one by one in b-tree order from a cold cache they take ~10x longer."""
    buffer = bytearray(1 << 20)
    try:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buffer):
                pass
    except OSError as exc:  # EIO: a bad sector is damage too
        raise StoreError(_damaged(path, f"cannot read it: {exc.strerror}")) from None


def _damaged(path: Path, problem: str) -> str:
    return (f"database {path} is damaged ({problem}); gpuplaned will not start on it. Restore a backup: "
            f"copy it over {path} and delete {path}-wal and {path}-shm (or move those three files aside "
            "to start with an empty store)")


def _configure(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA busy_timeout = 5000")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA synchronous = NORMAL")


def open_writer(path: Path, migrations: list[Migration] | None = None) -> sqlite3.Connection:
    """Open (creating if absent) and migrate the database; the one write connection.

    Raises:
        StoreError: not a database, damaged, or from a newer version.
    """
    migrations = load_migrations() if migrations is None else migrations
    # The data dir holds job environments and output: private to its owner.
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _read_raw_once(path)
    try:
        # Born 0600 whatever the umask; SQLite gives the -wal and -shm files the database's mode.
        private_file(path)
        for suffix in ("-wal", "-shm"):
            private_file(path.with_name(path.name + suffix), create=False)
    except OSError as exc:
        raise StoreError(f"cannot create database {path}: {exc.strerror}") from None
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open database {path}: {exc}") from None
    try:
        try:
            _configure(conn)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            _quick_check(conn, path)
        except sqlite3.DatabaseError as exc:
            raise StoreError(_damaged(path, str(exc))) from None
        latest = len(migrations)
        if version > latest:
            raise SchemaTooNew(
                f"database {path} has schema version {version}, newer than this gpuplaned "
                f"knows ({latest}); upgrade gpuplaned or point --home elsewhere"
            )
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise StoreError(f"database {path} refused WAL mode (got {mode})")
        # The store actor checkpoints on a worker thread itself (``checkpoint``): some
        # commits run on the event loop's thread, and must never be the one that copies
        # the log into the database.
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        for migration in migrations[version:]:
            _apply(conn, path, migration)
        return conn
    except BaseException:
        conn.close()
        raise


def _apply(conn: sqlite3.Connection, path: Path, migration: Migration) -> None:
    try:
        conn.executescript(
            f"BEGIN IMMEDIATE;\n{migration.sql}\nPRAGMA user_version = {migration.version};\nCOMMIT;"
        )
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise StoreError(f"database {path}: migration {migration.name} failed: {exc}") from None


def open_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection for queries off the trio thread."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 5000")
    conn.execute("PRAGMA query_only = ON")
    return conn


def schema_version(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def checkpoint(conn: sqlite3.Connection) -> None:
    """Copy what the write-ahead log holds into the database, as far as readers allow.

    PASSIVE: never waits for a reader; what a reader still needs is copied next time.
    """
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
