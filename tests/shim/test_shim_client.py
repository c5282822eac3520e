"""The launcher client against scripted fake launchers: replies out of step, early exits."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import trio
import trio.testing

from gpuplaned.launching.client import Launcher, LauncherGone, Spawned, SpawnRequest

# Answers each request according to the script in argv[1]: "pong", "wrong-id", "exit"
# (replies without "seq", as a launcher that answers in order may), or "swap" (reads two
# spawn requests and answers the second first, each reply with its request's id and seq).
FAKE = textwrap.dedent("""
    import json, sys
    for action in sys.argv[1].split(","):
        if action == "exit":
            break
        request = json.loads(sys.stdin.readline())
        if action == "swap":
            second = json.loads(sys.stdin.readline())
            for n, req in ((2, second), (1, request)):
                reply = {"id": req["id"], "seq": req["seq"], "ok": True, "shim_pid": n,
                         "shim_start_time": n, "pid": 100 + n, "pgid": 100 + n,
                         "start_time": n, "started_at": 1.7e9 + n}
                sys.stdout.write(json.dumps(reply) + "\\n")
            sys.stdout.flush()
            continue
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


def _request(job_id: str = "mine") -> SpawnRequest:
    return SpawnRequest(id=job_id, job_dir="/nonexistent/job", argv=["true"], cwd="/", env={})


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


async def test_replies_out_of_order_go_to_their_own_requests():
    launcher = await _fake("swap,exit")
    results = {}

    async def spawn(job_id: str) -> None:
        results[job_id] = await launcher.spawn(_request(job_id))

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(spawn, "first")
            await trio.testing.wait_all_tasks_blocked()  # written first: answered last
            nursery.start_soon(spawn, "second")
        assert (results["first"].pid, results["first"].started_at) == (101, 1.7e9 + 1)
        assert (results["second"].pid, results["second"].started_at) == (102, 1.7e9 + 2)
        assert results["first"].id == "first" and results["second"].id == "second"
    finally:
        await launcher.aclose()


def test_spawned_keeps_its_old_constructor():
    spawned = Spawned(id="x", shim_pid=1, shim_start_time=1, pid=2, pgid=2, start_time=2)
    assert spawned.started_at is None  # the new field has a default
