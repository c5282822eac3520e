"""MCP's queue tools (issue 31 items 2 and 7): list_groups, set_group_limit, pause_group,
pause_queue, set_job_priority, remove_job and clean_jobs, with the SDK's own client against one
real daemon (fake GPUs) and its HTTP front. Each does what its REST route does; a dry run changes
nothing; a token with limits meets the REST refusals; a read token is refused; the destructive
ones ask the user first, or name the command to type when nobody can be asked."""

from __future__ import annotations

import mcp_types as types
import pytest
import trio
from helpers import jobs_with_front
from mcp_http import connected, error_of, ok

pytestmark = [pytest.mark.e2e]

GATE = ["sh", "-c", "while [ ! -e \"$0\" ]; do sleep 0.05; done"]  # runs until its file exists


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("mcp-queue")
    with jobs_with_front(root) as (jobs, url):
        secrets = {}
        for name, scopes, limits in (("rw", ["read", "write"], None), ("ro", ["read"], None),
                                     ("limited", ["read", "write"], {"max_gpus_per_job": 1})):
            body = {"name": name, "scopes": scopes, **({"limits": limits} if limits else {})}
            secrets[name] = jobs.client.post("/api/v1/tokens", body)["secret"]
        yield jobs, url, secrets


def answering(confirm: bool, asked: list[str]):
    async def callback(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"confirm": confirm})
    return callback


async def reason_of(jobs, job_id: str, reason: str) -> dict:
    with trio.fail_after(20):
        while (job := jobs.get(job_id))["queue_reason"] != reason:
            await trio.sleep(0.05)
    return job


async def test_a_group_limited_paused_and_resumed_and_the_queue_paused(env):
    jobs, url, secrets = env
    gate = [*GATE, str(jobs.file("groups.stop"))]
    async with connected(url, secrets["rw"]) as client:
        plan = ok(await client.call_tool("set_group_limit", {"group": "train", "parallel": 1, "dry_run": True}))
        assert plan["dry_run"] is True and plan["group"] is None and "is new" in plan["would"]
        assert "train" not in [g["name"] for g in ok(await client.call_tool("list_groups", {}))["groups"]]
        limited = ok(await client.call_tool("set_group_limit", {"group": "train", "parallel": 1}))
        assert limited["group"] == {"name": "train", "parallel": 1, "paused": False, "queued": 0, "running": 0}
        first = ok(await client.call_tool("submit_job", {"command": gate, "cwd": str(jobs.workdir), "gpu": 0,
                                                         "group": "train"}))["job"]["id"]
        second = ok(await client.call_tool("submit_job", {"command": ["true"], "cwd": str(jobs.workdir), "gpu": 0,
                                                          "group": "train"}))["job"]["id"]
        await trio.to_thread.run_sync(jobs.wait, first, "RUNNING")
        await reason_of(jobs, second, "group train: 1 of 1 running")
        listed = ok(await client.call_tool("list_groups", {}))
        assert "train (1 of 1 running, 1 queued)" in listed["summary"] and listed["queue_paused"] is False

        # Pausing the group holds its queued job even without a limit; its running job goes on.
        dry = ok(await client.call_tool("pause_group", {"group": "train", "dry_run": True}))
        assert dry["group"]["paused"] is False and "would be paused" in dry["would"]
        assert ok(await client.call_tool("pause_group", {"group": "train"}))["group"]["paused"] is True
        unlimited = ok(await client.call_tool("set_group_limit", {"group": "train", "parallel": None}))
        assert unlimited["group"]["paused"] is True and unlimited["group"]["parallel"] is None
        await reason_of(jobs, second, "group train paused")
        assert jobs.get(first)["status"] == "RUNNING"
        unknown = error_of(await client.call_tool("pause_group", {"group": "nope", "dry_run": True}))
        assert unknown["code"] == "not_found" and "nope" in unknown["message"]
        bad = error_of(await client.call_tool("pause_group", {"group": "a b"}))
        assert bad["code"] == "bad_request" and "group" in bad["message"]

        # Priority: only a queued job's; a dry run says the change and makes none.
        dry = ok(await client.call_tool("set_job_priority", {"job_id": second, "priority": 7, "dry_run": True}))
        assert "from 0 to 7" in dry["would"] and jobs.get(second)["priority"] == 0
        assert ok(await client.call_tool("set_job_priority", {"job_id": second, "priority": 7}))["job"]["priority"] == 7
        refused = error_of(await client.call_tool("set_job_priority", {"job_id": first, "priority": 1}))
        assert refused["code"] == "conflict" and "RUNNING" in refused["message"]
        dry = ok(await client.call_tool("set_job_priority", {"job_id": first, "priority": 1, "dry_run": True}))
        assert "would be refused" in dry["would"]

        # The whole queue: paused, the group resumed still holds the job; resumed, it runs.
        assert ok(await client.call_tool("pause_queue", {}))["queue_paused"] is True
        ok(await client.call_tool("pause_group", {"group": "train", "paused": False}))
        await reason_of(jobs, second, "queue paused")
        dry = ok(await client.call_tool("pause_queue", {"paused": False, "dry_run": True}))
        assert dry["queue_paused"] is True and "would be resumed" in dry["would"]
        assert ok(await client.call_tool("pause_queue", {"paused": False}))["queue_paused"] is False
        assert (await trio.to_thread.run_sync(jobs.wait, second))["status"] == "SUCCEEDED"
    jobs.file("groups.stop").touch()
    await trio.to_thread.run_sync(jobs.wait, first)


async def test_remove_and_clean_ask_first_and_dry_runs_change_nothing(env):
    jobs, url, secrets = env
    done = [jobs.submit(["true"], gpu=0, group="old")["id"] for _ in range(2)]
    other = jobs.submit(["true"], gpu=0, group="other")["id"]
    for job_id in (*done, other):
        await trio.to_thread.run_sync(jobs.wait, job_id)
    gate = [*GATE, str(jobs.file("remove.stop"))]
    running = jobs.submit(gate, gpu=0)["id"]
    await trio.to_thread.run_sync(jobs.wait, running, "RUNNING")
    asked: list[str] = []

    async with connected(url, secrets["rw"]) as client:  # declares no elicitation: cannot be asked
        refused = error_of(await client.call_tool("remove_job", {"job_id": done[0]}))
        assert refused["details"]["reason"] == "confirmation_required"
        assert refused["details"]["ways_out"] == ["unattended token", "gpuplanectl job remove JOB"]
        refused = error_of(await client.call_tool("clean_jobs", {"group": "old"}))
        assert "remove every ended job of group old" in refused["message"] and "gpuplanectl clean" in refused["message"]
        dry = ok(await client.call_tool("clean_jobs", {"group": "old", "dry_run": True}))
        assert (dry["dry_run"], sorted(dry["removed"]), dry["files_removed"]) == (True, sorted(done), [])
        dry = ok(await client.call_tool("remove_job", {"job_id": running, "dry_run": True}))
        assert dry["removed"] == [] and "cancel it first" in dry["would"]
        assert ok(await client.call_tool("remove_job", {"job_id": done[0], "dry_run": True}))["removed"] == [done[0]]
    assert all(jobs.get(j)["status"] == "SUCCEEDED" for j in done)  # nothing removed so far

    async with connected(url, secrets["rw"], elicitation_callback=answering(True, asked)) as client:
        gone = ok(await client.call_tool("remove_job", {"job_id": done[0]}))
        assert (gone["removed"], gone["dry_run"], gone["files_waiting_on"]) == ([done[0]], False, [])
        on_node = error_of(await client.call_tool("remove_job", {"job_id": running}))
        assert on_node["code"] == "conflict" and "cancel it first" in on_node["message"]
        cleaned = ok(await client.call_tool("clean_jobs", {"group": "old"}))
        assert cleaned["removed"] == [done[1]]
    assert asked[0] == f"An agent asks to remove job {done[0]}. Go ahead?"
    assert "remove every ended job of group old, with its logs" in asked[2]
    listed = jobs.client.get("/api/v1/jobs?limit=100")["jobs"]
    assert not {j["id"] for j in listed} & set(done) and other in {j["id"] for j in listed}
    jobs.file("remove.stop").touch()
    await trio.to_thread.run_sync(jobs.wait, running)


async def test_a_limited_token_meets_the_rest_refusals_and_a_read_token_the_scope(env):
    jobs, url, secrets = env
    jobs.client.request("PUT", "/api/v1/groups/shared", {"parallel": 3})
    theirs = jobs.submit(["true"], gpu=0)["id"]
    await trio.to_thread.run_sync(jobs.wait, theirs)
    async with connected(url, secrets["limited"], elicitation_callback=answering(True, [])) as client:
        for name, arguments in (("set_group_limit", {"group": "shared", "parallel": 1}),
                                ("pause_group", {"group": "shared"}), ("pause_queue", {}),
                                ("clean_jobs", {}), ("remove_job", {"job_id": theirs})):
            refused = error_of(await client.call_tool(name, arguments))
            assert refused["code"] == "forbidden", (name, refused)
        dry = ok(await client.call_tool("pause_queue", {"dry_run": True}))
        assert "would be refused: a token with limits may not pause or resume the queue" in dry["would"]
        assert error_of(await client.call_tool("clean_jobs", {"dry_run": True}))["code"] == "forbidden"
        mine = ok(await client.call_tool("submit_job", {"command": ["true"], "cwd": str(jobs.workdir), "gpu": 0,
                                                        "timeout_s": 60}))["job"]["id"]
        await trio.to_thread.run_sync(jobs.wait, mine)
        assert ok(await client.call_tool("remove_job", {"job_id": mine}))["removed"] == [mine]
    assert jobs.client.get("/api/v1/groups/shared")["group"] == {"name": "shared", "parallel": 3, "paused": False,
                                                                "queued": 0, "running": 0}
    assert jobs.client.get("/api/v1/queue") == {"paused": False} and jobs.get(theirs)["status"] == "SUCCEEDED"
    async with connected(url, secrets["ro"]) as client:
        assert ok(await client.call_tool("list_groups", {}))["groups"]
        refused = error_of(await client.call_tool("set_group_limit", {"group": "shared", "parallel": 1}))
        assert refused["code"] == "forbidden" and refused["details"]["needed"] == "write"
