"""``[detector] stall_restarts`` on a real daemon: a job that hangs again after every restart
is restarted that many times, then the policy gives up (an event saying why) and leaves it
running."""

from __future__ import annotations

from tests.helpers import Jobs, wait_for

HANGS = """
    echo "attempt $GPUPLANE_ATTEMPT" >> starts
    exec sleep 60
"""


def _events(jobs: Jobs, job_id: str, kind: str) -> list[dict]:
    return list(reversed(jobs.client.get(f"/api/v1/events?type={kind}&job_id={job_id}&limit=100")["events"]))


def test_a_job_that_always_hangs_is_restarted_n_times_then_left_running(daemon_factory, tmp_path):
    config = tmp_path / "gpuplaned.toml"
    config.write_text("[detector]\nstall_after_s = 0.5\ninterval_s = 0.1\nstall_restarts = 1\n")
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1", f"--config={config}")
    job = jobs.sh(HANGS, gpu=0, stop_grace_s=1, on_stalled={"after": "1s", "action": "restart"})
    wait_for(lambda: _events(jobs, job["id"], "POLICY_SKIPPED"), timeout=30, what="the policy giving up")
    [gave_up] = _events(jobs, job["id"], "POLICY_SKIPPED")
    assert gave_up["context"]["action"] == "give_up" and gave_up["context"]["limit"] == 1
    assert "gave up" in gave_up["context"]["reason"] and gave_up["severity"] == "warning"
    actions = [e["context"]["action"] for e in _events(jobs, job["id"], "POLICY_ACTION")]
    assert actions == ["restart", "restarted"]
    stalls = _events(jobs, job["id"], "RUN_STALLED")
    assert [s["context"]["attempt"] for s in stalls] == [1, 2]
    assert gave_up["context"]["trigger_event_id"] == stalls[1]["id"]
    running = jobs.get(job["id"])
    assert (running["status"], running["attempt"]) == ("RUNNING", 2)
    assert jobs.file("starts").read_text().split("\n")[:2] == ["attempt 1", "attempt 2"]
    assert jobs.client.post(f"/api/v1/jobs/{job['id']}/cancel")["job"]["cancel_requested"]
