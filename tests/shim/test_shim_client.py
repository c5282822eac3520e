"""The launcher client against scripted fake launchers: replies out of step, early exits."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import trio

from gpuplaned.launcher import Launcher, LauncherGone, SpawnRequest

# Answers each request according to the script in argv[1]: "pong", "wrong-id", "exit".
FAKE = textwrap.dedent("""
    import json, sys
    for action in sys.argv[1].split(","):
        if action == "exit":
            break
        request = json.loads(sys.stdin.readline())
        if action == "pong":
            reply = {"ok": True, "pong": True}
        else:
            reply = {"id": "someone-else", "ok": True, "shim_pid": 1, "shim_start_time": 1,
                     "pid": 2, "pgid": 2, "start_time": 2}
        sys.stdout.write(json.dumps(reply) + "\\n")
        sys.stdout.flush()
""")


async def _fake(script: str) -> Launcher:
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-c", FAKE, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    return Launcher(proc)


def _request() -> SpawnRequest:
    return SpawnRequest(id="mine", job_dir="/nonexistent/job", argv=["true"], cwd="/", env={})


async def test_replies_written_before_the_launcher_exits_are_delivered():
    launcher = await _fake("pong,pong,exit")
    results: list[str] = []

    async def ping() -> None:
        try:
            await launcher.ping()
            results.append("ok")
        except LauncherGone:
            results.append("gone")

    try:
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(ping)
        assert sorted(results) == ["gone", "ok", "ok"]
        assert launcher.gone
        with pytest.raises(LauncherGone):
            await launcher.ping()
    finally:
        await launcher.aclose()


async def test_a_reply_for_another_request_stops_the_launcher():
    launcher = await _fake("pong,wrong-id,pong")
    try:
        await launcher.ping()
        with pytest.raises(LauncherGone, match="protocol error"):
            await launcher.spawn(_request())
        with pytest.raises(LauncherGone):
            await launcher.ping()
    finally:
        await launcher.aclose()
    assert launcher._proc.returncode == -9  # killed, not left to answer out of step
