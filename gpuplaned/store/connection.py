"""The name a connection goes by outside the store, and a savepoint on one.

A service function that ``write`` or ``read`` hands a connection passes it on to the store's
functions (the ``*_rows`` modules) and runs no SQL itself, so it needs the type's name, never
sqlite3 (tests/test_layers.py: sqlite3 is the store's).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

Connection = sqlite3.Connection


@contextmanager
def savepoint(conn: Connection, name: str) -> Iterator[None]:
    """A transaction inside the write's own: what the block wrote is undone if it raises (the
    error goes on), and the rest of the write stands."""
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        conn.execute(f"ROLLBACK TO {name}")
        raise
    finally:
        conn.execute(f"RELEASE {name}")
