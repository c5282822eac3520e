"""The MCP server at /mcp, with the SDK's own client against one real daemon (fake GPUs) and
its HTTP front: tools and their schemas, a job submitted, polled, tailed and diagnosed,
token-budgeted metrics, the wait_for_events long poll, scopes, 401s, both protocol eras,
confirmation of cancel_job, the run-summary resource, the study prompt and the sweep playbook."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import httpx
import httpx2
import jsonschema
import mcp_types as types
import pytest
import trio
from mcp_http import closing_client, error_of
from helpers import DaemonProcess, kill_processes_with_env, wait_for
from mcp import Client
from mcp.client.extension import ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client

pytestmark = [pytest.mark.e2e]
SDK_DIR = str(Path(__file__).resolve().parents[2] / "sdk")

READ = ("list_nodes", "get_node_status", "list_jobs", "get_job", "get_run_summary", "query_metrics", "tail_logs",
        "list_events", "list_checkpoints", "list_evaluations", "list_groups", "get_sweep")
WRITE = ("submit_job", "cancel_job", "retry_job", "evaluate_checkpoint", "set_group_limit", "pause_group", "pause_queue",
         "set_job_priority", "remove_job", "clean_jobs", "submit_sweep", "cancel_sweep", "pause_sweep", "resume_sweep",
         "retry_failed_sweep", "set_sweep_max_parallel")
SEMANTIC = ("diagnose_run", "compare_runs", "compare_checkpoints", "get_best_checkpoint", "explain_failure")

# A training script that logs 3000 loss points through the SDK's spool (many points, fast).
TRAIN = """
import gpuplane, math
run = gpuplane.init(project="p", experiment="e", config={"max_steps": 3000})
for step in range(3000):
    run.log({"train/loss": 2.0 * math.exp(-step / 800) + 0.01 * (step % 7)}, step=step)
    if step in (1000, 2000, 2999):
        open(f"ck-{step}.pt", "wb").write(b"weights")
        run.log_checkpoint(f"ck-{step}.pt", step=step)
print("epoch done: loss fell")
print("warning: lr schedule flat")
run.finish()
"""


class Front:
    def __init__(self, daemon: DaemonProcess, url: str, tokens: dict[str, str], work: Path) -> None:
        self.daemon, self.url, self.tokens, self.work = daemon, url, tokens, work

    @asynccontextmanager
    async def client(self, token: str | None = "rw", **options) -> AsyncIterator[Client]:
        headers = {"Authorization": f"Bearer {self.tokens[token]}"} if token else {}
        async with closing_client(headers=headers, timeout=70) as http, \
                Client(streamable_http_client(self.url + "/mcp", http_client=http), **options) as client:
            yield client


@pytest.fixture(scope="module")
def front(tmp_path_factory) -> Front:
    root = tmp_path_factory.mktemp("mcp")
    config = root / "gpuplaned.toml"
    # allowed_hosts: the name a remote agent reaches this loopback front by (through a tunnel or proxy).
    config.write_text("[monitor]\nsample_interval_s = 0.2\n[detector]\ninterval_s = 0.2\n"
                      '[http]\nallowed_hosts = ["gpubox.lan"]\n')
    daemon = DaemonProcess(root / "d", "--gpus", "fake:2", "--node-name", "box", "--http", "127.0.0.1:0",
                           "--config", str(config)).start()
    try:
        daemon.wait_ready()
        url = wait_for(lambda: daemon.client().get("/api/v1/daemon")["endpoints"].get("http"), what="the front")
        specs = {"rw": (["read", "write"], None), "ro": (["read"], None),
                 "unattended": (["read", "write"], {"unattended": True}),
                 "budget": (["read", "write"], {"gpu_hours": 0.5, "max_job_hours": 2})}
        tokens = {}
        for name, (scopes, limits) in specs.items():
            body = {"name": name, "scopes": scopes, **({"limits": limits} if limits else {})}
            tokens[name] = daemon.client().post("/api/v1/tokens", body)["secret"]
        wait_for(lambda: daemon.client().get("/api/v1/nodes")["nodes"], what="the node to register")
        work = root / "work"
        work.mkdir()
        yield Front(daemon, url, tokens, work)
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


def ok(result) -> dict:
    assert not result.is_error, result.content
    body = result.structured_content
    assert list(body)[0] == "summary" and list(body)[-1] == "next_actions", list(body)
    return body


async def poll_job(client: Client, job_id: str, *states: str, limit_s: float = 60) -> dict:
    with trio.fail_after(limit_s):
        while True:
            job = ok(await client.call_tool("get_job", {"job_id": job_id}))["job"]
            if job["status"] in states:
                return job
            await trio.sleep(0.2)


async def test_tools_are_listed_with_schemas_and_annotations(front):
    async with front.client() as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == {*READ, *WRITE, *SEMANTIC, "wait_for_events"}
    for tool in tools.values():
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        assert tool.output_schema["required"][0] == "summary"
        hints = tool.annotations
        assert None not in (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint), tool.name
        assert hints.read_only_hint is (tool.name not in WRITE)
    assert tools["cancel_job"].annotations.destructive_hint is True
    assert tools["submit_job"].annotations.destructive_hint is False
    assert "dry_run" in tools["submit_job"].input_schema["properties"]
    assert tools["query_metrics"].input_schema["properties"]["max_points"]["maximum"] <= 2000


async def test_a_budgeted_token_is_refused_past_its_budget_and_its_dry_run_says_so(front):
    async with front.client("budget") as client:
        job = {"command": ["true"], "cwd": str(front.work), "gpu": 1, "timeout_s": 3600}  # 1 GPU-hour at worst
        plan = ok(await client.call_tool("submit_job", {**job, "dry_run": True}))
        assert plan["plan"]["would"] == "refuse" and plan["job"] is None
        refused = error_of(await client.call_tool("submit_job", job))
        fits = ok(await client.call_tool("submit_job", {**job, "timeout_s": 900}))  # a quarter of an hour fits
    assert refused["code"] == "forbidden" and refused["details"]["remaining_gpu_hours"] == pytest.approx(0.5)
    assert "budget" in refused["message"]
    mine = [j for j in front.daemon.client().get("/api/v1/jobs?limit=100")["jobs"] if j["timeout_s"] in (3600, 900)]
    assert [j["id"] for j in mine] == [fits["job"]["id"]]  # neither the dry run nor the refusal wrote a job


async def test_a_bad_argument_gets_the_rest_error(front):
    async with front.client() as client:
        bad = error_of(await client.call_tool("get_job", {"job_id": "run_123"}))
        unknown = error_of(await client.call_tool("get_job", {"job_id": "job_123", "extra": 1}))
        missing = error_of(await client.call_tool("get_job", {"job_id": "job_00000000000000000000000000"}))
    assert bad == {"code": "bad_request", "message": "job_id: a job id (job_...), got 'run_123'",
                   "details": {"field": "job_id"}}
    assert unknown["code"] == "bad_request" and unknown["details"] == {"field": "extra"}
    assert missing["code"] == "not_found"
    rest = httpx.get(front.url + "/api/v1/jobs/job_00000000000000000000000000",
                     headers={"Authorization": f"Bearer {front.tokens['rw']}"}).json()["error"]
    assert missing == rest


async def test_a_study_submit_poll_tail_diagnose_metrics(front):
    script = front.work / "train.py"
    script.write_text(TRAIN)
    async with front.client() as client:
        command = {"command": [sys.executable, str(script)], "cwd": str(front.work), "env": {"PYTHONPATH": SDK_DIR}}
        plan = ok(await client.call_tool("submit_job", {**command, "gpu": 1, "dry_run": True}))
        assert plan["dry_run"] is True and plan["job"] is None and plan["plan"]["would"] in ("dispatch", "queue")
        before = ok(await client.call_tool("list_jobs", {}))["jobs"]

        submitted = ok(await client.call_tool("submit_job", {**command, "name": "study", "gpu": 1}))
        task = submitted["task"]
        assert task["task_id"] == task["job_id"] == submitted["job"]["id"]
        assert 5000 <= task["poll_interval_ms"] <= 30000 and task["task_status"] == "working"
        assert {a["tool"] for a in submitted["next_actions"]} >= {"get_job", "wait_for_events"}
        assert len(ok(await client.call_tool("list_jobs", {}))["jobs"]) == len(before) + 1  # the dry run added none

        job = await poll_job(client, task["job_id"], "SUCCEEDED", "FAILED")
        assert job["status"] == "SUCCEEDED", job
        run_id = job["run_id"]

        tail = ok(await client.call_tool("tail_logs", {"job_id": job["id"], "grep": "loss|lr", "max_lines": 1}))
        assert [line["line"] for line in tail["lines"]] == ["warning: lr schedule flat"]
        assert (tail["matched"], tail["left_out"]) == (2, 1)
        bad = error_of(await client.call_tool("tail_logs", {"job_id": job["id"], "grep": "(unclosed"}))
        assert bad["code"] == "bad_request" and bad["details"]["field"] == "grep"

        summary = await wait_points(client, run_id, 3000)
        assert summary["progress"]["step"] == 2999 and "step 2999/3000" in summary["summary"]

        metrics = ok(await client.call_tool("query_metrics", {"run_id": run_id, "max_points": 50}))
        loss = metrics["series"]["train/loss"]
        assert list(loss)[0] == "stats" and len(loss["x"]) <= 50 and metrics["buckets"] <= 50
        assert loss["stats"]["count"] == 3000 and loss["stats"]["trend"] == "falling"
        curve = [2.0 * math.exp(-step / 800) + 0.01 * (step % 7) for step in range(3000)]
        assert loss["stats"]["first_step"] == 0 and loss["stats"]["max"] == pytest.approx(max(curve))
        assert loss["stats"]["min"] == pytest.approx(min(curve)) and loss["stats"]["last"] == pytest.approx(curve[-1])
        assert "train/loss" in metrics["summary"]

        diagnosis = ok(await client.call_tool("diagnose_run", {"run_id": run_id}))
        assert diagnosis["run_id"] == run_id and isinstance(diagnosis["advice"], list)
        # no primary metric here: get_best_checkpoint would fail, so it is not suggested (test_e2e_suggestions)
        assert {a["tool"] for a in diagnosis["next_actions"]} == {"list_checkpoints"}
        await checkpoints_and_evaluation(client, front, run_id)


async def checkpoints_and_evaluation(client: Client, front: Front, run_id: str) -> None:
    with trio.fail_after(30):
        while len((table := ok(await client.call_tool("list_checkpoints", {"run_id": run_id,
                                                                            "metric": "train/loss"})))
                  ["checkpoints"]) < 3:
            await trio.sleep(0.2)
    ids = [c["id"] for c in table["checkpoints"]]
    assert [c["step"] for c in table["checkpoints"]] == [1000, 2000, 2999]
    compared = ok(await client.call_tool("compare_checkpoints", {"checkpoint_ids": ids[:2]}))
    assert [c["id"] for c in compared["checkpoints"]] == ids[:2]
    best = ok(await client.call_tool("get_best_checkpoint", {"experiment_id": "e", "project": "p",
                                                             "metric": "train/loss"}))
    assert best["checkpoint"]["id"] == table["best_id"] and best["checkpoint"]["id"] in best["summary"]

    evaluate = {"checkpoint_id": best["checkpoint"]["id"], "gpu": 0,
                "command": [sys.executable, "-c", "import json, os; json.dump({'acc': 0.9}, "
                                                  "open(os.environ['GPUPLANE_EVAL_RESULT'], 'w'))"]}
    dry = ok(await client.call_tool("evaluate_checkpoint", {**evaluate, "dry_run": True}))
    assert dry["dry_run"] is True and dry["evaluation"] is None and "would be queued" in dry["summary"]
    queued = ok(await client.call_tool("evaluate_checkpoint", evaluate))
    assert queued["task"]["job_id"] == queued["job"]["id"] and queued["evaluation"]["checkpoint_id"] == evaluate[
        "checkpoint_id"]
    await poll_job(client, queued["job"]["id"], "SUCCEEDED")
    with trio.fail_after(30):
        while not (listed := ok(await client.call_tool("list_evaluations", {"checkpoint_id": evaluate[
                "checkpoint_id"]})))["evaluations"] or listed["evaluations"][0]["status"] != "SUCCEEDED":
            await trio.sleep(0.2)
    assert len(listed["evaluations"]) == 1 and listed["evaluations"][0]["metrics"] == {"acc": 0.9}
    by_experiment = ok(await client.call_tool("list_evaluations", {"experiment_id": "e", "project": "p"}))
    assert [e["id"] for e in by_experiment["evaluations"]] == [listed["evaluations"][0]["id"]]


async def wait_points(client: Client, run_id: str, count: int) -> dict:
    with trio.fail_after(30):
        while True:
            summary = ok(await client.call_tool("get_run_summary", {"run_id": run_id}))
            if summary["metrics"].get("train/loss", {}).get("count") == count:
                return summary
            await trio.sleep(0.2)


async def test_wait_for_events_times_out_then_wakes_without_gaps(front):
    async with front.client("ro") as client:
        listed = ok(await client.call_tool("list_events", {"limit": 1}))
        cursor = listed["cursor"]
        notes: list[str] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            notes.append(message or "")

        # Past the 15 s progress period, so the wait sends a note while it waits.
        with trio.fail_after(30):
            quiet = ok(await client.call_tool("wait_for_events", {"cursor": cursor, "types": ["USER_EVENT"],
                                                                  "timeout_s": 15.5}, progress_callback=progress))
        assert quiet["timed_out"] is True and quiet["events"] == [] and quiet["cursor"] == cursor
        assert len(notes) == 1 and notes[0].startswith("Waiting.")

        async with front.client("rw") as writer:
            async def submit_later() -> None:
                await trio.sleep(0.5)
                ok(await writer.call_tool("submit_job", {"command": ["sh", "-c", "exit 3"], "cwd": str(front.work),
                                                         "gpu": 0, "name": "fails"}))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(submit_later)
                with trio.fail_after(30):
                    woke = ok(await client.call_tool("wait_for_events", {"cursor": cursor, "types": ["JOB_FAILED"],
                                                                         "timeout_s": 25}))
        assert woke["timed_out"] is False and [e["type"] for e in woke["events"]] == ["JOB_FAILED"]
        assert woke["cursor"] == woke["events"][-1]["id"]
        assert "explain_failure" in {a["tool"] for a in woke["next_actions"]}
        failed = woke["events"][0]["job_id"]
        explained = ok(await client.call_tool("explain_failure", {"job_id": failed}))
        assert explained["cause"] != "none" and explained["summary"]
        async with front.client("rw") as writer:
            dry = ok(await writer.call_tool("retry_job", {"job_id": failed, "dry_run": True}))
            assert dry["dry_run"] is True and "would be queued again" in dry["summary"]
            again = ok(await writer.call_tool("retry_job", {"job_id": failed}))
            assert again["task"]["job_id"] == failed
            done = await poll_job(writer, failed, "FAILED")
            assert done["attempt"] == 2
        runs = front.daemon.client().get(f"/api/v1/runs?job_id={failed}")["runs"]
        compared = ok(await client.call_tool("compare_runs", {"run_ids": [r["id"] for r in runs]}))
        assert [r["id"] for r in compared["runs"]] == [r["id"] for r in runs]
        node = ok(await client.call_tool("get_node_status", {"node": "box"}))
        assert node["node"]["name"] == "box" and "box is ONLINE" in node["summary"]

        # Every event after the first cursor, resumed wait by wait, is the log itself: no gap, no repeat.
        seen, at = [], cursor
        for _ in range(20):
            step = ok(await client.call_tool("wait_for_events", {"cursor": at, "limit": 2, "timeout_s": 0}))
            if step["timed_out"]:
                break
            seen += [e["id"] for e in step["events"]]
            at = step["cursor"]
        logged = front.daemon.client().get("/api/v1/events?limit=200")["events"]
        ids = [e["id"] for e in reversed(logged)]
        after = ids[ids.index(cursor) + 1:] if cursor != "0" else ids
        assert seen == after[:len(seen)] and len(seen) == len(set(seen)) >= 1

        stale = error_of(await client.call_tool("wait_for_events", {"cursor": "ev_nope", "timeout_s": 0}))
        assert stale["details"] == {"field": "cursor"}


async def test_a_read_only_token_cannot_write(front):
    async with front.client("ro") as client:
        refused = error_of(await client.call_tool("submit_job", {"command": ["true"], "cwd": str(front.work)}))
        assert ok(await client.call_tool("list_nodes", {}))["nodes"][0]["name"] == "box"
        # Every write tool, whatever its arguments: the scope is checked first.
        others = {name: error_of(await client.call_tool(name, {"sweep_id": "swp_x", "job_id": "job_x"}))
                  for name in WRITE}
    assert refused["code"] == "forbidden" and refused["details"]["needed"] == "write"
    assert "'write'" in refused["message"]
    assert {name: e["code"] for name, e in others.items()} == dict.fromkeys(WRITE, "forbidden")


def test_no_token_is_a_401_without_a_challenge(front):
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    bare = httpx.post(front.url + "/mcp", json=call, headers=headers)
    wrong = httpx.post(front.url + "/mcp", json=call, headers={**headers, "Authorization": "Bearer nope"})
    in_url = httpx.post(front.url + "/mcp?token=" + front.tokens["rw"], json=call, headers=headers)
    for reply in (bare, wrong):
        assert reply.status_code == 401, reply.text
        assert "www-authenticate" not in reply.headers
        assert reply.json()["error"]["code"] == "unauthorized"
    assert in_url.status_code == 400 and "Authorization header" in in_url.json()["error"]["message"]
    # A browser's cookie alone does not drive MCP.
    cookie = httpx.post(front.url + "/mcp", json=call, headers=headers, cookies={"gpuplane_session": "x" * 43})
    assert cookie.status_code == 401
    # POST /mcp answers there, no redirect, by any Host the front answers to; /mcp/ is not it.
    authed = httpx.post(front.url + "/mcp", json=INITIALIZE, headers={**headers, "Host": "gpubox.lan:8443",
                                                                      "Authorization": f"Bearer {front.tokens['ro']}"})
    assert authed.status_code == 200, authed.text
    assert httpx.post(front.url + "/mcp/", json=call, headers=headers).status_code in (401, 404)


@pytest.mark.parametrize("mode, version", [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
async def test_both_protocol_eras(front, mode, version):
    async with front.client("ro", mode=mode) as client:
        assert client.protocol_version == version
        capabilities = client.server_capabilities
        if mode == "auto":  # the Tasks extension, as each era says it
            assert "io.modelcontextprotocol/tasks" in (capabilities.extensions or {})
        else:
            assert capabilities.tasks is not None and capabilities.tasks.list is not None
        nodes = ok(await client.call_tool("list_nodes", {}))
        assert nodes["nodes"][0]["name"] == "box" and nodes["summary"].startswith("1 node(s)")


async def _running_job(front: Front, name: str, token: str = "rw") -> str:
    async with front.client(token) as client:
        body = ok(await client.call_tool("submit_job", {"command": ["sleep", "60"], "cwd": str(front.work),
                                                        "gpu": 0, "name": name}))
        await poll_job(client, body["job"]["id"], "RUNNING")
        return body["job"]["id"]


async def test_cancel_asks_for_confirmation(front):
    asked: list[str] = []

    def answer(action: str, confirm: bool):
        async def callback(context, params):
            asked.append(params.message)
            return types.ElicitResult(action=action, content={"confirm": confirm} if action == "accept" else None)
        return callback

    job_id = await _running_job(front, "to-cancel")
    async with front.client(elicitation_callback=answer("decline", False)) as client:
        declined = error_of(await client.call_tool("cancel_job", {"job_id": job_id}))
        assert declined["details"]["reason"] == "declined"
        assert ok(await client.call_tool("get_job", {"job_id": job_id}))["job"]["status"] == "RUNNING"
        dry = ok(await client.call_tool("cancel_job", {"job_id": job_id, "dry_run": True}))  # no question
        assert dry["dry_run"] is True and "would be cancelled" in dry["summary"]
    async with front.client(elicitation_callback=answer("accept", True)) as client:
        done = ok(await client.call_tool("cancel_job", {"job_id": job_id}))
        assert done["task"]["job_id"] == job_id
        await poll_job(client, job_id, "CANCELLED")
    assert len(asked) == 2 and job_id in asked[0]

    other = await _running_job(front, "no-elicitation", "unattended")
    async with front.client() as client:  # no elicitation callback: it cannot be asked
        mine = await _running_job(front, "mine")
        refused = error_of(await client.call_tool("cancel_job", {"job_id": mine}))
        assert refused["details"]["reason"] == "confirmation_required"
        assert "unattended" in refused["message"] and "gpuplanectl job cancel" in refused["message"]
        assert ok(await client.call_tool("get_job", {"job_id": mine}))["job"]["status"] == "RUNNING"
    front.daemon.client().post(f"/api/v1/jobs/{mine}/cancel", {})
    # 2025-11-25: asked in the client's session, in the middle of the call.
    async with front.client(mode="legacy", elicitation_callback=answer("decline", False)) as client:
        assert error_of(await client.call_tool("cancel_job", {"job_id": other}))["details"]["reason"] == "declined"
    legacy = await _running_job(front, "legacy-confirm")
    async with front.client(mode="legacy", elicitation_callback=answer("accept", True)) as client:
        assert ok(await client.call_tool("cancel_job", {"job_id": legacy}))["task"]["job_id"] == legacy
        await poll_job(client, legacy, "CANCELLED")
    async with front.client(mode="legacy") as client:  # declared no elicitation
        refused = error_of(await client.call_tool("cancel_job", {"job_id": other}))
        assert refused["details"]["reason"] == "confirmation_required" and "no elicitation" in refused["message"]
    assert len(asked) == 4 and legacy in asked[3]
    async with front.client("unattended") as client:
        ok(await client.call_tool("cancel_job", {"job_id": other}))
        await poll_job(client, other, "CANCELLED")


async def test_the_summary_resource_and_the_study_prompt(front):
    async with front.client() as client:
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["gpuplane://runs/{run_id}/summary"]
        job = front.daemon.client().post("/api/v1/jobs", {"command": ["true"], "cwd": str(front.work)})["job"]
        run_id = wait_for(lambda: front.daemon.client().get(f"/api/v1/jobs/{job['id']}")["job"]["run_id"],
                          what="the job's run")
        read = await client.read_resource(f"gpuplane://runs/{run_id}/summary")
        assert json.loads(read.contents[0].text)["run_id"] == run_id
        prompts = (await client.list_prompts()).prompts
        assert [p.name for p in prompts] == ["study", "run_sweep_safely"]
        study = await client.get_prompt("study", {"goal": "tune lr"})
        text = study.messages[0].content.text
        assert "wait_for_events" in text and "tune lr" in text and "no limits" in text


async def test_the_sweep_playbook_is_a_prompt_and_a_resource(front):
    """Issue 31 item 7: "run a sweep safely", as a prompt (with the token's budget) and a resource;
    not a skill, which the pinned SDK does not serve (gpuplaned/mcp/playbooks.py)."""
    async with front.client("budget") as client:
        [resource] = (await client.list_resources()).resources
        assert (str(resource.uri), resource.mime_type) == ("gpuplane://playbooks/run-a-sweep-safely", "text/markdown")
        [read] = (await client.read_resource(str(resource.uri))).contents
        assert read.text.startswith("# Run a sweep safely") and read.mime_type == "text/markdown"
        for step in ("dry_run: true", "worst_case_gpu_hours", "max_parallel", "get_sweep", "early_stop", "cancel_sweep"):
            assert step in read.text, step
        prompt = await client.get_prompt("run_sweep_safely", {"goal": "tune dropout"})
        text = prompt.messages[0].content.text
        assert text.startswith(read.text) and "gpu_hours=0.5" in text and "tune dropout" in text
        with pytest.raises(Exception, match="no prompt 'nope' \\(there are: study, run_sweep_safely\\)"):
            await client.get_prompt("nope")


def test_the_control_socket_serves_mcp_to_the_trusted_user(front):
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "list_nodes", "arguments": {}}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": "2025-11-25"}
    transport = httpx.HTTPTransport(uds=str(front.daemon.socket_path))
    with httpx.Client(transport=transport, base_url="http://gpuplaned") as local:
        opened = local.post("/mcp", json=INITIALIZE, headers=headers)  # no token: the socket's user is trusted
        assert opened.status_code == 200, opened.text
        headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
        reply = local.post("/mcp", json=call, headers=headers)
    assert reply.status_code == 200, reply.text
    data = next(json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")) \
        if reply.headers["content-type"].startswith("text/event-stream") else reply.json()
    assert data["result"]["structuredContent"]["nodes"][0]["name"] == "box"


async def test_every_tool_call_is_audited(front):
    async with front.client() as client:
        ok(await client.call_tool("list_nodes", {}))
        ok(await client.call_tool("submit_job", {"command": ["true"], "cwd": str(front.work), "dry_run": True}))
        error_of(await client.call_tool("get_job", {"job_id": "job_00000000000000000000000001"}))
    async with front.client("ro") as reader:
        error_of(await reader.call_tool("submit_job", {"command": ["true"], "cwd": str(front.work)}))
    audit = front.daemon.client().get("/api/v1/audit?limit=500")
    entries = audit.get("entries") or audit.get("audit") or next(v for v in audit.values() if isinstance(v, list))
    mcp = [e for e in entries if e.get("via") == "mcp"]
    assert {"list_nodes", "submit_job", "get_job"} <= {e["action"] for e in mcp}
    assert any(e["outcome"] == "forbidden" for e in mcp)


INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe",
                                                                                            "version": "1"}}}


def _answer(reply: httpx.Response) -> dict:
    if reply.headers["content-type"].startswith("text/event-stream"):
        return [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")][-1]
    return reply.json()


def legacy_headers(front: Front, token: str = "rw", *, session: bool = True) -> dict[str, str]:
    """What a 2025-11-25 client sends: its token and, after its initialize, its session."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": "2025-11-25", "Authorization": f"Bearer {front.tokens[token]}"}
    if not session:
        return headers
    opened = httpx.post(front.url + "/mcp", json=INITIALIZE, headers=headers, timeout=30)
    assert opened.status_code == 200, opened.text
    headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
    done = httpx.post(front.url + "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                      headers=headers, timeout=30)
    assert done.status_code == 202, done.text
    return headers


def rpc(front: Front, method: str, params: dict, token: str = "rw") -> dict:
    """One JSON-RPC request to /mcp as a 2025-11-25 client sends it, in a session of its own."""
    reply = httpx.post(front.url + "/mcp", json={"jsonrpc": "2.0", "id": 7, "method": method, "params": params},
                       headers=legacy_headers(front, token), timeout=30)
    assert reply.status_code == 200, reply.text
    return _answer(reply)


def test_a_session_belongs_to_the_caller_that_opened_it(front):
    mine = legacy_headers(front, "rw")
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    assert httpx.post(front.url + "/mcp", json=call, headers=mine, timeout=30).status_code == 200
    theirs = {**mine, "Authorization": f"Bearer {front.tokens['ro']}"}
    stolen = httpx.post(front.url + "/mcp", json=call, headers=theirs, timeout=30)
    assert stolen.status_code == 404 and "no such MCP session" in stolen.json()["error"]["message"]
    outside = httpx.post(front.url + "/mcp", json=call, headers=legacy_headers(front, session=False), timeout=30)
    assert outside.status_code == 400 and "session" in outside.text.lower()


def test_a_task_augmented_call_answers_with_the_task(front):
    """2025-11-25: tools/call with params.task answers CreateTaskResult; tasks/get follows the
    job, tasks/list lists it, tasks/result waits for its end and answers what get_job says."""
    opened = httpx.post(front.url + "/mcp", json=INITIALIZE, headers=legacy_headers(front, session=False), timeout=30)
    hello = _answer(opened)["result"]
    assert hello["capabilities"]["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    declared = {t["name"]: t.get("execution") for t in rpc(front, "tools/list", {})["result"]["tools"]}
    assert declared["submit_job"] == {"taskSupport": "optional"} and declared["get_job"] is None

    call = {"name": "submit_job", "arguments": {"command": ["sh", "-c", "sleep 1"], "cwd": str(front.work),
                                                "gpu": 0, "name": "as-task"}, "task": {"ttl": 60000}}
    created = rpc(front, "tools/call", call)["result"]
    assert set(created) == {"task", "_meta"}, created  # CreateTaskResult: no content, no structuredContent
    task = created["task"]
    job_id = task["taskId"]
    assert job_id.startswith("job_") and task["status"] == "working" and task["ttl"] is None
    assert 5000 <= task["pollInterval"] <= 30000 and task["createdAt"].endswith("+00:00")
    assert created["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": job_id}
    assert rpc(front, "tasks/get", {"taskId": job_id}, token="ro")["result"]["taskId"] == job_id
    assert job_id in [t["taskId"] for t in rpc(front, "tasks/list", {})["result"]["tasks"]]

    payload = rpc(front, "tasks/result", {"taskId": job_id})["result"]  # waits for the end (the job sleeps 1 s)
    assert payload["structuredContent"]["job"]["id"] == job_id
    assert payload["structuredContent"]["job"]["status"] == "SUCCEEDED"
    assert rpc(front, "tasks/get", {"taskId": job_id})["result"]["statusMessage"] == "Succeeded."

    refused = rpc(front, "tasks/cancel", {"taskId": job_id}, token="ro")["error"]
    assert refused["data"]["code"] == "forbidden"
    missing = rpc(front, "tasks/get", {"taskId": "job_nope"})["error"]
    assert missing["data"]["code"] == "not_found"


@pytest.mark.parametrize("call, words", [
    ({"name": "get_job", "arguments": {"job_id": "job_x"}}, "does not run as a task"),
    ({"name": "submit_job", "arguments": {"command": ["true"], "cwd": "/", "dry_run": True}}, "makes no task"),
    ({"name": "submit_job", "arguments": {"command": [], "cwd": "/"}}, "failed before any task"),
])
def test_a_task_augmented_call_that_makes_no_task_is_refused(front, call, words):
    jobs_before = len(front.daemon.client().get("/api/v1/jobs?limit=100")["jobs"])
    error = rpc(front, "tools/call", {**call, "task": {}})["error"]
    assert words in error["message"], error
    assert len(front.daemon.client().get("/api/v1/jobs?limit=100")["jobs"]) == jobs_before


class TaskCreated(types.Result):
    """The Tasks extension's answer to tools/call (SEP-2663): the task itself, flattened."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval: int | None = None


class DetailedTask(types.Result):
    task_id: str
    status: str
    result: dict | None = None


class TasksExtension(ClientExtension):
    """A client's side of io.modelcontextprotocol/tasks: take the task, poll tasks/get at the
    interval the server asks, hand back the final result."""

    identifier = "io.modelcontextprotocol/tasks"

    def __init__(self) -> None:
        self.created: list[TaskCreated] = []
        self.polls = 0

    def claims(self):
        return [ResultClaim(result_type="task", model=TaskCreated, resolve=self.resolve)]

    async def resolve(self, created: TaskCreated, ctx) -> types.CallToolResult:
        self.created.append(created)
        while True:
            self.polls += 1
            task = await ctx.session.send_request(
                types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=created.task_id)), DetailedTask)
            if task.status != "working":
                assert task.result is not None, task
                return types.CallToolResult.model_validate(task.result)
            await trio.sleep(0.2)  # a test's poll; the server asks for created.poll_interval


async def test_a_modern_client_with_the_tasks_extension_gets_the_task(front):
    """2026-07-28: a client that declares the extension gets the task from submit_job (the
    server decides), follows it with tasks/get, and reads the final result there; one that
    does not gets the plain result."""
    tasks = TasksExtension()
    async with front.client(extensions=[tasks]) as client:
        assert client.protocol_version == "2026-07-28"
        ended = await client.call_tool("submit_job", {"command": ["sh", "-c", "sleep 1"], "cwd": str(front.work),
                                                      "gpu": 0, "name": "modern-task"})
        body = ok(ended)
        assert body["job"]["status"] == "SUCCEEDED", body
        created = tasks.created[0]
        assert created.task_id == body["job"]["id"] and created.status == "working"
        assert 5000 <= created.poll_interval <= 30000 and tasks.polls >= 2
        # Reads make no task, whatever the client declared.
        assert ok(await client.call_tool("get_job", {"job_id": created.task_id}))["job"]["id"] == created.task_id
        assert len(tasks.created) == 1
    async with front.client() as plain:
        answer = ok(await plain.call_tool("submit_job", {"command": ["true"], "cwd": str(front.work), "gpu": 0}))
        assert answer["task"]["task_id"] == answer["job"]["id"]


HOSTILE_BODIES = {
    "not json": b"{not json",
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "huge": b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_job","arguments":{"job_id":"'
            + b"x" * (2 << 20) + b'"}}}',
    "not an object": b"42",
    "control characters": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "tail_logs", "arguments": {"job_id": "job_\x00\x1b[31m", "grep": "\x00"}}}).encode(),
    "unknown method": b'{"jsonrpc":"2.0","id":1,"method":"rm -rf","params":{}}',
    "wrong types": b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["get_job"],"arguments":7}}',
}


@pytest.mark.parametrize("what", sorted(HOSTILE_BODIES))
def test_hostile_bodies_get_a_clear_refusal_and_change_nothing(front, what):
    """Every port is hostile: /mcp answers bad input with an error naming it (HTTP 4xx, or a
    JSON-RPC error / a tool error), never a 5xx, and the daemon goes on serving."""
    jobs_before = len(front.daemon.client().get("/api/v1/jobs?limit=100")["jobs"])
    headers = legacy_headers(front)
    reply = httpx.post(front.url + "/mcp", content=HOSTILE_BODIES[what], headers=headers, timeout=30)
    assert reply.status_code < 500, (reply.status_code, reply.text[:500])
    if what == "huge":
        assert reply.status_code == 413, reply.text[:500]  # over 1 MiB, as on the REST API
    if reply.status_code == 200:
        text = reply.text
        messages = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")] \
            if reply.headers["content-type"].startswith("text/event-stream") else [reply.json()]
        last = messages[-1]
        assert "error" in last or last["result"].get("isError") is True, last
    assert len(front.daemon.client().get("/api/v1/jobs?limit=100")["jobs"]) == jobs_before
    assert httpx.get(front.url + "/api/v1/daemon", headers=headers, timeout=10).status_code == 200
