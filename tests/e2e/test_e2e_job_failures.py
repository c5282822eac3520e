"""A failed job says why: in the job itself, and as an event carrying its job, run, node,
exit code and the line of output that tells why. Real daemons, fake GPUs, real processes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import Jobs, running_jobs, wait_for

pytestmark = pytest.mark.e2e

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """One daemon for the module: each test looks only at its own job and that job's events, and
    the job ends within the test, so none needs a fresh daemon, whose start was most of its time."""
    with running_jobs(tmp_path_factory.mktemp("failures"), "--gpus=fake:1") as jobs:
        yield jobs


def events_of(jobs: Jobs, job_id: str, kind: str, count: int = 1) -> list[dict]:
    """The job's events of type ``kind``, oldest first, once there are ``count`` of them."""
    def listed():
        found = jobs.client.get(f"/api/v1/events?type={kind}&job_id={job_id}")["events"]
        return found[::-1] if len(found) >= count else None

    return wait_for(listed, what=f"{count} {kind} event(s) of {job_id}")


def test_a_folder_missing_on_its_node_fails_the_job_saying_so(jobs):
    """The API queues a job whose cwd it cannot see (the folder is the node's, and a remote
    agent's is not on the server); the node finds it missing, and the job says where."""
    missing = jobs.workdir / "not" / "here"
    job = jobs.client.post("/api/v1/jobs", {"command": ["true"], "cwd": str(missing), "gpu": 0})["job"]
    done = jobs.wait(job["id"])
    node = jobs.client.get(f"/api/v1/nodes/{done['node_id']}")["node"]["name"]
    why = f"the working directory {missing} does not exist on node {node}"
    assert (done["status"], done["failure_reason"], done["failure_message"]) == ("FAILED", "SPAWN_FAILED", why)
    shown = jobs.daemon.run_ctl("job", "show", job["id"])
    assert shown.returncode == 0 and why in shown.stdout, shown.stdout
    [event] = events_of(jobs, job["id"], "JOB_FAILED")
    assert why in event["message"] and event["node_id"] == done["node_id"]


def test_a_command_that_cannot_start_says_why(jobs):
    done = jobs.daemon.run_ctl("submit", "--gpu", "0", "--quiet", "--dir", str(jobs.workdir), "--",
                               "/nonexistent/prog", "--flag")
    assert done.returncode == 0, done.stderr
    job = jobs.wait(done.stdout.strip())
    why = "argv[0] '/nonexistent/prog' not found: [Errno 2] No such file or directory"
    assert (job["status"], job["failure_reason"], job["failure_message"]) == ("FAILED", "SPAWN_FAILED", why)
    shown = jobs.daemon.run_ctl("job", "show", "--json", job["id"])
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["job"]["failure_message"] == why
    shown = jobs.daemon.run_ctl("job", "show", job["id"])
    assert "why:" in shown.stdout and "'/nonexistent/prog' not found" in shown.stdout, shown.stdout
    [event] = events_of(jobs, job["id"], "JOB_FAILED")
    assert (event["run_id"], event["node_id"], event["severity"]) == (job["run_id"], job["node_id"], "warning")
    assert why in event["message"]
    assert event["context"]["failure_reason"] == "SPAWN_FAILED"


def test_a_failing_job_raises_job_failed_for_each_attempt(jobs):
    job = jobs.sh("""
        echo working
        echo 'Traceback (most recent call last):' >&2
        echo 'ValueError: boom' >&2
        echo >&2
        exit 3
    """, gpu=1, retry=1)
    done = jobs.wait(job["id"])
    assert (done["status"], done["exit_code"], done["failure_message"]) == ("FAILED", 3, "exit code 3")
    first, second = events_of(jobs, job["id"], "JOB_FAILED", count=2)
    runs = [r["id"] for r in jobs.client.get(f"/api/v1/runs?job_id={job['id']}")["runs"]]
    assert second["run_id"] == done["run_id"] and first["run_id"] in runs and first["run_id"] != second["run_id"]
    for event, retrying in ((first, True), (second, False)):
        assert (event["job_id"], event["node_id"], event["severity"]) == (job["id"], done["node_id"], "warning")
        assert event["context"] | {"attempt": None} == {
            "attempt": None, "exit_code": 3, "signal": None, "failure_reason": "EXIT_CODE",
            "log_line": "ValueError: boom", "retrying": retrying}
        assert "ValueError: boom" in event["message"]
    assert [first["context"]["attempt"], second["context"]["attempt"]] == [1, 2]


def test_a_job_over_its_timeout_raises_job_timeout(jobs):
    job = jobs.sh("echo 'epoch 1 of 90' >&2; sleep 30", gpu=1, timeout_s=0.5, stop_grace_s=0.5)
    done = jobs.wait(job["id"])
    assert (done["status"], done["failure_reason"]) == ("FAILED", "TIMEOUT")
    [event] = events_of(jobs, job["id"], "JOB_TIMEOUT")
    assert (event["run_id"], event["node_id"], event["severity"]) == (done["run_id"], done["node_id"], "warning")
    assert event["context"]["log_line"] == "epoch 1 of 90"
    # JOB_TIMEOUT is a kind of JOB_FAILED: a filter on the family finds it, the same event
    assert [e["id"] for e in jobs.client.get(f"/api/v1/events?type=JOB_FAILED&job_id={job['id']}")["events"]] == [
        event["id"]]


def test_a_job_out_of_gpu_memory_raises_a_critical_oom(jobs):
    job = jobs.sh("""
        echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2
        echo 'while running step 41' >&2
        exit 1
    """, gpu=1)
    done = jobs.wait(job["id"])
    assert (done["status"], done["failure_reason"]) == ("FAILED", "OOM")
    [event] = events_of(jobs, job["id"], "OOM")
    assert (event["run_id"], event["node_id"], event["severity"]) == (done["run_id"], done["node_id"], "critical")
    line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert event["context"]["log_line"] == line and event["context"]["exit_code"] == 1
    assert line in event["message"]


NAN_SCRIPT = """
import gpuplane
for step in range(5):
    gpuplane.log({"loss": float("nan") if step == 3 else 1.0 / (step + 1)}, step=step)
gpuplane.finish()
"""


def test_loss_nan_of_a_jobs_run_names_the_job(jobs):
    job = jobs.submit([sys.executable, "-c", NAN_SCRIPT], gpu=0, env={"PYTHONPATH": str(SDK_DIR)})
    done = jobs.wait(job["id"], timeout=30)
    assert done["status"] == "SUCCEEDED", done
    [event] = events_of(jobs, job["id"], "LOSS_NAN")
    assert (event["run_id"], event["node_id"], event["step"]) == (done["run_id"], done["node_id"], 3)


def test_an_oom_event_carries_the_gpu_memory_curve(daemon_factory, tmp_path):
    config = tmp_path / "gpuplaned.toml"  # samples stored fast enough to be there when the job dies
    config.write_text("[monitor]\nsample_interval_s = 0.1\nbatch_interval_s = 0.2\n")
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1", "--config", str(config))
    job = jobs.sh("""
        sleep 1.5
        echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2
        exit 1
    """, gpu=1)
    done = jobs.wait(job["id"])
    [event] = events_of(jobs, job["id"], "OOM")
    [curve] = [p for p in event["context"]["evidence"] if p["kind"] == "gpu"]
    assert (curve["node_id"], curve["gpu"], curve["name"]) == (done["node_id"], 0, "gpu0.memory_used_mb")
    assert len(curve["values"]) >= 3 and curve["peak_mb"] == max(curve["values"]) and curve["total_mb"] > 0
    first, last = curve["ts"]
    assert done["started_at"] <= first <= last <= done["finished_at"]
    assert curve["samples_ts"] == sorted(curve["samples_ts"]) and len(curve["samples_ts"]) == len(curve["values"])
    # The pointer resolves: the node's series over that stretch holds the peak.
    series = jobs.client.get(f"/api/v1/nodes/{done['node_id']}/metrics?names=gpu0.memory_used_mb&start={first}"
                             f"&end={last}&points=1000")
    assert series["series"]["gpu0.memory_used_mb"]
