"""``gpuplanectl daemon`` and ``gpuplanectl shutdown`` with real processes."""

import json
import os
import signal
import socket

import pytest
from helpers import DaemonProcess

from gpuplaned.protocol.discovery import pid_alive, read_portfile


@pytest.fixture
def detached(tmp_path):
    """Dirs for a daemon that gpuplanectl starts; whatever it started is killed at teardown."""
    proc = DaemonProcess(tmp_path / "detached")
    yield proc
    try:
        pid = read_portfile(proc.runtime_dir).pid
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_daemon_starts_once_then_shutdown_stops_it(detached):
    result = detached.run_ctl("daemon")
    assert result.returncode == 0, result.stdout + result.stderr
    pid = read_portfile(detached.runtime_dir).pid
    log = detached.home / "logs" / "gpuplaned.log"
    assert result.stdout.splitlines() == [
        f"gpuplaned 0.1.0 started (pid {pid}): READY, listening on unix://{detached.socket_path}",
        f"log: {log}",
    ]
    info = detached.client().get("/api/v1/daemon")
    assert (info["pid"], info["state"], info["home"]) == (pid, "READY", str(detached.home))
    assert "ready" in log.read_text()
    assert os.getsid(pid) == pid  # detached: its own session

    again = detached.run_ctl("daemon", "--json")
    assert again.returncode == 0, again.stderr
    body = json.loads(again.stdout)
    assert (body["started"], body["daemon"]["pid"]) == (False, pid)
    assert detached.run_ctl("daemon").stdout.startswith(f"gpuplaned is already running (pid {pid}, READY)")

    result = detached.run_ctl("shutdown")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"gpuplaned (pid {pid}) stopped\n"
    assert _gone(pid)
    assert not detached.portfile.exists()


def test_shutdown_waits_until_the_daemon_is_gone(daemon):
    result = daemon.run_ctl("shutdown", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"pid": daemon.pid, "stopped": True}
    # The daemon is our child, so it lingers as a zombie until reaped: the port-file must
    # already be gone and the exit code clean.
    assert not daemon.portfile.exists()
    assert daemon.wait_exit(timeout=5) == 0
    assert not pid_alive(daemon.pid)


def test_daemon_that_fails_to_start_shows_its_log(detached):
    result = detached.run_ctl("daemon", "--listen", "bogus")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: gpuplaned exited with code 2 before it was ready: configuration error: "
                                    "--listen")
    assert "; the end of " in result.stderr
    assert not detached.portfile.exists()


def test_daemon_whose_http_port_is_taken_fails_and_says_why(detached):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = detached.run_ctl("daemon", "--", "--http", f"127.0.0.1:{port}")
        as_json = detached.run_ctl("daemon", "--json", "--", "--http", f"127.0.0.1:{port}")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == ""
    first = result.stderr.splitlines()[0]
    assert first == (f"error: gpuplaned exited with code 1 before it was ready: cannot listen on 127.0.0.1:{port}: "
                     "address already in use (another program holds it; set another address with --http HOST:PORT "
                     "(or [http] listen in the config), or --no-http); the end of "
                     f"{detached.home / 'logs' / 'gpuplaned.log'}:")
    assert as_json.returncode == 1
    error = json.loads(as_json.stdout)["error"]
    assert error["details"]["exit_code"] == 1
    assert error["details"]["reason"].startswith(f"cannot listen on 127.0.0.1:{port}: address already in use")
    assert not detached.portfile.exists()


def test_daemon_passes_arguments_after_double_dash(detached):
    result = detached.run_ctl("daemon", "--json", "--", "--bogus-flag")
    assert result.returncode == 2
    error = json.loads(result.stdout)["error"]
    assert (error["code"], error["details"]["exit_code"]) == ("bad_request", 2)
    assert any("unrecognized arguments: --bogus-flag" in line for line in error["details"]["log_tail"])


def test_daemon_when_endpoint_is_taken_by_another_runtime_dir(daemon, detached):
    # An explicit --listen on a socket a live daemon serves: gpuplaned exits 3, and since
    # no daemon answers in this runtime dir, that is reported rather than masked.
    result = detached.run_ctl("daemon", "--listen", f"unix://{daemon.socket_path}")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "exited with code 3" in result.stderr
    assert daemon.proc.poll() is None  # the first daemon is untouched
    assert daemon.client().get("/api/v1/daemon")["state"] == "READY"


def test_daemon_replaces_one_that_is_shutting_down(daemon):
    daemon.client().post("/api/v1/daemon/shutdown")
    result = daemon.run_ctl("daemon", "--json")
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        body = json.loads(result.stdout)
        assert body["started"] is True
        assert body["daemon"]["pid"] != daemon.pid
        assert daemon.wait_exit(timeout=5) == 0
    finally:
        try:
            os.kill(read_portfile(daemon.runtime_dir).pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass
