"""``gpuplanectl backup`` and ``restore`` against real daemons (issue 19, deliverable 3).

- A backup taken while an SDK job ingests as fast as it can (points keep arriving during it) is a
  database that passes ``PRAGMA integrity_check`` and holds every point stored before the backup
  began; restored into a fresh home, a daemon started on it serves them. ``--agent`` archives the job's log files.
- ``restore`` refuses while a daemon runs for the runtime dir, and while any process has the
  home's database open (a daemon of another runtime dir); nothing is changed then.
- Bad input: a backup dir that is not empty, a restore from a dir that is not a backup or whose
  database is damaged, ``--server``.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest
from helpers import DaemonProcess, kill_processes_with_env, wait_for

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"
NAMES = ("loss", "lr")

# Logs as fast as it can until told to stop, then finishes (every batch acknowledged).
INGEST = textwrap.dedent("""
    import os, sys
    import gpuplane

    run = gpuplane.init()
    print("run", run.id, flush=True)
    step = 0
    while not os.path.exists("stop"):
        for _ in range(10_000):
            run.log({"loss": 1.0 / (step + 1), "lr": 0.1}, step=step)
            step += 1
    run.finish(timeout=120)
    print("steps", step, flush=True)
""")


@pytest.fixture
def daemon(tmp_path):
    process = DaemonProcess(tmp_path / "d", "--gpus", "fake:1")
    process.start()
    process.wait_ready()
    yield process
    process.kill()
    kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={process.runtime_dir}")


def ctl(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuplanectl", *args], env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, cwd=cwd)


def stored(client, run_id: str) -> int:
    body = client.get(f"/api/v1/runs/{run_id}/metrics?names={','.join(NAMES)}&x=step&points=1")
    return sum(c or 0 for name in NAMES for c in body["series"].get(name, {}).get("count", []))


def integrity(db: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [row[0] for row in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


def test_a_backup_under_ingest_restores_every_point_stored_before_it(daemon, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    client = daemon.client()
    job = client.post("/api/v1/jobs", {"command": [sys.executable, "-c", INGEST], "cwd": str(work), "gpu": 0,
                                       "env": {"PYTHONPATH": str(SDK_DIR)}})["job"]
    run_id = wait_for(lambda: client.get(f"/api/v1/jobs/{job['id']}")["job"].get("run_id"), 30, what="the run")
    wait_for(lambda: stored(client, run_id) >= 300_000, 60, interval=0.05, what="300k points stored")
    before, started = stored(client, run_id), time.monotonic()
    taken = ctl(daemon.env, "backup", "--to", str(tmp_path / "b"), "--agent", "--json")
    after, took = stored(client, run_id), time.monotonic() - started
    print(f"ingest during the backup: {(after - before) / took:,.0f} points/s over {took:.2f} s")
    (work / "stop").touch()
    assert taken.returncode == 0, taken.stderr
    assert after > before + 1000, (before, after)  # it went on ingesting while the backup was taken
    manifest = json.loads(taken.stdout)["backup"]
    assert manifest["database"]["integrity"] == "ok" and manifest["home"] == str(daemon.home)
    assert (tmp_path / "b").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "b" / "gpuplane.db").stat().st_mode & 0o777 == 0o600
    assert integrity(tmp_path / "b" / "gpuplane.db") == ["ok"]
    with tarfile.open(tmp_path / "b" / "agent.tar.gz") as tar:
        logs = [m.name for m in tar.getmembers() if m.name.startswith(f"jobs/{job['id']}/")]
    assert f"jobs/{job['id']}/attempt-1/stdout.log" in logs, logs
    wait_for(lambda: client.get(f"/api/v1/jobs/{job['id']}")["job"]["status"] == "SUCCEEDED", 120,
             what="the job to end")

    fresh = DaemonProcess(tmp_path / "fresh", "--gpus", "fake:1")
    restored = ctl(fresh.env, "restore", str(tmp_path / "b"), "--agent", "--json")
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout)["restored"]["agent_files"] >= 1
    assert integrity(fresh.home / "gpuplane.db") == ["ok"]
    assert (fresh.home / "gpuplane.db").stat().st_mode & 0o777 == 0o600
    assert (fresh.home / "jobs" / job["id"] / "attempt-1" / "stdout.log").read_text().startswith("run ")
    fresh.start()
    try:
        fresh.wait_ready()
        got = stored(fresh.client(), run_id)
        assert before <= got <= after, (before, got, after)  # every point stored before it began, and no more
    finally:
        fresh.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={fresh.runtime_dir}")


def test_restore_refuses_while_a_daemon_runs_or_has_the_database_open(daemon, tmp_path):
    assert ctl(daemon.env, "backup", "--to", str(tmp_path / "b")).returncode == 0
    db = daemon.home / "gpuplane.db"
    inode = db.stat().st_ino
    same = ctl(daemon.env, "restore", str(tmp_path / "b"))
    assert same.returncode == 1 and "is running for" in same.stderr and "gpuplanectl shutdown" in same.stderr
    assert f"pid {daemon.pid}" in same.stderr
    # Another runtime dir, the same home: the daemon still has the database open.
    other = dict(daemon.env, GPUPLANE_RUNTIME_DIR=str(tmp_path / "other-run"))
    elsewhere = ctl(other, "restore", str(tmp_path / "b"))
    assert elsewhere.returncode == 1 and f"process {daemon.pid} has {db} open" in elsewhere.stderr, elsewhere.stderr
    assert db.stat().st_ino == inode and not list(daemon.home.glob("before-restore-*"))


def test_a_restore_moves_the_database_that_was_there_aside(daemon, tmp_path):
    client = daemon.client()
    client.post("/api/v1/projects", {"name": "kept"})
    assert ctl(daemon.env, "backup", "--to", str(tmp_path / "b")).returncode == 0
    client.post("/api/v1/projects", {"name": "after-the-backup"})
    assert ctl(daemon.env, "shutdown").returncode == 0
    assert daemon.wait_exit(20) == 0
    restored = ctl(daemon.env, "restore", str(tmp_path / "b"))
    assert restored.returncode == 0, restored.stderr
    aside = list(daemon.home.glob("before-restore-*/gpuplane.db"))
    assert len(aside) == 1 and "the database that was there" in restored.stdout
    daemon.start()
    daemon.wait_ready()
    names = {p["name"] for p in daemon.client().get("/api/v1/projects")["projects"]}
    assert "kept" in names and "after-the-backup" not in names


def test_bad_backup_and_restore_requests_are_refused_clearly(daemon, tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("mine")
    refused = ctl(daemon.env, "backup", "--to", str(busy))
    assert refused.returncode == 1 and "exists and is not an empty dir" in refused.stderr
    assert (busy / "x").read_text() == "mine" and len(list(busy.iterdir())) == 1

    fresh = DaemonProcess(tmp_path / "fresh")
    nothing = ctl(fresh.env, "restore", str(busy))
    assert nothing.returncode == 2 and "is not a backup: it has no manifest.json" in nothing.stderr
    assert ctl(daemon.env, "backup", "--to", str(tmp_path / "b")).returncode == 0
    with open(tmp_path / "b" / "gpuplane.db", "r+b") as f:  # damage the copy's pages past the header
        f.seek(4096)
        f.write(b"\xff" * 8192)
    damaged = ctl(fresh.env, "restore", str(tmp_path / "b"))
    assert damaged.returncode == 2 and "gpuplane.db" in damaged.stderr, damaged.stderr
    assert not (fresh.home / "gpuplane.db").exists()
    remote = ctl(dict(daemon.env, GPUPLANE_SERVER="http://127.0.0.1:9", GPUPLANE_TOKEN="gpp_x"), "backup")
    assert remote.returncode == 2 and "on the daemon's machine" in remote.stderr, remote.stderr


def test_what_the_daemon_writes_after_another_process_looked_at_its_database_outlives_a_kill_9(daemon, tmp_path):
    """A user's sqlite3 shell on the database, closing, must not take the daemon's write-ahead
    log for its own. A daemon started on an existing database held no lock on it once it had
    read the file raw after connecting, so the shell folded the log in and deleted it, and the
    daemon's later commits went into the deleted log, to be lost at the next start."""
    work = tmp_path / "work"
    work.mkdir()
    look = "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM jobs').fetchone()"
    daemon.kill()  # started again on the database it made
    restarted = DaemonProcess(tmp_path / "d", "--gpus", "fake:1")
    try:
        restarted.start()
        restarted.wait_ready()
        subprocess.run([sys.executable, "-c", look, str(daemon.home / "gpuplane.db")], check=True, timeout=60)
        job = restarted.client().post("/api/v1/jobs", {"command": ["true"], "cwd": str(work), "gpu": 0})["job"]
        restarted.kill()
        restarted.start()
        restarted.wait_ready()
        assert restarted.client().get(f"/api/v1/jobs/{job['id']}")["job"]["id"] == job["id"]
    finally:
        restarted.kill()
