"""Real gpuplaned processes: endpoint claim, port-file, exit codes, signals, owner death."""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from contextlib import closing

import pytest
from gpuplanectl.client import DaemonClient
from helpers import wait_for

from gpuplaned.protocol.discovery import SECRET_NAME, parse_portfile, pid_alive
from gpuplaned.protocol.errors import ApiError, ErrorCode

pytestmark = pytest.mark.e2e


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_portfile_content_and_modes(daemon):
    pf = parse_portfile(daemon.portfile.read_text())
    assert pf.pid == daemon.pid
    assert pf.unix == str(daemon.socket_path)
    assert daemon.portfile.read_text() == f"protocol=1\npid={daemon.pid}\nunix={daemon.socket_path}\nEOF\n"
    assert mode(daemon.runtime_dir) == 0o700
    assert mode(daemon.portfile) == 0o600
    assert stat.S_ISSOCK(os.lstat(daemon.socket_path).st_mode)
    assert mode(daemon.socket_path) == 0o600
    info = daemon.client().get("/api/v1/daemon")
    assert info["state"] == "READY" and info["role"] == "all"
    http_url = info["endpoints"].pop("http")
    assert info["endpoints"] == {"unix": str(daemon.socket_path), "tcp": None}
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", http_url)
    assert info["home"] == str(daemon.home)
    assert [a["name"] for a in daemon.client().get("/api/v1/actors")["actors"]] == [
        "control", "store", "scheduler", "logs", "runner", "rollup", "monitor", "ckptwatch", "tbtail", "webhooks",
        "policies", "detector", "http"]


def test_runtime_dir_with_loose_mode_is_tightened(daemon_factory, tmp_path):
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    d = daemon_factory(runtime_dir=loose).start()
    d.wait_ready()
    assert mode(loose) == 0o700


def test_second_daemon_exits_3_and_first_still_answers(daemon, daemon_factory):
    second = daemon_factory(name="second", runtime_dir=daemon.runtime_dir).start()
    assert second.wait_exit() == 3
    assert "already runs" in second.log()
    assert parse_portfile(daemon.portfile.read_text()).pid == daemon.pid
    assert daemon.client().get("/api/v1/daemon")["pid"] == daemon.pid


def test_explicit_listen_on_a_live_daemons_socket_exits_3(daemon, daemon_factory):
    other = daemon_factory(f"--listen=unix://{daemon.socket_path}", name="other").start()
    assert other.wait_exit() == 3
    assert f"a live gpuplaned already serves {daemon.socket_path}" in other.log()
    assert daemon.client().get("/api/v1/daemon")["pid"] == daemon.pid
    assert not other.portfile.exists()


def test_sigkill_leaves_a_stale_socket_that_the_next_daemon_reclaims(daemon_factory):
    first = daemon_factory().start()
    first.wait_ready()
    first.signal(signal.SIGKILL)
    first.proc.wait(10)
    assert first.socket_path.exists() and first.portfile.exists()  # what a crash leaves
    second = daemon_factory().start()
    info = second.wait_ready()
    assert info["endpoints"]["unix"] == str(second.socket_path)
    assert parse_portfile(second.portfile.read_text()).pid == second.pid
    assert "reclaiming stale socket" in second.log()


def test_regular_file_at_socket_path_falls_back_to_tcp_and_is_left_intact(daemon_factory):
    d = daemon_factory()
    d.runtime_dir.mkdir(parents=True, mode=0o700)
    d.socket_path.write_text("precious user data\n")
    d.start()
    info = d.wait_ready()
    assert d.socket_path.read_text() == "precious user data\n"
    pf = parse_portfile(d.portfile.read_text())
    assert pf.unix is None and pf.tcp_port
    assert info["endpoints"]["unix"] is None and info["endpoints"]["tcp"] == f"127.0.0.1:{pf.tcp_port}"
    # Loopback TCP does not keep other users out, so the control API wants the secret
    # that only the runtime dir's owner can read.
    assert mode(d.runtime_dir / SECRET_NAME) == 0o600
    anonymous = DaemonClient(pf)
    with pytest.raises(ApiError) as err:
        anonymous.get("/api/v1/daemon")
    assert err.value.code is ErrorCode.UNAUTHORIZED
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0
    assert d.socket_path.read_text() == "precious user data\n"
    assert not (d.runtime_dir / SECRET_NAME).exists()


def test_explicit_listen_on_a_regular_file_fails_loudly(daemon_factory, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    d = daemon_factory(f"--listen=unix://{blocker}").start()
    assert d.wait_exit() == 1
    assert "exists and is not a socket" in d.log()
    assert blocker.read_text() == "x"
    assert not d.portfile.exists()


def test_explicit_tcp_listen_and_non_loopback_refusal(daemon_factory):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    d = daemon_factory(f"--listen=tcp://127.0.0.1:{port}").start()
    assert d.wait_ready()["endpoints"]["tcp"] == f"127.0.0.1:{port}"
    bad = daemon_factory("--listen=tcp://0.0.0.0:9", name="bad").start()
    assert bad.wait_exit() == 2
    assert "must be loopback" in bad.log()


def test_explicit_unix_listen_elsewhere(daemon_factory, tmp_path):
    path = tmp_path / "elsewhere.sock"
    d = daemon_factory(f"--listen=unix://{path}").start()
    assert d.wait_ready()["endpoints"]["unix"] == str(path)
    assert parse_portfile(d.portfile.read_text()).unix == str(path)
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0
    assert not path.exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_shutdown_exits_0_and_cleans_up(daemon, signum):
    daemon.signal(signum)
    assert daemon.wait_exit() == 0
    assert not daemon.portfile.exists()
    assert not daemon.socket_path.exists()
    assert "actor store: RUNNING -> STOPPING" in daemon.log() or "actor store: STARTING -> STOPPING" in daemon.log()


def test_shutdown_request_is_answered_then_the_daemon_exits_0(daemon):
    assert daemon.client().post("/api/v1/daemon/shutdown") == {"state": "STOPPING"}
    assert daemon.wait_exit() == 0
    assert not daemon.portfile.exists()
    log = daemon.log()
    # leaves first, the store before control (reverse start order)
    assert log.index("actor store: STOPPING -> STOPPED") < log.index("actor control: STOPPING -> STOPPED")


def test_portfile_owned_by_a_later_daemon_is_not_removed(daemon):
    # Something else published the endpoint after us: on exit we must leave it alone.
    foreign = f"protocol=1\npid={os.getppid()}\nunix=/elsewhere.sock\nEOF\n"
    daemon.portfile.write_text(foreign)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0
    assert daemon.portfile.read_text() == foreign


def test_owner_death_shuts_down_within_2_seconds(daemon_factory):
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        d = daemon_factory(f"--owner-pid={owner.pid}").start()
        d.wait_ready()
        owner.kill()
        owner.wait()
        t0 = time.monotonic()
        assert d.wait_exit(timeout=5) == 0
        assert time.monotonic() - t0 < 2.0
        assert "owner process" in d.log()
        assert not d.portfile.exists()
    finally:
        owner.kill()
        owner.wait()


def test_parent_owner_death_via_pdeathsig(daemon_factory, tmp_path):
    """The owner is the daemon's parent: the kernel's PDEATHSIG path."""
    d = daemon_factory()
    launcher = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-m', 'gpuplaned', '--owner-pid', str(__import__('os').getpid())],"
        f" stdout=open({str(d.log_path)!r}, 'wb'), stderr=subprocess.STDOUT)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", launcher], env=d.env, stdout=subprocess.PIPE, text=True)
    try:
        child_pid = int(parent.stdout.readline())
        d.wait_ready(pid=child_pid)
        parent.kill()
        parent.wait()
        wait_for(lambda: not pid_alive(child_pid), timeout=2.0,
                 what="the daemon to exit after its parent died")
        assert not d.portfile.exists()
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


def test_owner_pid_that_is_not_running_is_a_usage_error(daemon_factory):
    d = daemon_factory("--owner-pid=999999999").start()
    assert d.wait_exit() == 2
    assert "not a running process" in d.log()


def test_bad_config_exits_2_and_names_the_key(daemon_factory, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('role = "all"\n[store]\nmax_bacth = 10\n')
    d = daemon_factory(f"--config={cfg}").start()
    assert d.wait_exit() == 2
    assert "unknown key store.max_bacth" in d.log()
    assert not d.runtime_dir.exists() or not d.portfile.exists()


def test_usage_error_exits_2(daemon_factory):
    d = daemon_factory("--role=emperor").start()
    assert d.wait_exit() == 2


def test_corrupt_database_is_a_clear_error_and_left_alone(daemon_factory):
    d = daemon_factory()
    d.home.mkdir(parents=True)
    (d.home / "gpuplane.db").write_bytes(b"\x00garbage" * 1000)
    d.start()
    assert d.wait_exit() == 1
    assert "is not a SQLite database" in d.log()
    assert (d.home / "gpuplane.db").read_bytes() == b"\x00garbage" * 1000
    assert not d.portfile.exists() and not d.socket_path.exists()


def test_a_database_from_a_newer_version_exits_2_and_is_left_alone(daemon_factory):
    """Exit 2, which the unit does not restart (RestartPreventExitStatus=2 3): no retry of this
    binary will open it."""
    d = daemon_factory().start()
    d.wait_ready()
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0
    db = d.home / "gpuplane.db"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA user_version = 999")
    before = db.read_bytes()
    assert d.start().wait_exit() == 2
    assert "schema version 999, newer than this gpuplaned" in d.log()
    assert db.read_bytes() == before
    assert not d.portfile.exists() and not d.socket_path.exists()


def test_crashing_actor_is_restarted_and_reports_its_restarts(daemon_factory):
    d = daemon_factory(env={"GPUPLANE_TESTING_ACTORS": "flaky:2,doomed:99"}).start()
    d.wait_ready()
    client = d.client()

    def settled():
        actors = {a["name"]: a for a in client.get("/api/v1/actors")["actors"]}
        states = {name: a["state"] for name, a in actors.items()}
        wanted = {"flaky": "RUNNING", "doomed": "FATAL", "store": "RUNNING", "control": "RUNNING"}
        if {name: states[name] for name in wanted} == wanted:
            return actors
        return None

    actors = wait_for(settled, timeout=15, what="flaky RUNNING and doomed FATAL")
    assert actors["flaky"]["restarts"] == 2
    assert actors["flaky"]["last_error"] == "InjectedCrash: injected crash 2 of 2"
    assert actors["doomed"]["restarts"] == 3
    assert client.get("/api/v1/daemon")["state"] == "READY"


def test_actor_commands_over_the_socket(daemon):
    client = daemon.client()
    assert client.post("/api/v1/actors/store/stop")["actor"]["state"] == "STOPPED"
    assert client.post("/api/v1/actors/store/start")["actor"]["state"] in ("STARTING", "RUNNING")
    assert client.post("/api/v1/actors/store/restart")["actor"]["state"] in ("STARTING", "RUNNING")
    for verb in ("stop", "restart"):
        with pytest.raises(ApiError) as err:
            client.post(f"/api/v1/actors/control/{verb}")
        assert err.value.code is ErrorCode.CONFLICT
    with pytest.raises(ApiError) as err:
        client.post("/api/v1/actors/nosuch/stop")
    assert err.value.code is ErrorCode.NOT_FOUND and "nosuch" in err.value.message
    assert client.get("/api/v1/actors/control")["actor"]["state"] in ("STARTING", "RUNNING")


def test_responses_announce_the_api_version(daemon):
    import http.client

    from gpuplaned.protocol.version import API_VERSION

    conn = http.client.HTTPConnection("localhost")
    conn.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.sock.connect(str(daemon.socket_path))
    for path in ("/api/v1/daemon", "/api/v1/nothing"):
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        assert response.getheader("X-GPUPlane-API") == str(API_VERSION)
    conn.close()
