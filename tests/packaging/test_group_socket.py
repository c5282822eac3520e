"""``--group-access`` (the system unit's): members of the runtime dir's group use the local
socket, by directory and file permissions alone; without it, only the daemon's own user."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplaned.config import load_config

NOBODY = 65534


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A dir anyone may enter (pytest's tmp_path is under a 0700 one), so that only the runtime
    dir's own mode decides who gets in."""
    path = Path(tempfile.mkdtemp(prefix="gpuplane-group-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _daemon_answers_as(uid: int, groups: list[int], daemon) -> str:
    """As another user whose supplementary groups are ``groups`` (a forked child: any program
    it would run may sit where that user cannot go), read the port-file and ask the daemon
    over its socket. Returns "ok", or what was refused: "port-file" or "socket"."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.setgroups(groups)
            os.setgid(NOBODY)
            os.setuid(uid)
            try:
                daemon.portfile.read_text()
            except PermissionError:
                code = 1
                raise
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(10)
                try:
                    sock.connect(str(daemon.socket_path))
                except PermissionError:
                    code = 2
                    raise
                sock.sendall(b"GET /api/v1/daemon HTTP/1.1\r\nHost: gpuplaned\r\nConnection: close\r\n\r\n")
                reply = b""
                while chunk := sock.recv(65536):
                    reply += chunk
            code = 0 if b'"READY"' in reply else 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return {0: "ok", 1: "port-file", 2: "socket"}.get(os.waitstatus_to_exitcode(status), "error")


@pytest.mark.parametrize("group_access", [False, True], ids=["private", "group"])
def test_the_runtime_dir_socket_and_port_file_modes(daemon_factory, group_access):
    daemon = daemon_factory(*(["--group-access"] if group_access else [])).start()
    daemon.wait_ready()
    modes = (_mode(daemon.runtime_dir), _mode(daemon.socket_path), _mode(daemon.portfile))
    assert modes == ((0o750, 0o660, 0o640) if group_access else (0o700, 0o600, 0o600))


def test_group_access_tightens_a_dir_others_may_enter(daemon_factory, tmp_path):
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir(mode=0o777)
    os.chmod(runtime_dir, 0o777)
    daemon = daemon_factory("--group-access", runtime_dir=runtime_dir).start()
    daemon.wait_ready()
    assert _mode(runtime_dir) == 0o750


def test_group_access_is_a_config_key_too(tmp_path):
    config = tmp_path / "gpuplaned.toml"
    config.write_text("group_access = true\n")
    assert load_config({"config": str(config)}, env={}).group_access is True
    assert load_config({}, env={"XDG_CONFIG_HOME": str(tmp_path / "none")}).group_access is False


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the client as another user")
@pytest.mark.parametrize("group_access", [False, True], ids=["private", "group"])
def test_a_member_of_the_group_can_use_the_daemon_and_nobody_else_can(daemon_factory, open_dir, group_access):
    daemon = daemon_factory(*(["--group-access"] if group_access else []), runtime_dir=open_dir / "run").start()
    daemon.wait_ready()
    group = os.stat(daemon.runtime_dir).st_gid
    assert _daemon_answers_as(NOBODY, [], daemon) == "port-file"
    assert _daemon_answers_as(NOBODY, [group], daemon) == ("ok" if group_access else "port-file")
