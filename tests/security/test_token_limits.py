"""A limited capability token cannot escape its limits through another path (issue 29 item 6):
a checkpoint's evaluation (REST and MCP) is admitted as a submit is (GPUs, directories, the
budget and its timeout, the token recorded and charged); a limited token may not drain,
undrain or forget a node, nor prune the checkpoints of a run whose job it did not submit.
A real daemon (fake GPUs), its TCP front and real tokens; an unlimited write token is unaffected."""

from __future__ import annotations

import json
import sqlite3
import sys

import httpx
import pytest
import trio
from helpers import jobs_with_front, wait_for
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_http import closing_client

pytestmark = pytest.mark.e2e

WAIT_FOR_STOP = [sys.executable, "-c", "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("limits")
    with jobs_with_front(root) as (jobs, url):
        yield jobs, url, root


def token(jobs, name, limits=None):
    body = {"name": name, "scopes": ["read", "write"], **({"limits": limits} if limits else {})}
    secret = jobs.client.post("/api/v1/tokens", body)["secret"]
    [row] = [t for t in jobs.client.get("/api/v1/tokens")["tokens"] if t["name"] == name]
    return secret, row["id"]


def post(url, secret, path, body):
    return httpx.post(url + path, json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=10)


def job_row(jobs, job_id):
    """The token recorded as the job's submitter, its GPUs and its timeout."""
    with sqlite3.connect(jobs.daemon.home / "gpuplane.db") as conn:
        [token_id] = conn.execute("SELECT token_id FROM jobs WHERE id = ?", (job_id,)).fetchone()
    job = jobs.get(job_id)
    return token_id, job["gpu"], job["timeout_s"]


def count(jobs, table):
    with sqlite3.connect(jobs.daemon.home / "gpuplane.db") as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def checkpoint(jobs, name):
    """A checkpoint (its file real) of a run of a job the trusted socket submitted; (its id, the run's id)."""
    job = jobs.submit([*WAIT_FOR_STOP, f"{name}.stop"], gpu=0, name=name)
    run_id = jobs.wait(job["id"], "RUNNING")["run_id"]
    session = jobs.client.post("/api/v1/sessions", {"run_id": run_id, "project": "p", "experiment": name})
    path = jobs.workdir / f"{name}.pt"
    path.write_bytes(b"weights")
    jobs.client.post(f"/api/v1/sessions/{session['session_id']}/batches",
                     {"seq": 0, "metrics": {}, "checkpoints": [{"path": str(path), "step": 1}]})
    listed = jobs.client.get(f"/api/v1/runs/{run_id}/checkpoints")["checkpoints"]
    (jobs.workdir / f"{name}.stop").touch()  # the run's job ends; its checkpoint stays
    jobs.wait(job["id"])
    return listed[0]["id"], run_id


def test_a_limited_tokens_evaluation_is_admitted_as_its_submit_is(env):
    jobs, url, root = env
    work = str(jobs.workdir)
    ck, _run = checkpoint(jobs, "evaluated")
    secret, token_id = token(jobs, "evaluator", {"max_gpus_per_job": 1, "allowed_dirs": [work], "gpu_hours": 1.0})
    base = {"command": ["sleep", "30"], "cwd": work, "gpu": 1, "timeout_s": 60}
    evaluate = f"/api/v1/checkpoints/{ck}/evaluations"
    before = count(jobs, "jobs"), count(jobs, "evaluations")
    for change, limit in (({"gpu": 2}, "max_gpus_per_job"), ({"cwd": "/"}, "allowed_dirs"),
                          ({"timeout_s": None}, "budget"), ({"timeout_s": 7200}, "budget")):
        for path in ("/api/v1/jobs", evaluate):  # the same refusal on both paths
            reply = post(url, secret, path, {**base, **change})
            assert reply.status_code == 403, (path, change, reply.text)
            assert reply.json()["error"]["details"]["limit"] == limit, reply.text
    assert (count(jobs, "jobs"), count(jobs, "evaluations")) == before  # nothing written
    # Within its limits: queued, recorded as the token's, and charged to its budget.
    queued = post(url, secret, evaluate, {**base, "timeout_s": 2700})  # 0.75 GPU-hour at worst
    assert queued.status_code == 201, queued.text
    eval_job = queued.json()["job"]["id"]
    assert job_row(jobs, eval_job)[0] == token_id
    over = post(url, secret, "/api/v1/jobs", {**base, "timeout_s": 1800}).json()["error"]  # 0.5 more: over
    assert over["details"]["limit"] == "budget" and over["details"]["remaining_gpu_hours"] <= 0.25
    assert post(url, secret, f"/api/v1/jobs/{eval_job}/cancel", {}).status_code == 200  # its own job


def test_a_limited_tokens_evaluation_without_a_timeout_gets_its_max_job_hours(env):
    jobs, url, _root = env
    ck, _run = checkpoint(jobs, "bounded")
    secret, token_id = token(jobs, "bounded", {"max_job_hours": 0.5})
    queued = post(url, secret, f"/api/v1/checkpoints/{ck}/evaluations", {"command": ["true"], "gpu": 0})
    assert queued.status_code == 201, queued.text
    assert job_row(jobs, queued.json()["job"]["id"]) == (token_id, 0, 1800)
    # An unlimited write token keeps today's behaviour: 2 GPUs, cwd /, no timeout, no token limits.
    free, free_id = token(jobs, "free-evaluator")
    reply = post(url, free, f"/api/v1/checkpoints/{ck}/evaluations",
                 {"command": ["true"], "gpu": 2, "cwd": "/", "timeout_s": None})
    assert reply.status_code == 201, reply.text
    assert job_row(jobs, reply.json()["job"]["id"]) == (free_id, 2, None)


async def test_mcp_evaluate_checkpoint_is_admitted_as_submit_is(env):
    jobs, url, _root = env
    ck, _run = await trio.to_thread.run_sync(checkpoint, jobs, "mcp")
    secret, token_id = await trio.to_thread.run_sync(
        lambda: token(jobs, "mcp-evaluator", {"max_gpus_per_job": 1, "gpu_hours": 1.0, "max_job_hours": 0.25}))
    async with closing_client(headers={"Authorization": f"Bearer {secret}"}, timeout=70) as http, \
            Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
        base = {"checkpoint_id": ck, "command": ["true"], "cwd": str(jobs.workdir)}
        refused = await client.call_tool("evaluate_checkpoint", {**base, "gpu": 2})
        queued = await client.call_tool("evaluate_checkpoint", {**base, "gpu": 1})
    assert refused.is_error
    error = json.loads(refused.content[0].text)["error"]
    assert error["code"] == "forbidden" and error["details"]["limit"] == "max_gpus_per_job"
    assert not queued.is_error, queued.content
    job_id = queued.structured_content["job"]["id"]
    assert job_row(jobs, job_id) == (token_id, 1, 900)  # no timeout asked: its max_job_hours


def test_a_limited_token_may_not_change_nodes(env):
    jobs, url, _root = env
    secret, _ = token(jobs, "no-nodes", {"max_gpus_per_job": 1})
    for action, call in (("drain", lambda: post(url, secret, "/api/v1/nodes/n1/drain", {})),
                         ("undrain", lambda: post(url, secret, "/api/v1/nodes/n1/undrain", {})),
                         ("forget", lambda: httpx.delete(url + "/api/v1/nodes/n1", timeout=10,
                                                         headers={"Authorization": f"Bearer {secret}"}))):
        reply = call()
        assert reply.status_code == 403, (action, reply.text)
        message = reply.json()["error"]["message"]
        assert f"may not {action} node n1" in message and "no-nodes" in message
    [node] = jobs.client.get("/api/v1/nodes")["nodes"]
    assert node["accepting"] is True  # nothing changed
    free, _ = token(jobs, "node-admin")
    assert post(url, free, "/api/v1/nodes/n1/drain", {}).status_code == 200
    assert post(url, free, "/api/v1/nodes/n1/undrain", {}).status_code == 200


def test_a_limited_token_prunes_only_its_own_runs(env):
    jobs, url, _root = env
    _ck, others = checkpoint(jobs, "pruned")
    secret, _ = token(jobs, "pruner", {"max_gpus_per_job": 1})
    refused = post(url, secret, f"/api/v1/runs/{others}/checkpoints/prune", {"dry_run": False})
    assert refused.status_code == 403, refused.text
    assert others in refused.json()["error"]["message"] and refused.json()["error"]["details"]["run_id"] == others
    assert [c["deleted_at"] for c in jobs.client.get(f"/api/v1/runs/{others}/checkpoints")["checkpoints"]] == [None]
    mine = post(url, secret, "/api/v1/jobs", {"command": ["true"], "cwd": str(jobs.workdir), "gpu": 0})
    assert mine.status_code == 201, mine.text
    run_id = jobs.wait(mine.json()["job"]["id"])["run_id"]
    own = post(url, secret, f"/api/v1/runs/{run_id}/checkpoints/prune", {"dry_run": True})
    assert own.status_code == 200, own.text
    free, _ = token(jobs, "free-pruner")
    assert post(url, free, f"/api/v1/runs/{others}/checkpoints/prune", {"dry_run": True}).status_code == 200


POLICY_JOB = """
import os, time, gpuplane
run = gpuplane.init(project="p", experiment="policy")
for step in (1, 2):
    with open(f"ck{step}.pt", "wb") as f:
        f.write(b"weights")
    run.log_checkpoint(os.path.abspath(f"ck{step}.pt"), step=step)
run.finish()
"""


def test_a_limited_tokens_evaluate_policy_queues_as_the_token(env):
    """The evaluate policy of a limited token's job queues its evaluations as that token's
    own: recorded as its jobs, shaped by its limits, and none past its budget."""
    jobs, url, root = env
    work = jobs.workdir
    (work / "policy_job.py").write_text(POLICY_JOB)
    secret, token_id = token(jobs, "policy", {"max_job_hours": 0.25, "gpu_hours": 0.6})
    submitted = post(url, secret, "/api/v1/jobs", {
        "command": [sys.executable, "policy_job.py"], "cwd": str(work), "gpu": 1, "timeout_s": 900,
        "name": "policy", "evaluate": {"every": "each", "command": ["true", "{checkpoint}"]}})
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["job"]["id"]
    assert jobs.wait(job_id, timeout=60)["status"] == "SUCCEEDED"
    run_id = jobs.get(job_id)["run_id"]
    checkpoints = wait_for(lambda: (lambda c: c if len(c) == 2 else None)(
        jobs.client.get(f"/api/v1/runs/{run_id}/checkpoints")["checkpoints"]), what="both checkpoints")
    evaluations = [e for ck in checkpoints for e in jobs.client.get(f"/api/v1/checkpoints/{ck['id']}/evaluations")
                   ["evaluations"]]
    # 0.25 GPU-hour for the job, 0.25 (its max_job_hours) for the first evaluation; a second is over 0.6.
    assert len(evaluations) == 1, evaluations
    token_of, gpu, timeout_s = job_row(jobs, evaluations[0]["job_id"])
    assert (token_of, gpu, timeout_s) == (token_id, 1, 900)


def test_a_limited_token_may_not_change_the_queue_for_everyone(env):
    """Groups and queue control (issue 31 item 2): a limited token may not set a group's limit,
    pause or resume a group or the queue, or clean; it changes the priority of, and removes,
    only the jobs it submitted."""
    jobs, url, root = env
    work = str(jobs.workdir)
    secret, _ = token(jobs, "queue-limited", {"max_gpus_per_job": 1})
    headers = {"Authorization": f"Bearer {secret}"}
    jobs.client.post("/api/v1/queue/pause")  # the user's: both jobs below stay queued
    try:
        mine = post(url, secret, "/api/v1/jobs", {"command": ["true"], "cwd": work, "gpu": 0, "timeout_s": 60,
                                                  "group": "limited"}).json()["job"]
        theirs = jobs.submit(["true"], gpu=0, group="limited")
        for method, path, body in (("PUT", "/api/v1/groups/limited", {"parallel": 1}),
                                   ("POST", "/api/v1/groups/limited/pause", None),
                                   ("POST", "/api/v1/queue/resume", None),
                                   ("POST", "/api/v1/jobs:clean", {}),
                                   ("POST", f"/api/v1/jobs/{theirs['id']}/priority", {"priority": 5}),
                                   ("POST", f"/api/v1/jobs/{theirs['id']}/remove", None)):
            reply = httpx.request(method, url + path, json=body, headers=headers, timeout=10)
            assert reply.status_code == 403, (path, reply.text)
        assert jobs.client.get("/api/v1/queue") == {"paused": True}
        assert (jobs.get(theirs["id"])["status"], jobs.get(theirs["id"])["priority"]) == ("QUEUED", 0)
        own = httpx.post(url + f"/api/v1/jobs/{mine['id']}/priority", json={"priority": 5}, headers=headers,
                         timeout=10)
        assert own.status_code == 200 and own.json()["job"]["priority"] == 5, own.text
        gone = httpx.post(url + f"/api/v1/jobs/{mine['id']}/remove", headers=headers, timeout=10)
        assert gone.status_code == 200 and gone.json()["removed"] == [mine["id"]], gone.text
    finally:
        jobs.client.post("/api/v1/queue/resume")
    assert jobs.wait(theirs["id"])["status"] == "SUCCEEDED"
