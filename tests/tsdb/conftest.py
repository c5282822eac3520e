"""A real migrated database and the store actor's way of writing: BEGIN IMMEDIATE + SAVEPOINT."""

from __future__ import annotations

import pytest

from gpuplaned.store.database import open_reader, open_writer


class Db:
    def __init__(self, path):
        self.path = path
        self.writer = open_writer(path)
        self.reader = open_reader(path)

    def write(self, apply):
        """Run ``apply(conn)`` as the store actor does: its own savepoint in a write transaction."""
        conn = self.writer
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("SAVEPOINT write")
            try:
                result = apply(conn)
            except BaseException:
                conn.execute("ROLLBACK TO write")
                conn.execute("RELEASE write")
                raise
            conn.execute("RELEASE write")
        finally:
            conn.execute("COMMIT")
        return result

    def close(self):
        self.reader.close()
        self.writer.close()


@pytest.fixture
def db(tmp_path):
    d = Db(tmp_path / "g.db")
    yield d
    d.close()
