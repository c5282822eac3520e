"""The data dir on a real daemon: private whatever the umask and whoever made it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from helpers import Jobs

pytestmark = pytest.mark.e2e


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_home_others_can_read_is_tightened_and_data_files_are_born_0600(daemon_factory, tmp_path):
    daemon = daemon_factory("--gpus=none")
    home = daemon.home
    (home / "jobs").mkdir(parents=True)  # made by hand, or by an older gpuplaned, under umask 022
    for made in (home, home / "jobs"):
        os.chmod(made, 0o755)
    (home / "gpuplane.db").touch(mode=0o644)  # an empty database is a new one
    os.chmod(home / "gpuplane.db", 0o644)
    umask = os.umask(0o022)  # the daemon inherits it
    try:
        daemon.start()
    finally:
        os.umask(umask)
    daemon.wait_ready()
    jobs = Jobs(daemon, tmp_path / "work")
    jobs.wait_node()
    job = jobs.sh("echo out; echo err >&2", gpu=0)
    assert jobs.wait(job["id"])["status"] == "SUCCEEDED"

    assert mode(home) == 0o700 and mode(home / "jobs") == 0o700  # nothing below is reachable by others
    attempt = home / "jobs" / job["id"] / "attempt-1"
    assert mode(attempt) == 0o700
    for name in ("stdout.log", "stderr.log", "runtime.json", "exit.json"):  # the shim's files too
        assert mode(attempt / name) == 0o600, name
    for name in ("gpuplane.db", "gpuplane.db-wal", "gpuplane.db-shm"):
        assert mode(home / name) == 0o600, name
    log = daemon.log()
    assert f"data dir {home} was mode 755, open to other users; tightening it to 700" in log
    assert "data file" in log and "was mode 644" in log


@pytest.mark.skipif(os.getuid() != 0, reason="making a dir another user owns needs root")
def test_a_home_owned_by_another_user_is_refused(daemon_factory):
    daemon = daemon_factory("--gpus=none")
    daemon.home.mkdir(parents=True)
    os.chown(daemon.home, 65534, 65534)
    result = subprocess.run([sys.executable, "-m", "gpuplaned", "--no-http", "--gpus=none"], env=daemon.env,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert f"data dir {daemon.home} belongs to uid 65534" in result.stderr
    assert "choose another --home" in result.stderr
    assert not (daemon.home / "gpuplane.db").exists()


def test_a_home_that_is_a_file_is_refused(daemon_factory):
    daemon = daemon_factory("--gpus=none")
    daemon.home.parent.mkdir(parents=True, exist_ok=True)
    daemon.home.write_text("not a dir")
    result = subprocess.run([sys.executable, "-m", "gpuplaned", "--no-http", "--gpus=none"], env=daemon.env,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "is not a directory" in result.stderr, result.stderr
