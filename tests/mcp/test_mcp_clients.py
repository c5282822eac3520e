"""Many MCP clients at once over streamable HTTP with a token each, and the daemon restarting
under a connected client (kill -9, then a new daemon on the same port and dirs)."""

from __future__ import annotations

import socket

import httpx2
import pytest
import trio
from mcp_http import ClosingTransport, closing_client
from helpers import Jobs
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

pytestmark = pytest.mark.e2e

CLIENTS = 20


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def http_client(url: str, http: httpx2.AsyncClient, mode: str = "auto") -> Client:
    return Client(streamable_http_client(url + "/mcp", http_client=http), mode=mode)


def bearer(token: str) -> httpx2.AsyncClient:
    return closing_client(headers={"Authorization": f"Bearer {token}"}, timeout=30)


def new_token(jobs: Jobs, name: str, scopes: list[str]) -> str:
    return jobs.client.post("/api/v1/tokens", {"name": name, "scopes": scopes})["secret"]


def start_front(daemon_factory, tmp_path, port: int) -> tuple[Jobs, str]:
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus", "fake:1", "--http", f"127.0.0.1:{port}")
    return jobs, f"http://127.0.0.1:{port}"


async def test_twenty_clients_at_once(daemon_factory, tmp_path):
    jobs, url = start_front(daemon_factory, tmp_path, free_port())
    job = jobs.wait(jobs.submit(["true"], name="seen-by-all")["id"], "SUCCEEDED")
    tokens = [new_token(jobs, f"agent-{i}", ["read"]) for i in range(CLIENTS)]
    answers: list[dict] = []

    async def one(token: str) -> None:
        async with bearer(token) as http, http_client(url, http) as client:
            names = sorted(tool.name for tool in (await client.list_tools()).tools)
            got = await client.call_tool("get_job", {"job_id": job["id"]})
            listed = await client.call_tool("list_jobs", {})
            nodes = await client.call_tool("list_nodes", {})
            assert not (got.is_error or listed.is_error or nodes.is_error), (got.content, listed.content)
            answers.append({"tools": names, "job": got.structured_content, "jobs": listed.structured_content,
                            "nodes": len(nodes.structured_content["nodes"])})

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for token in tokens:
                nursery.start_soon(one, token)
    assert len(answers) == CLIENTS
    assert all(a == answers[0] for a in answers)
    assert job["id"] in str(answers[0]["job"])
    assert answers[0]["nodes"] == 1


class BehindAProxy(httpx2.AsyncBaseTransport):
    """What a reverse proxy in front of the daemon answers while the daemon is away: 502.

    The SDK's HTTP client ends its session when a connection is refused outright (the
    ConnectError escapes its task group), but takes a 502 as one request's error and goes on,
    as a client behind nginx or Caddy sees a restart."""

    def __init__(self) -> None:
        self.inner = ClosingTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await self.inner.handle_async_request(request)
        except httpx2.ConnectError:
            return httpx2.Response(502, request=request, text="bad gateway")

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_daemon_restarting_under_a_connected_client(daemon_factory, tmp_path, mode):
    port = free_port()
    jobs, url = start_front(daemon_factory, tmp_path, port)
    job = jobs.wait(jobs.submit(["true"], name="before")["id"], "SUCCEEDED")
    token = new_token(jobs, "agent", ["read"])  # kept in the database: the restarted daemon knows it
    proxied = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30, transport=BehindAProxy())
    async with proxied, http_client(url, proxied, mode) as survivor:
        assert not (await survivor.call_tool("get_job", {"job_id": job["id"]})).is_error

        # A plain SDK client connected before the outage: its call fails promptly, and cleanly.
        with trio.fail_after(30), pytest.RaisesGroup(pytest.RaisesExc(httpx2.TransportError), flatten_subgroups=True):
            async with bearer(token) as http, http_client(url, http, mode) as plain:
                assert not (await plain.call_tool("list_jobs", {})).is_error
                jobs.daemon.kill()
                await plain.call_tool("get_job", {"job_id": job["id"]})

        with trio.fail_after(30), pytest.raises(MCPError):
            await survivor.call_tool("get_job", {"job_id": job["id"]})

        await trio.to_thread.run_sync(lambda: jobs.restart(daemon_factory, "--gpus", "fake:1",
                                                           "--http", f"127.0.0.1:{port}"))
        # The same client goes on (nothing to re-establish: a 2025-11-25 session this daemon never
        # opened is served statelessly), and a new client works too.
        with trio.fail_after(30):
            back = await survivor.call_tool("get_job", {"job_id": job["id"]})
            assert not back.is_error, back.content
            async with bearer(token) as http, http_client(url, http, mode) as fresh:
                again = await fresh.call_tool("get_job", {"job_id": job["id"]})
        assert job["id"] in str(back.structured_content)
        assert again.structured_content == back.structured_content
