"""The control actor serves a duplicate of the claimed socket, so restarts never unbind it."""

from __future__ import annotations

import os

import httpx
import pytest
import trio
from inprocess import daemon_context

from gpuplaned.actors import control

from gpuplaned.runtime.spec import ActorSpec


@pytest.fixture
async def running(tmp_path, nursery):
    spec = ActorSpec("control", control.run, frozenset({"all"}), graceful_stop=True, stoppable=False)
    async with daemon_context(tmp_path, nursery, [spec]) as shared:
        shared.lifecycle.ready()
        yield shared


async def get_daemon(path: str) -> dict:
    transport = httpx.AsyncHTTPTransport(uds=path)
    async with httpx.AsyncClient(transport=transport, base_url="http://gpuplaned") as client:
        response = await client.get("/api/v1/daemon")
        response.raise_for_status()
        return response.json()


async def test_restart_keeps_the_socket_bound_and_serves_again(running):
    path = running.endpoint.unix_path
    inode = os.stat(path).st_ino
    assert (await get_daemon(path))["state"] == "READY"
    fds_before = len(os.listdir("/proc/self/fd"))
    await running.supervisor.stop("control", force=True)
    assert os.stat(path).st_ino == inode  # still our socket file
    await running.supervisor.start("control")
    assert (await get_daemon(path))["pid"] == os.getpid()
    await running.supervisor.stop("control", force=True)
    await running.supervisor.start("control")
    assert (await get_daemon(path))["state"] == "READY"
    assert os.stat(path).st_ino == inode
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 1  # no duplicate fds leak per restart


async def test_statistics_count_requests(running):
    path = running.endpoint.unix_path
    for _ in range(3):
        await get_daemon(path)
    stats = running.supervisor.snapshot("control").stats
    assert stats.requests == 3 and stats.errors == 0
    assert stats.endpoint == f"unix://{path}"
