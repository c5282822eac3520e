"""Capability tokens on a real daemon (issue 17): limits on submit, dry run, the audit log and
the budget pass, over the HTTP front with tokens and over the control socket."""

from __future__ import annotations

import json
import os
import sqlite3

import httpx
import pytest
from gpuplaned.protocol.errors import ApiError, ErrorCode
from helpers import DaemonProcess, Jobs, kill_processes_with_env, wait_for

pytestmark = pytest.mark.e2e

CONFIG = '[node]\nname = "n1"\n[tokens]\nbudget_interval_s = 0.2\n'


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("agent")
    (root / "gpuplaned.toml").write_text(CONFIG)
    daemon = DaemonProcess(root / "d", "--gpus=fake:2", "--config", str(root / "gpuplaned.toml")).start()
    try:
        daemon.wait_ready()
        jobs = Jobs(daemon, root / "work")
        jobs.wait_node()
        (root / "work" / "sub").mkdir()
        (root / "outside").mkdir()
        os.symlink(root / "outside", root / "work" / "escape")
        url = jobs.client.get("/api/v1/daemon")["endpoints"]["http"]
        yield jobs, url, root
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


def token(jobs, name, limits=None, scopes=("write",)):
    body = {"name": name, "scopes": list(scopes), **({"limits": limits} if limits else {})}
    return jobs.client.post("/api/v1/tokens", body)["secret"]


def post(url, secret, path, body):
    return httpx.post(url + path, json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=10)


def count(jobs, table):
    with sqlite3.connect(jobs.daemon.home / "gpuplane.db") as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_limits_are_stored_shown_and_checked(env):
    jobs, _url, root = env
    token(jobs, "shown", {"max_gpus_per_job": 1, "allowed_dirs": [str(root / "work") + "/"], "gpu_hours": 2})
    [shown] = [t for t in jobs.client.get("/api/v1/tokens")["tokens"] if t["name"] == "shown"]
    assert shown["limits"]["max_gpus_per_job"] == 1 and shown["limits"]["allowed_dirs"] == [str(root / "work")]
    assert shown["used_gpu_hours"] == 0 and shown["remaining_gpu_hours"] == 2
    for limits, field in (({"gpu_hours": -1}, "gpu_hours"), ({"allowed_dirs": ["rel"]}, "allowed_dirs"),
                          ({"max_queued_jobs": 0}, "max_queued_jobs"), ({"nope": 1}, "nope")):
        with pytest.raises(ApiError) as caught:
            jobs.client.post("/api/v1/tokens", {"name": "bad", "scopes": ["write"], "limits": limits})
        assert caught.value.code is ErrorCode.BAD_REQUEST and field in str(caught.value)


def test_each_limit_refuses_and_writes_nothing(env):
    jobs, url, root = env
    work = str(root / "work")
    secret = token(jobs, "limited", {"max_gpus_per_job": 1, "allowed_nodes": ["n1"], "allowed_dirs": [work],
                                     "max_queued_jobs": 1, "gpu_hours": 1.0})
    base = {"command": ["true"], "cwd": work, "node": "n1", "timeout_s": 60}
    before = count(jobs, "jobs")
    for change, limit in (({"gpu": 2}, "max_gpus_per_job"), ({"node": None}, "allowed_nodes"),
                          ({"cwd": str(root / "outside")}, "allowed_dirs"),
                          ({"cwd": str(root / "work" / "escape")}, "allowed_dirs"),  # a symlink out
                          ({"cwd": work + "/sub/../../outside"}, "allowed_dirs"),
                          ({"timeout_s": None}, "budget"), ({"timeout_s": 7200}, "budget")):
        reply = post(url, secret, "/api/v1/jobs", {**base, **change})
        assert reply.status_code == 403, (change, reply.text)
        assert reply.json()["error"]["details"]["limit"] == limit, reply.text
    budget = post(url, secret, "/api/v1/jobs", {**base, "timeout_s": 7200}).json()["error"]
    assert budget["details"]["remaining_gpu_hours"] == 1.0 and "1 GPU-hour(s) left" in budget["message"]
    assert count(jobs, "jobs") == before
    held = post(url, secret, "/api/v1/jobs", {**base, "command": ["sleep", "30"]})
    assert held.status_code == 201, held.text
    queued = post(url, secret, "/api/v1/jobs", base)
    assert queued.json()["error"]["details"]["limit"] == "max_queued_jobs"
    # Cancel and retry only its own jobs; the trusted socket's job is another's.
    other = jobs.submit(["true"])
    assert post(url, secret, f"/api/v1/jobs/{other['id']}/cancel", {}).status_code == 403
    assert post(url, secret, f"/api/v1/jobs/{held.json()['job']['id']}/cancel", {}).status_code == 200
    jobs.wait(held.json()["job"]["id"])
    # A retry goes through the same checks (within them here: its own ended job, budget left).
    first = post(url, secret, "/api/v1/jobs", {**base, "timeout_s": 1800})
    assert first.status_code == 201, first.text
    jobs.wait(first.json()["job"]["id"])
    retried = post(url, secret, f"/api/v1/jobs/{first.json()['job']['id']}/retry", {})
    assert retried.status_code == 200, retried.text
    # A limited token cannot sign a browser in: the session would not carry its limits.
    login = httpx.post(url + "/api/v1/auth/login", json={"token": secret}, timeout=10)
    assert login.status_code == 403 and "has limits" in login.json()["error"]["message"]
    # An unlimited write token is not affected.
    free = token(jobs, "free")
    assert post(url, free, "/api/v1/jobs", {**base, "gpu": 2, "node": None, "timeout_s": None}).status_code == 201


def test_dry_run_says_what_would_happen_and_changes_nothing(env):
    jobs, url, root = env
    secret = token(jobs, "planner", {"gpu_hours": 3.0, "max_job_hours": 1.0})
    jobs_before, events_before = count(jobs, "jobs"), count(jobs, "events")
    reply = post(url, secret, "/api/v1/jobs?dry_run=true", {"command": ["true"], "cwd": str(root / "work"), "gpu": 1})
    assert reply.status_code == 200, reply.text
    plan = reply.json()["plan"]
    assert plan["would"] in ("dispatch", "queue") and plan["budget_after_gpu_hours"] == 2.0
    if plan["would"] == "dispatch":
        assert plan["node_id"] and len(plan["gpus"]) == 1
    refused = post(url, secret, "/api/v1/jobs?dry_run=true", {"command": ["true"], "cwd": str(root / "work"),
                                                               "gpu": 2, "timeout_s": 7200}).json()["plan"]
    assert refused["would"] == "refuse" and any("at most 1 h" in r for r in refused["reasons"])
    local = jobs.client.post("/api/v1/jobs?dry_run=true", {"command": ["true"], "cwd": str(root / "work"), "gpu": 9})
    assert local["plan"]["would"] == "refuse"
    # A constraint no node meets: it would wait, and the plan says for what, as the job would.
    waits = jobs.client.post("/api/v1/jobs?dry_run=true", {"command": ["true"], "cwd": str(root / "work"),
                                                            "gpu": 1, "gpu_model": "H100"})["plan"]
    assert waits["would"] == "queue" and waits["node_id"] is None
    assert waits["reasons"] == ["no node has 1 GPU(s) whose model contains 'H100' (the most on one matching node: 0)"]
    assert (count(jobs, "jobs"), count(jobs, "events")) == (jobs_before, events_before)


def test_rest_writes_are_audited_on_both_fronts_with_secrets_redacted(env):
    jobs, url, root = env
    job = jobs.submit(["true"], gpu=0, env={"HF_TOKEN": "hf-s3cret", "LR": "0.1"})
    big = jobs.submit(["true"], gpu=0, env={"BIG": "x" * 70_000})  # recorded by its size, not parsed
    secret = token(jobs, "auditor", scopes=("admin",))
    assert post(url, secret, f"/api/v1/jobs/{job['id']}/cancel", {}).status_code in (200, 409)
    httpx.post(url + "/api/v1/auth/login", json={"token": secret}, timeout=10)
    limited = token(jobs, "cpu-only", limits={"max_gpus_per_job": 0})
    assert post(url, limited, "/api/v1/jobs", {"command": ["true"], "cwd": str(root / "work"), "gpu": 1}
                ).status_code == 403
    httpx.post(url + "/api/v1/webhooks", json={"url": "https://hooks.slack.com/services/T0/B0/s3cretpath"},
               headers={"Authorization": f"Bearer {secret}"}, timeout=10)

    def entries(**query):
        reply = httpx.get(url + "/api/v1/audit", params={"limit": 200, **query},
                          headers={"Authorization": f"Bearer {secret}"}, timeout=10)
        assert reply.status_code == 200, reply.text
        return reply.json()["entries"]

    # Rows are written after each reply: wait for the last request's.
    found = wait_for(lambda: (rows := entries()) and any(e["action"].startswith("POST /api/v1/webhooks") for e in rows)
                     and rows, what="the audit rows")
    text = str(found)
    assert "hf-s3cret" not in text and secret not in text and "s3cretpath" not in text
    submit = next(e for e in found if e["action"] == "POST /api/v1/jobs" and e["caller_kind"] == "local"
                  and isinstance(e["arguments"]["body"], dict) and "HF_TOKEN" in e["arguments"]["body"].get("env", {}))
    assert submit["token_name"] == "local" and submit["outcome"] == "ok" and submit["via"] == "rest"
    assert submit["arguments"]["body"]["env"] == {"HF_TOKEN": "[redacted]", "LR": "[redacted]"}  # no env value
    sized = next(e for e in found if e["action"] == "POST /api/v1/jobs" and isinstance(e["arguments"]["body"], str))
    assert "bytes omitted" in sized["arguments"]["body"] and big["id"]
    cancel = next(e for e in found if e["action"] == "POST /api/v1/jobs/<job_id>/cancel"
                  and e["token_name"] == "auditor")
    assert cancel["arguments"]["path"] == {"job_id": job["id"]}
    login = next(e for e in found if e["action"] == "POST /api/v1/auth/login")
    assert login["arguments"]["body"] == {"token": "[redacted]"} and login["caller_kind"] == "public"
    assert all(e["token_name"] == "auditor" for e in entries(token="auditor"))
    refused = [e for e in found if e["outcome"] == "forbidden" and e["token_name"] == "cpu-only"]
    assert refused, "the limited token's refusal is recorded with its code"
    shown = jobs.daemon.run_ctl("audit", "--token", "auditor")
    assert shown.returncode == 0 and "POST /api/v1/jobs/<job_id>/cancel" in shown.stdout, shown.stderr
    assert "auditor" in shown.stdout
    as_json = json.loads(jobs.daemon.run_ctl("audit", "--token", "auditor", "--json").stdout)
    assert as_json["entries"] and {e["token_name"] for e in as_json["entries"]} == {"auditor"}


def test_a_spent_budget_stops_the_tokens_jobs(env):
    jobs, url, root = env
    # 3 s of one GPU per attempt fits the 7.2 GPU-second budget; the second attempt spends it.
    secret = token(jobs, "spender", {"gpu_hours": 0.002})
    reply = post(url, secret, "/api/v1/jobs", {"command": ["sleep", "30"], "cwd": str(root / "work"),
                                               "timeout_s": 5, "max_attempts": 3})
    assert reply.status_code == 201, reply.text
    job_id = reply.json()["job"]["id"]
    ended = jobs.wait(job_id, "CANCELLED", timeout=30)
    assert ended["attempt"] >= 2
    events = jobs.client.get(f"/api/v1/events?type=BUDGET_EXHAUSTED&job_id={job_id}")["events"]
    [event] = events
    assert event["context"]["token"] == "spender" and event["context"]["used_gpu_hours"] >= 0.002
    [listed] = [t for t in jobs.client.get("/api/v1/tokens")["tokens"] if t["name"] == "spender"]
    assert listed["remaining_gpu_hours"] == 0 and listed["used_gpu_hours"] >= 0.002


def test_cli_creates_a_limited_token_and_lists_its_limits(env):
    jobs, _url, root = env
    made = jobs.daemon.run_ctl("token", "create", "cli-agent", "--scope", "write", "--max-gpus", "1", "--node", "n1",
                               "--dir", str(root / "work"), "--max-queued", "2", "--gpu-hours", "5",
                               "--max-job-hours", "1", "--unattended")
    assert made.returncode == 0, made.stderr
    listed = jobs.daemon.run_ctl("token", "list")
    line = next(row for row in listed.stdout.splitlines() if "cli-agent" in row)
    assert "gpus<=1" in line and "nodes=n1" in line and "queued<=2" in line and "unattended" in line
    assert "0/5 (5 left)" in line
    bad = jobs.daemon.run_ctl("token", "create", "cli-bad", "--scope", "write", "--dir", "relative")
    assert bad.returncode != 0 and "allowed_dirs" in bad.stderr
