"""Batch submit (issue 31 item 5): ``POST /api/v1/jobs:batch`` queues many jobs in one request
and one transaction, all or none, each refused entry named; idempotent with Idempotency-Key; a
budgeted token's batch must fit its budget together. A real daemon (fake GPUs), its TCP front,
real tokens and its SQLite file."""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest
from helpers import jobs_with_front

from gpuplaned.protocol.batch_wire import MAX_BATCH_JOBS

pytestmark = pytest.mark.e2e

BATCH = "/api/v1/jobs:batch"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("batch")
    with jobs_with_front(root) as (jobs, url):
        yield jobs, url


def token(jobs, name, limits=None):
    body = {"name": name, "scopes": ["read", "write"], **({"limits": limits} if limits else {})}
    return jobs.client.post("/api/v1/tokens", body)["secret"]


def post(url, secret, body, key=None):
    headers = {"Authorization": f"Bearer {secret}", **({"Idempotency-Key": key} if key else {})}
    return httpx.post(url + BATCH, json=body, headers=headers, timeout=30)


def stored_jobs(jobs) -> int:
    with sqlite3.connect(jobs.daemon.home / "gpuplane.db") as conn:
        return conn.execute("SELECT count(*) FROM jobs").fetchone()[0]


def entry(jobs, name, **fields):
    return {"command": ["true"], "cwd": str(jobs.workdir), "gpu": 0, "name": name, **fields}


def test_a_batch_that_fits_is_queued_whole_in_its_order_and_runs(env):
    jobs, url = env
    secret = token(jobs, "sweeper")
    before = stored_jobs(jobs)
    reply = post(url, secret, {"jobs": [entry(jobs, f"trial-{i}", env={"TRIAL": str(i)}) for i in range(5)]})
    assert reply.status_code == 201, reply.text
    queued = reply.json()["jobs"]
    assert [j["name"] for j in queued] == [f"trial-{i}" for i in range(5)]
    # Their ids rise in the body's order, which is how the queue orders jobs of one priority and time.
    assert [j["id"] for j in queued] == sorted(j["id"] for j in queued)
    assert [j["env"] for j in queued] == [{"TRIAL": str(i)} for i in range(5)]  # a writer sees its values
    assert stored_jobs(jobs) == before + 5
    for job in queued:  # queued for real: they are dispatched and run
        assert jobs.wait(job["id"])["status"] == "SUCCEEDED"


def test_one_bad_entry_among_a_hundred_refuses_all_naming_each_bad_one(env):
    jobs, url = env
    secret = token(jobs, "careless")
    before = stored_jobs(jobs)
    body = [entry(jobs, f"t{i}") for i in range(100)]
    body[37] = entry(jobs, "t37", gpu=99)  # past the field's bound: the body's own validation
    body[58] = entry(jobs, "t58", gpu=8)  # no node could ever run it: the queue's admission
    body[80] = entry(jobs, "t80", after={"ids": ["job_01JNOSUCHJOB0000000000000"]})  # its dependency
    reply = post(url, secret, {"jobs": body})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == "bad_request"
    refused = error["details"]["refused"]
    assert [(r["index"], r["field"], r["code"]) for r in refused] == [
        (37, "gpu", "bad_request"), (58, "gpu", "bad_request"), (80, "after", "bad_request")]
    assert "job_01JNOSUCHJOB0000000000000" in refused[2]["message"]
    assert error["message"].startswith("3 of 100 job(s) refused, so none was queued; the first, jobs[37]")
    assert stored_jobs(jobs) == before  # nothing written: not even the 97 good ones


def test_an_idempotency_key_replays_the_batch_and_refuses_another_body(env):
    jobs, url = env
    secret = token(jobs, "retrier")
    before = stored_jobs(jobs)
    body = {"jobs": [entry(jobs, f"r{i}") for i in range(3)]}
    first = post(url, secret, body, key="sweep-7")
    again = post(url, secret, body, key="sweep-7")
    assert first.status_code == again.status_code == 201, first.text
    assert again.json() == first.json() and again.headers.get("idempotent-replayed") == "true"
    assert stored_jobs(jobs) == before + 3  # no duplicates
    other = post(url, secret, {"jobs": [entry(jobs, "r-other")]}, key="sweep-7")
    assert other.status_code == 409, other.text
    assert "different request" in other.json()["error"]["message"]
    assert stored_jobs(jobs) == before + 3


def test_a_budgeted_tokens_batch_must_fit_its_budget_together(env):
    jobs, url = env
    secret = token(jobs, "budgeted", {"gpu_hours": 1.0})
    before = stored_jobs(jobs)
    half_hour = [entry(jobs, f"b{i}", gpu=1, timeout_s=1800, command=["sleep", "60"]) for i in range(3)]
    # Each fits alone (0.5 of 1.0 GPU-hour); the three together (1.5) do not: refused whole.
    reply = post(url, secret, {"jobs": half_hour})
    assert reply.status_code == 403, reply.text
    error = reply.json()["error"]
    assert error["code"] == "forbidden"
    assert [(r["index"], r["limit"]) for r in error["details"]["refused"]] == [(2, "budget")]
    assert error["details"]["remaining_gpu_hours"] == 1.0
    assert stored_jobs(jobs) == before
    fits = post(url, secret, {"jobs": half_hour[:2]})  # two: exactly the budget
    assert fits.status_code == 201, fits.text
    assert stored_jobs(jobs) == before + 2
    over = post(url, secret, {"jobs": half_hour[:1]})  # the budget is reserved by the two now
    assert over.status_code == 403 and over.json()["error"]["details"]["refused"][0]["limit"] == "budget"
    for job in fits.json()["jobs"]:
        jobs.client.post(f"/api/v1/jobs/{job['id']}/cancel", {})


def test_a_tokens_queued_jobs_limit_counts_the_batchs_own_entries(env):
    jobs, url = env
    secret = token(jobs, "capped", {"max_queued_jobs": 2})
    before = stored_jobs(jobs)
    held = [entry(jobs, f"q{i}", command=["sleep", "60"]) for i in range(3)]
    reply = post(url, secret, {"jobs": held})
    assert reply.status_code == 403, reply.text
    assert [(r["index"], r["limit"]) for r in reply.json()["error"]["details"]["refused"]] == [(2, "max_queued_jobs")]
    assert stored_jobs(jobs) == before


def test_a_batch_entrys_secret_env_reaches_its_job_and_is_shown_and_audited_by_name_only(env):
    jobs, url = env
    secret = token(jobs, "secretive")
    admin = jobs.client.post("/api/v1/tokens", {"name": "auditor", "scopes": ["admin"]})["secret"]
    value = "batch-secret-0f3c9a"
    reply = post(url, secret, {"jobs": [entry(jobs, "s", command=["sh", "-c", 'printf %s "$API_KEY" > got-secret'],
                                              secret_env={"API_KEY": value})]})
    assert reply.status_code == 201, reply.text
    assert value not in reply.text
    job = reply.json()["jobs"][0]
    assert jobs.wait(job["id"])["status"] == "SUCCEEDED"
    assert jobs.file("got-secret").read_text() == value  # the job's process got it
    audit = httpx.get(url + "/api/v1/audit?limit=200", headers={"Authorization": f"Bearer {admin}"}, timeout=10)
    assert audit.status_code == 200, audit.text
    assert any(row["action"] == "POST /api/v1/jobs:batch" for row in audit.json()["entries"])
    assert value not in audit.text
    with sqlite3.connect(jobs.daemon.home / "gpuplane.db") as conn:
        assert value not in json.dumps(conn.execute("SELECT * FROM jobs WHERE id = ?", (job["id"],)).fetchall())


def test_the_batch_size_is_capped(env):
    jobs, url = env
    secret = token(jobs, "greedy")
    before = stored_jobs(jobs)
    small = {"command": ["true"], "cwd": "/"}
    too_many = post(url, secret, {"jobs": [small] * (MAX_BATCH_JOBS + 1)})
    assert too_many.status_code == 400, too_many.text
    assert too_many.json()["error"]["details"]["field"] == "jobs"
    assert f"1 to {MAX_BATCH_JOBS} jobs" in too_many.json()["error"]["message"]
    empty = post(url, secret, {"jobs": []})
    assert empty.status_code == 400 and empty.json()["error"]["details"]["field"] == "jobs"
    big = {"jobs": [{"command": ["echo", "x" * 2000], "cwd": "/"}] * 600}  # ~1.2 MB: past the body limit
    assert len(json.dumps(big)) > 1 << 20
    assert post(url, secret, big).status_code == 413
    assert stored_jobs(jobs) == before


def test_a_thousand_trial_sweep_fits_the_body_limit_and_is_queued_behind_its_dependency(env):
    """The case the route serves: 1,000 trials with their arguments and env, under 1 MiB, held
    behind one running job (``after``: an existing job) so none of them runs here."""
    jobs, url = env
    secret = token(jobs, "sweep")
    gate = post(url, secret, {"jobs": [entry(jobs, "gate", command=["sleep", "60"])]}).json()["jobs"][0]["id"]
    before = stored_jobs(jobs)
    body = {"jobs": [{"command": ["python", "train.py", "--lr", f"{0.0001 * (i + 1):.4f}", "--seed", str(i)],
                      "cwd": str(jobs.workdir), "gpu": 0, "name": f"sweep-lr-{i:04d}", "env": {"TRIAL": str(i)},
                      "timeout_s": 3600, "max_attempts": 2, "after": {"ids": [gate]}} for i in range(1000)]}
    assert len(json.dumps(body)) < 1 << 20
    reply = post(url, secret, body)
    assert reply.status_code == 201, reply.text[:500]
    queued = reply.json()["jobs"]
    assert len(queued) == 1000 and {j["status"] for j in queued} == {"QUEUED"}
    assert stored_jobs(jobs) == before + 1000
    jobs.client.post(f"/api/v1/jobs/{gate}/cancel", {})
    assert jobs.wait(queued[-1]["id"])["failure_reason"] == "DEPENDENCY_FAILED"
