"""``tasks/cancel`` is ``cancel_job`` by another name (issue 29, item 7): a write token that
``cancel_job`` refuses without the user's confirmation cannot cancel the same job through
``tasks/cancel``, and every such call, refused or done, is in the audit log.

Real daemon, real MCP clients over its HTTP front, real jobs (``sleep``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import mcp_types as types
import pytest
from helpers import DaemonProcess, Jobs, kill_processes_with_env, wait_for
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_http import closing_client

pytestmark = [pytest.mark.e2e]


class Front:
    def __init__(self, daemon: DaemonProcess, url: str, tokens: dict[str, str], work: Path) -> None:
        self.daemon, self.url, self.tokens = daemon, url, tokens
        self.jobs = Jobs(daemon, work)

    @asynccontextmanager
    async def client(self, token: str = "rw", **options) -> AsyncIterator[Client]:
        headers = {"Authorization": f"Bearer {self.tokens[token]}"}
        async with closing_client(headers=headers, timeout=70) as http, \
                Client(streamable_http_client(self.url + "/mcp", http_client=http), **options) as client:
            yield client

    def running_job(self, name: str) -> str:
        job = self.jobs.submit(["sleep", "120"], gpu=0, name=name)
        self.jobs.wait(job["id"], "RUNNING", timeout=30)
        return job["id"]

    def audit_of(self, job_id: str) -> list[dict]:
        """The MCP audit entries that name ``job_id``, oldest first."""
        entries = self.daemon.client().get("/api/v1/audit?limit=500")["entries"]
        return [e for e in reversed(entries)
                if e["via"] == "mcp" and (e.get("arguments") or {}).get("job_id") == job_id]


@pytest.fixture(scope="module")
def front(tmp_path_factory) -> Front:
    root = tmp_path_factory.mktemp("mcp-cancel")
    config = root / "gpuplaned.toml"
    config.write_text("[node]\nmax_cpu_jobs = 8\n")
    daemon = DaemonProcess(root / "d", "--gpus", "fake:1", "--node-name", "box", "--http", "127.0.0.1:0",
                           "--config", str(config)).start()
    try:
        daemon.wait_ready()
        url = wait_for(lambda: daemon.client().get("/api/v1/daemon")["endpoints"].get("http"), what="the front")
        tokens = {}
        for name, limits in (("rw", None), ("unattended", {"unattended": True})):
            body = {"name": name, "scopes": ["read", "write"], **({"limits": limits} if limits else {})}
            tokens[name] = daemon.client().post("/api/v1/tokens", body)["secret"]
        wait_for(lambda: daemon.client().get("/api/v1/nodes")["nodes"], what="the node to register")
        work = root / "work"
        yield Front(daemon, url, tokens, work)
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


async def cancel_task(client: Client, job_id: str) -> types.CancelTaskResult:
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=job_id))
    return await client.session.send_request(request, types.CancelTaskResult)


def accept(asked: list[str]):
    async def callback(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"confirm": True})
    return callback


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_token_cancel_job_refuses_is_refused_by_tasks_cancel_too(front, mode):
    job_id = front.running_job(f"keep-running-{mode}")
    async with front.client(mode=mode) as client:  # declares no elicitation: it cannot be asked
        tool = await client.call_tool("cancel_job", {"job_id": job_id})
        assert tool.is_error
        by_tool = json.loads(tool.content[0].text)["error"]
        with pytest.raises(MCPError) as refused:
            await cancel_task(client, job_id)
    by_task = refused.value.error.data
    assert by_tool["details"]["reason"] == by_task["details"]["reason"] == "confirmation_required"
    assert by_task == by_tool  # the same refusal, word for word
    assert front.jobs.get(job_id)["status"] == "RUNNING"

    entries = wait_for(lambda: [e for e in front.audit_of(job_id) if e["action"] == "tasks/cancel"] or None,
                       what="the audit entry of the refused tasks/cancel")
    assert entries[0]["outcome"] == "forbidden" and entries[0]["token_name"] == "rw"
    assert "confirmation" in entries[0]["detail"]
    front.jobs.client.post(f"/api/v1/jobs/{job_id}/cancel", {})


async def test_a_modern_client_that_can_be_asked_is_sent_to_cancel_job(front):
    """At 2026-07-28 tasks/cancel cannot carry the question; cancel_job can, and asks."""
    job_id = front.running_job("modern")
    asked: list[str] = []
    async with front.client(elicitation_callback=accept(asked)) as client:
        assert client.protocol_version == "2026-07-28"
        with pytest.raises(MCPError) as refused:
            await cancel_task(client, job_id)
        assert refused.value.error.data["details"]["reason"] == "confirmation_required"
        assert "cancel_job" in refused.value.error.message and asked == []
        assert front.jobs.get(job_id)["status"] == "RUNNING"
        assert not (await client.call_tool("cancel_job", {"job_id": job_id})).is_error
    assert len(asked) == 1 and job_id in asked[0]
    front.jobs.wait(job_id, "CANCELLED", timeout=30)


async def test_confirmed_tasks_cancel_cancels_and_is_audited(front):
    """2025-11-25: asked in the session, as cancel_job asks; an unattended token is not asked."""
    asked: list[str] = []
    job_id = front.running_job("confirmed")
    async with front.client(mode="legacy", elicitation_callback=accept(asked)) as client:
        task = await cancel_task(client, job_id)
    assert task.task_id == job_id and task.status in ("working", "cancelled")
    assert len(asked) == 1 and f"cancel job {job_id}" in asked[0]
    front.jobs.wait(job_id, "CANCELLED", timeout=30)

    async with front.client("unattended") as client:  # such a token cancels only the jobs it submitted
        submitted = await client.call_tool("submit_job", {"command": ["sleep", "120"], "cwd": str(front.jobs.workdir),
                                                          "gpu": 0, "name": "unattended"})
        unattended = submitted.structured_content["job"]["id"]
        front.jobs.wait(unattended, "RUNNING", timeout=30)
        await cancel_task(client, unattended)
    front.jobs.wait(unattended, "CANCELLED", timeout=30)
    assert len(asked) == 1

    for job, token in ((job_id, "rw"), (unattended, "unattended")):
        entries = wait_for(lambda: front.audit_of(job) or None, what=f"the audit entry of {job}")
        assert [(e["action"], e["outcome"], e["token_name"]) for e in entries] == [("tasks/cancel", "ok", token)]
