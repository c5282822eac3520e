"""MCP's submit_job puts a job in a group and list_jobs filters by group (refusing a bad name),
against one real daemon (fake GPUs) and its HTTP front."""

from __future__ import annotations

import pytest
from test_mcp_dependencies import connected, front, ok, poll  # noqa: F401  (front: the fixture)

pytestmark = [pytest.mark.e2e]


async def test_submit_into_a_group_and_list_by_group(front):  # noqa: F811
    url, token, work = front
    async with connected(url, token) as client:
        held = ok(await client.call_tool("submit_job", {"command": ["true"], "cwd": str(work), "group": "train"}))
        assert held["job"]["group"] == "train"
        other = ok(await client.call_tool("submit_job", {"command": ["true"], "cwd": str(work)}))["job"]["id"]
        await poll(client, held["job"]["id"], "SUCCEEDED")
        await poll(client, other, "SUCCEEDED")
        listed = ok(await client.call_tool("list_jobs", {"group": "train"}))["jobs"]
        assert [j["id"] for j in listed] == [held["job"]["id"]]
        bad = await client.call_tool("list_jobs", {"group": "a b"})
        assert bad.is_error and "group" in bad.content[0].text
