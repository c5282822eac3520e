"""Who sees a job's env over MCP: REST's rule (``tests/http/test_job_env_visibility.py``), through
the same code, with the SDK's own client on a real daemon's front. One job shows its env values
to a token with write scope, except for names that look secret; a list, and a read-only token,
show names only (each value null)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from helpers import Jobs
from mcp_http import closing_client
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.e2e

ENV = {"LR": "lr-value", "WANDB_API_KEY": "wandb-s3cret", "db_password": "pw-s3cret", "GH_TOKEN": "gh-s3cret",
       "my_secret_x": "x-s3cret", "OMP_NUM_THREADS": "omp-value"}
SHOWN = {"LR": "lr-value", "OMP_NUM_THREADS": "omp-value"}
NAMES_ONLY = dict.fromkeys(ENV)
WITH_VALUES = {**NAMES_ONLY, **SHOWN}


@pytest.fixture
def setup(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    job = jobs.sh("true", gpu=0, env=ENV)
    jobs.wait(job["id"])
    url = jobs.client.get("/api/v1/daemon")["endpoints"]["http"]
    tokens = {scope: jobs.client.post("/api/v1/tokens", {"name": scope, "scopes": scopes})["secret"]
              for scope, scopes in (("read", ["read"]), ("write", ["read", "write"]))}
    return jobs, job["id"], url, tokens


@asynccontextmanager
async def mcp_client(url: str, token: str) -> AsyncIterator[Client]:
    async with closing_client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http, \
            Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
        yield client


def answer(result) -> tuple[dict, str]:
    """The tool's structured answer, and all its text (what lands in an agent's transcript)."""
    assert not result.is_error, result.content
    return result.structured_content, " ".join(getattr(part, "text", "") for part in result.content)


def rest_job(url: str, token: str, job_id: str) -> dict:
    response = httpx.get(f"{url}/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["job"]


async def test_a_write_token_sees_one_jobs_values_as_rest_shows_them(setup):
    jobs, job_id, url, tokens = setup
    async with mcp_client(url, tokens["write"]) as client:
        one, one_text = answer(await client.call_tool("get_job", {"job_id": job_id}))
        listed, listed_text = answer(await client.call_tool("list_jobs", {}))
        dry, dry_text = answer(await client.call_tool("retry_job", {"job_id": job_id, "dry_run": True}))
        submitted, submitted_text = answer(await client.call_tool(
            "submit_job", {"command": ["true"], "cwd": str(jobs.workdir), "gpu": 0, "env": ENV}))
    assert one["job"]["env"] == WITH_VALUES == rest_job(url, tokens["write"], job_id)["env"]
    assert dry["job"]["env"] == WITH_VALUES  # a write tool's answer is one job too
    assert submitted["job"]["env"] == WITH_VALUES
    assert [job["env"] for job in listed["jobs"]] == [NAMES_ONLY]  # a list: names only, as REST's
    assert "lr-value" not in listed_text
    for text in (one_text, listed_text, dry_text, submitted_text):
        assert "s3cret" not in text  # secret-looking names stay hidden from everyone


async def test_a_read_token_sees_names_only(setup):
    _, job_id, url, tokens = setup
    async with mcp_client(url, tokens["read"]) as client:
        one, text = answer(await client.call_tool("get_job", {"job_id": job_id}))
    assert one["job"]["env"] == NAMES_ONLY == rest_job(url, tokens["read"], job_id)["env"]
    assert not any(value in text for value in ENV.values())
