"""MCP's submit_job, get_job and retry_job speak dependencies, against one real daemon (fake GPUs)
and its HTTP front: a job submitted after another, why it waits, the chain cancelled by a
failure, and retry_job with_dependants putting it back."""

from __future__ import annotations

import json

import pytest
import trio
from helpers import DaemonProcess, kill_processes_with_env, wait_for
from mcp import Client
from mcp_http import connected, ok

pytestmark = [pytest.mark.e2e]


@pytest.fixture
def front(tmp_path):
    daemon = DaemonProcess(tmp_path / "d", "--gpus", "fake:2", "--http", "127.0.0.1:0").start()
    try:
        daemon.wait_ready()
        url = wait_for(lambda: daemon.client().get("/api/v1/daemon")["endpoints"].get("http"), what="the front")
        token = daemon.client().post("/api/v1/tokens", {"name": "rw", "scopes": ["read", "write"]})["secret"]
        wait_for(lambda: daemon.client().get("/api/v1/nodes")["nodes"], what="the node to register")
        work = tmp_path / "work"
        work.mkdir()
        yield url, token, work
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


async def poll(client: Client, job_id: str, *states: str) -> dict:
    with trio.fail_after(30):
        while True:
            body = ok(await client.call_tool("get_job", {"job_id": job_id}))
            if body["job"]["status"] in states:
                return body
            await trio.sleep(0.1)


async def test_a_chain_through_mcp(front):
    url, token, work = front
    async with connected(url, token) as client:
        gate = ["sh", "-c", "while [ ! -e go ]; do sleep 0.05; done; test -e ok"]
        first = ok(await client.call_tool("submit_job", {"command": gate, "cwd": str(work)}))["job"]["id"]
        then = ok(await client.call_tool("submit_job", {"command": ["true"], "cwd": str(work),
                                                         "after": {"ids": [first]}}))["job"]
        assert then["after"] == "succeeded" and then["dependencies"][0]["job_id"] == first
        await poll(client, first, "RUNNING")
        waiting = ok(await client.call_tool("get_job", {"job_id": then["id"]}))
        assert f"it waits: after {first} (RUNNING)" in waiting["summary"]
        assert waiting["job"]["queue_reason"] == f"after {first} (RUNNING)"
        listed = ok(await client.call_tool("list_jobs", {}))["jobs"]
        assert [j["dependants"] for j in listed if j["id"] == first] == [[{"job_id": then["id"], "status": "QUEUED"}]]

        unknown = await client.call_tool("submit_job", {"command": ["true"], "cwd": str(work),
                                                         "after": {"ids": ["job_nope"], "when": "ended"}})
        assert unknown.is_error
        assert json.loads(unknown.content[0].text)["error"]["message"] == "after: no job job_nope"

        (work / "go").touch()
        cancelled = (await poll(client, then["id"], "CANCELLED"))["job"]
        assert cancelled["failure_reason"] == "DEPENDENCY_FAILED"
        (work / "ok").touch()
        dry = ok(await client.call_tool("retry_job", {"job_id": first, "with_dependants": True, "dry_run": True}))
        assert f"with its cancelled dependants {then['id']} behind it" in dry["summary"]
        again = ok(await client.call_tool("retry_job", {"job_id": first, "with_dependants": True}))
        assert f"Queued again behind it: {then['id']}." in again["summary"]
        assert (await poll(client, then["id"], "SUCCEEDED", "FAILED", "CANCELLED"))["job"]["status"] == "SUCCEEDED"
