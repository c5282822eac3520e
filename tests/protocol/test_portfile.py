import pytest

from gpuplaned.protocol.discovery import PortFile, PortFileError, default_runtime_dir, parse_portfile


def test_round_trip_unix_and_tcp():
    for pf in (PortFile(pid=42, unix="/run/user/1000/gpuplane/gpuplaned.sock"), PortFile(pid=7, tcp_port=40123)):
        assert parse_portfile(pf.render()) == pf


def test_rendered_format_is_the_seed_protocol():
    assert PortFile(pid=12, unix="/tmp/s.sock").render() == "protocol=1\npid=12\nunix=/tmp/s.sock\nEOF\n"
    assert PortFile(pid=12, tcp_port=9).render() == "protocol=1\npid=12\nsock=9\nEOF\n"
    assert PortFile(pid=12, tcp_port=9).endpoint == "tcp://127.0.0.1:9"


@pytest.mark.parametrize("text, problem", [
    ("", "incomplete"),
    ("protocol=1\npid=3\nunix=/a\n", "incomplete"),
    ("protocol=2\npid=3\nunix=/a\nEOF\n", "protocol is '2'"),
    ("pid=3\nunix=/a\nEOF\n", "protocol is None"),
    ("protocol=1\nunix=/a\nEOF\n", "no pid="),
    ("protocol=1\npid=-3\nunix=/a\nEOF\n", "pid= is not a positive integer"),
    ("protocol=1\npid=x\nunix=/a\nEOF\n", "pid= is not a positive integer"),
    ("protocol=1\npid=3\nEOF\n", "exactly one of"),
    ("protocol=1\npid=3\nunix=/a\nsock=4\nEOF\n", "exactly one of"),
    ("protocol=1\npid=3\nunix=rel/a\nEOF\n", "not absolute"),
    ("protocol=1\npid=3\nsock=70000\nEOF\n", "not a TCP port"),
    ("protocol=1\npid=3\nunix=/a\ncolour=red\nEOF\n", "unknown field"),
    ("protocol=1\npid=3\npid=4\nunix=/a\nEOF\n", "repeats pid="),
    ("protocol=1\ngarbage\nEOF\n", "line 2 is not key=value"),
])
def test_malformed_portfiles_are_named(text, problem):
    with pytest.raises(PortFileError, match=problem):
        parse_portfile(text)


def test_runtime_dir_rules():
    assert str(default_runtime_dir({"GPUPLANE_RUNTIME_DIR": "/x/y"})) == "/x/y"
    assert str(default_runtime_dir({"XDG_RUNTIME_DIR": "/run/user/5"})) == "/run/user/5/gpuplane"
    assert str(default_runtime_dir({})).startswith("/tmp/gpuplane-")


def test_pid_alive_treats_zombies_as_gone():
    import os
    import subprocess
    import sys
    import time

    from gpuplaned.protocol.discovery import pid_alive

    assert pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # exited but not reaped: a zombie
        with open(f"/proc/{child.pid}/stat") as f:
            if f.read().rpartition(")")[2].split()[0] == "Z":
                break
        time.sleep(0.005)
    assert not pid_alive(child.pid)
    child.wait()
    assert not pid_alive(child.pid)


def test_api_version_mismatch_warning():
    from gpuplaned.protocol.version import API_VERSION, api_mismatch

    assert api_mismatch(None) is None
    assert api_mismatch(str(API_VERSION)) is None
    assert "speaks API version 99, this client speaks" in api_mismatch("99")
