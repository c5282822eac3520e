"""MCP's sweep tools (issue 31 item 7): submit_sweep within a token's GPU-hour budget (queued) and
beyond it (refused, naming the sweep's worst case and what remains, nothing queued), its dry run
showing that worst case (trials x GPUs x timeout) and the budget after, get_sweep, list_jobs by
sweep, and cancel_sweep (asked first) — the SDK's own client against one real daemon (fake GPUs)
and its HTTP front."""

from __future__ import annotations

import json
import sqlite3

import mcp_types as types
import pytest
import trio
from helpers import jobs_with_front
from mcp_http import connected, error_of, ok

pytestmark = [pytest.mark.e2e]

GATE = ["sh", "-c", "while [ ! -e \"$0\" ]; do sleep 0.05; done"]  # runs until its file exists


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("mcp-sweeps")
    with jobs_with_front(root) as (jobs, url):
        secrets = {}
        for name, limits in (("rw", None), ("budget", {"gpu_hours": 1.0})):
            body = {"name": name, "scopes": ["read", "write"], **({"limits": limits} if limits else {})}
            secrets[name] = jobs.client.post("/api/v1/tokens", body)["secret"]
        yield jobs, url, secrets


def counted(jobs) -> tuple[int, int]:
    """(jobs, sweeps) in the daemon's store."""
    with sqlite3.connect(jobs.daemon.home / "gpuplane.db") as conn:
        return tuple(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("jobs", "sweeps"))


def sweep_body(jobs, name: str, values: list[float], timeout_s: int, command=None) -> dict:
    return {"name": name, "grid": {"lr": values}, "max_parallel": 1,
            "job": {"command": command or ["echo", "lr={lr}"], "cwd": str(jobs.workdir), "gpu": 1,
                    "timeout_s": timeout_s}}


async def test_a_sweep_within_the_budget_is_queued_and_one_beyond_it_is_refused(env):
    jobs, url, secrets = env
    async with connected(url, secrets["budget"]) as client:
        # 2 trials x 1 GPU x 0.25 h = 0.5 of 1.0, reserved while they are open (each waits for its file).
        within = sweep_body(jobs, "within", [0.1, 0.01], 900, [*GATE, str(jobs.file("within.stop")), "lr={lr}"])
        before = counted(jobs)
        aliased = {**within["job"], "gpu": 0, "gpus": 1}  # gpus, gpu's alias, wins
        dry = ok(await client.call_tool("submit_sweep", {**within, "job": aliased, "dry_run": True}))
        assert (dry["dry_run"], dry["created"], dry["existing"], dry["sweep"]) == (True, 2, 0, None)
        assert dry["worst_case_gpu_hours"] == pytest.approx(0.5) and dry["budget_after_gpu_hours"] == pytest.approx(0.5)
        assert [t["command"][-1] for t in dry["planned"]] == ["lr=0.1", "lr=0.01"]
        assert "worst case 0.5 GPU-hours (2 trials x 1 GPU(s) x 0.25 h)" in dry["summary"]
        assert counted(jobs) == before  # the dry run queued nothing

        queued = ok(await client.call_tool("submit_sweep", within))
        sweep_id = queued["sweep"]["id"]
        assert (queued["created"], queued["existing"], queued["sweep"]["name"]) == (2, 0, "within")
        assert queued["budget_after_gpu_hours"] == pytest.approx(0.5)
        assert counted(jobs) == (before[0] + 2, before[1] + 1)
        again = ok(await client.call_tool("submit_sweep", within))  # same name and values: no trial twice
        assert (again["created"], again["existing"], again["sweep"]["id"]) == (0, 2, sweep_id)

        beyond = sweep_body(jobs, "beyond", [0.1, 0.01, 0.001], 3600)  # 3 GPU-hours, 0.5 left
        for arguments in ({**beyond, "dry_run": True}, beyond):
            refused = error_of(await client.call_tool("submit_sweep", arguments))
            assert refused["code"] == "forbidden" and refused["details"]["remaining_gpu_hours"] == pytest.approx(0.5)
            assert refused["details"]["worst_case_gpu_hours"] == pytest.approx(3.0)
            assert refused["message"].startswith("3 of 3 trial(s) refused, so none was queued")
            assert refused["message"].endswith("The sweep's worst case is 3 GPU-hours (3 trial(s) x 1 GPU(s) x 1 h), "
                                               "with 0.5 left of the token's budget")
        assert counted(jobs) == (before[0] + 2, before[1] + 1)  # nothing queued, no sweep made

        jobs.file("within.stop").touch()
        with trio.fail_after(30):
            while (shown := ok(await client.call_tool("get_sweep", {"sweep_id": sweep_id})))["sweep"]["status"] != \
                    "SUCCEEDED":
                await trio.sleep(0.1)
        assert [(t["trial"], t["values"], t["status"]) for t in shown["trials"]] == [
            (0, {"lr": 0.1}, "SUCCEEDED"), (1, {"lr": 0.01}, "SUCCEEDED")]
        assert "is SUCCEEDED: 2 trial(s): 2 succeeded" in shown["summary"]
        listed = ok(await client.call_tool("list_jobs", {"sweep": sweep_id}))["jobs"]
        assert sorted(j["name"] for j in listed) == ["within-0", "within-1"]
        assert error_of(await client.call_tool("list_jobs", {"sweep": "job_x"}))["code"] == "bad_request"


async def test_cancel_sweep_asks_and_stops_its_trials(env):
    jobs, url, secrets = env
    asked: list[str] = []

    async def accept(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"confirm": True})

    gate = [*GATE, str(jobs.file("sweep.stop"))]
    async with connected(url, secrets["rw"]) as client:  # no elicitation: cannot be asked
        body = {**sweep_body(jobs, "cancelled", [1, 2, 3], 600), "max_parallel": 1}
        body["job"]["command"] = [*gate, "{lr}"]
        sweep_id = ok(await client.call_tool("submit_sweep", body))["sweep"]["id"]
        with trio.fail_after(30):
            while (ok(await client.call_tool("get_sweep", {"sweep_id": sweep_id})))["sweep"]["counts"]["running"] != 1:
                await trio.sleep(0.05)
        shown = ok(await client.call_tool("get_sweep", {"sweep_id": sweep_id, "status": ["QUEUED"], "limit": 1}))
        assert [t["trial"] for t in shown["trials"]] == [1] and shown["trials_left_out"] == 1
        assert shown["trials"][0]["queue_reason"] == "sweep max-parallel 1 reached"
        dry = ok(await client.call_tool("cancel_sweep", {"sweep_id": sweep_id, "dry_run": True}))
        assert "its 2 queued trial(s) at once, its 1 running one(s) stopped" in dry["would"]
        refused = error_of(await client.call_tool("cancel_sweep", {"sweep_id": sweep_id}))
        assert refused["details"]["ways_out"] == ["unattended token", "gpuplanectl sweep cancel ID"]
    async with connected(url, secrets["rw"], elicitation_callback=accept) as client:
        done = ok(await client.call_tool("cancel_sweep", {"sweep_id": sweep_id}))
        assert done["sweep"]["status"] == "CANCELLED" and done["dry_run"] is False
        with trio.fail_after(30):
            while ok(await client.call_tool("get_sweep", {"sweep_id": sweep_id}))["sweep"]["counts"]["cancelled"] < 3:
                await trio.sleep(0.05)
    assert asked == [f"An agent asks to cancel sweep {sweep_id}: its queued trials, and its running ones stopped. "
                     "Go ahead?"]


async def test_a_limited_token_sees_and_cancels_only_its_own_sweeps(env):
    jobs, url, secrets = env
    theirs = jobs.client.post("/api/v1/sweeps", sweep_body(jobs, "theirs", [1], 60, ["true", "{lr}"]))["sweep"]["id"]
    async def accept(context, params):
        return types.ElicitResult(action="accept", content={"confirm": True})

    async with connected(url, secrets["budget"], elicitation_callback=accept) as client:
        for name, arguments in (("get_sweep", {"sweep_id": theirs}), ("cancel_sweep", {"sweep_id": theirs}),
                                ("cancel_sweep", {"sweep_id": theirs, "dry_run": True})):
            refused = error_of(await client.call_tool(name, arguments))
            assert refused["code"] == "forbidden" and refused["details"]["limit"] == "owner", (name, refused)
        unknown = error_of(await client.call_tool("get_sweep", {"sweep_id": "swp_nope"}))
        assert unknown["code"] == "not_found" and "swp_nope" in unknown["message"]
    assert jobs.client.get(f"/api/v1/sweeps/{theirs}")["sweep"]["cancelled_at"] is None


async def test_a_sweeps_secret_env_is_redacted_in_the_audit(env):
    jobs, url, secrets = env
    value = "s3cret-sweep-value"
    body = sweep_body(jobs, "secretive", [1, 2], 60, ["true", "{lr}"])
    body["job"]["secret_env"] = {"API_TOKEN": value}
    async with connected(url, secrets["rw"]) as client:
        dry = ok(await client.call_tool("submit_sweep", {**body, "dry_run": True}))
    assert dry["created"] == 2 and value not in json.dumps(dry)
    entries = jobs.client.get("/api/v1/audit?limit=200")["entries"]
    [entry] = [e for e in entries if e["via"] == "mcp" and e["action"] == "submit_sweep"
               and e["arguments"].get("name") == "secretive"]
    assert entry["arguments"]["job"]["secret_env"] == {"API_TOKEN": "[redacted]"} and entry["outcome"] == "ok"
    assert value not in json.dumps(entries)


async def test_pause_resume_and_retry_failed_sweep(env):
    jobs, url, secrets = env
    flag = jobs.file("retry.ok")
    # Trial 0 fails until the flag exists; trial 1 succeeds.
    body = sweep_body(jobs, "levers", [0, 1], 60, ["sh", "-c", f"[ $0 = 1 ] || [ -e {flag} ]", "{lr}"])
    async with connected(url, secrets["rw"]) as client:
        sweep_id = ok(await client.call_tool("submit_sweep", {**body, "max_parallel": 2}))["sweep"]["id"]
        paused = ok(await client.call_tool("pause_sweep", {"sweep_id": sweep_id}))
        assert paused["sweep"]["paused"] and "is paused" in paused["summary"]
        assert jobs.client.get(f"/api/v1/sweeps/{sweep_id}")["sweep"]["paused"]  # what REST's pause does
        resumed = ok(await client.call_tool("resume_sweep", {"sweep_id": sweep_id}))
        assert not resumed["sweep"]["paused"] and not jobs.client.get(f"/api/v1/sweeps/{sweep_id}")["sweep"]["paused"]
        with trio.fail_after(30):
            while (counts := ok(await client.call_tool("get_sweep", {"sweep_id": sweep_id}))["sweep"]["counts"])[
                    "failed"] + counts["succeeded"] < 2:
                await trio.sleep(0.05)
        assert (counts["failed"], counts["succeeded"]) == (1, 1)
        flag.touch()
        retried = ok(await client.call_tool("retry_failed_sweep", {"sweep_id": sweep_id}))
        assert "1 failed trial(s) queued again" in retried["summary"]
        with trio.fail_after(30):
            while ok(await client.call_tool("get_sweep", {"sweep_id": sweep_id}))["sweep"]["counts"]["succeeded"] < 2:
                await trio.sleep(0.05)


async def test_set_sweep_max_parallel_changes_the_limit_and_names_a_bad_value(env):
    jobs, url, secrets = env
    body = sweep_body(jobs, "throttled", [1, 2], 60, ["true", "{lr}"])
    async with connected(url, secrets["rw"]) as client:
        sweep_id = ok(await client.call_tool("submit_sweep", {**body, "max_parallel": 1}))["sweep"]["id"]
        changed = ok(await client.call_tool("set_sweep_max_parallel", {"sweep_id": sweep_id, "max_parallel": 2}))
        assert changed["sweep"]["max_parallel"] == 2 and "at most 2 of its trials" in changed["summary"]
        assert jobs.client.get(f"/api/v1/sweeps/{sweep_id}")["sweep"]["max_parallel"] == 2  # what REST's PATCH does
        unlimited = ok(await client.call_tool("set_sweep_max_parallel", {"sweep_id": sweep_id, "max_parallel": None}))
        assert unlimited["sweep"]["max_parallel"] is None
        refused = error_of(await client.call_tool("set_sweep_max_parallel", {"sweep_id": sweep_id, "max_parallel": 0}))
        assert refused["code"] == "bad_request" and "max_parallel" in refused["message"]
