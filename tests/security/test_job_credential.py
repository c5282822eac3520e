"""A job's own processes are their job's credential on the control socket, never its owner
(issue 29 item 6): a limited token's job once made itself an admin token through the socket
its environment names. Real daemons, real jobs and their real process trees:

- the job cannot create a token, submit, list, shut the daemon down or speak MCP there, nor
  can a grandchild of it that left its session and group (setsid, double fork): 403 each;
- it writes only to its job's run: another's run, another job, another run's summary: 403;
  its own session, batch, finish and summary work, and the real SDK's points land;
- the user on the same socket is unaffected;
- on a remote agent, the job's process gets only the SDK's routes from the agent's socket,
  and the server holds its forwarded calls to its job (another's run: 403).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import DaemonProcess, Jobs, kill_processes_with_env, wait_for
from remote_cluster import Cluster

pytestmark = pytest.mark.e2e

PROBE = Path(__file__).with_name("job_probe.py")
REFUSED = ("create_admin_token", "submit", "list_jobs", "shutdown", "shutdown_http_client", "mcp_initialize",
           "foreign_session",
           "other_job_session", "foreign_summary", "escaped_shutdown")
NOT_ON_AGENTS = ("create_admin_token", "submit", "list_jobs", "mcp_initialize")  # 404 there, for anyone
SDK_SCRIPT = """
import gpuplane
run = gpuplane.init(project="p", experiment="sdk")
run.log({"loss": 0.25}, step=1)
run.finish()
"""


def probe(api, submit, wait, workdir: Path, name: str, stderr=lambda job: "") -> dict:
    """Run the probe as a job (beside a run the user opened, its 'other' run); its findings."""
    other = api.post("/api/v1/sessions", {"project": "p", "experiment": "owner"})["run_id"]
    out = workdir / f"{name}.json"
    job = submit([sys.executable, str(PROBE), str(out), other], name=name)
    ended = wait(job["id"])
    assert ended["status"] == "SUCCEEDED", (ended.get("failure_message"), stderr(ended))
    return json.loads(out.read_text())


def assert_confined(found: dict, *, agent: bool = False) -> None:
    refused = {name: 404 if agent and name in NOT_ON_AGENTS else 403 for name in REFUSED}
    assert {name: found[name] for name in REFUSED} == refused, found
    assert (found["own_session"], found["own_batch"], found["own_finish"], found["own_summary"]) == \
        (201, 200, 200, 200), found


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    root = tmp_path_factory.mktemp("jobcred")
    daemon = DaemonProcess(root / "d", "--gpus=fake:1", "--node-name", "n1").start()
    try:
        daemon.wait_ready()
        jobs = Jobs(daemon, root / "work")
        jobs.wait_node()
        yield jobs
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


def test_a_jobs_process_is_its_job_on_the_control_socket_not_the_user(local):
    jobs = local
    tokens_before = jobs.client.get("/api/v1/tokens")["tokens"]
    found = probe(jobs.client, jobs.submit, lambda job_id: jobs.wait(job_id, timeout=60), jobs.workdir, "probe")
    assert_confined(found)
    assert jobs.client.get("/api/v1/tokens")["tokens"] == tokens_before  # nothing was made
    audit = jobs.client.get("/api/v1/audit?limit=1000")["entries"]
    assert any(entry["action"] == "POST /api/v1/tokens" and entry["outcome"] == "forbidden"
               and entry["caller_kind"] == "job" and entry["token_name"].startswith("job:") for entry in audit), audit
    # The user, on the same socket, meanwhile: as before.
    made = jobs.client.post("/api/v1/tokens", {"name": "mine", "scopes": ["read"]})
    assert made["secret"]


def test_the_sdk_in_a_job_still_reports_to_its_run(local):
    jobs = local
    script = jobs.workdir / "sdk_job.py"
    script.write_text(SDK_SCRIPT)
    job = jobs.submit([sys.executable, str(script)], name="sdk")
    ended = jobs.wait(job["id"], timeout=60)
    assert ended["status"] == "SUCCEEDED", ended
    summary = jobs.client.get(f"/api/v1/runs/{ended['run_id']}/summary")["summary"]
    assert summary["metrics"]["loss"]["latest"]["value"] == 0.25, summary


def test_a_job_on_an_agent_gets_only_the_sdk_and_its_own_runs(tmp_path):
    cluster = Cluster(tmp_path)
    try:
        agent = cluster.agent("boxA", cluster.token("a", ["agent"]))
        workdir = tmp_path / "work"
        workdir.mkdir()

        def submit(command, name):
            return cluster.api.post("/api/v1/jobs", {"command": command, "cwd": str(workdir), "name": name,
                                                     "node": "boxA"})["job"]

        found = probe(cluster.api, submit, lambda job_id: cluster.wait_job(job_id, "SUCCEEDED", "FAILED",
                                                                            timeout=60), workdir, "remote",
                      lambda job: agent.log_file(job, "stderr").read_text())
        assert_confined(found, agent=True)
        assert agent.daemon.client().get("/api/v1/daemon")["state"] == "READY"  # its shutdown was refused
    finally:
        cluster.close()
