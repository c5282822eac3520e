"""A damaged page in the middle of a real store file: the daemon refuses to start, fast,
naming the file and what to do."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time

import pytest

from gpuplaned.store.database import open_writer

pytestmark = pytest.mark.e2e


def make_store(path) -> None:
    """A store file of a few thousand pages, as gpuplaned makes and fills it."""
    conn = open_writer(path)
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO events (id, ts, type, severity, message) VALUES (?, ?, 'LOSS_NAN', 'info', ?)",
                     ((f"ev_{i:06d}", i, f"event {i} " + "x" * 900) for i in range(4000)))
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def damage_a_middle_page(path) -> None:
    conn = sqlite3.connect(path)
    page_size, pages = (conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_size", "page_count"))
    conn.close()
    assert pages > 1000
    with open(path, "r+b") as f:
        f.seek(page_size * (pages // 2))
        f.write(b"\xa5" * page_size)


def test_a_damaged_store_file_makes_the_daemon_exit_1_saying_restore_a_backup(daemon_factory):
    daemon = daemon_factory("--gpus=none")
    db = daemon.home / "gpuplane.db"
    make_store(db)
    damage_a_middle_page(db)

    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "gpuplaned", "--gpus=none"], env=daemon.env,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1, result.stderr
    assert time.monotonic() - started < 10
    assert f"database {db} is damaged" in result.stderr
    assert "gpuplaned will not start on it. Restore a backup" in result.stderr
    assert not (daemon.runtime_dir / "gpuplaned.port").exists()
