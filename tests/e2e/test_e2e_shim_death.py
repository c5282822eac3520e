"""A job whose shim is killed runs on, keeps its GPU and has its end recorded.

A dead shim is a GPUPlane failure; it must never end (or double-book) a running job. Real
daemons with fake GPUs, real shims, real ``kill -9``.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import psutil
import pytest
from helpers import Jobs, processes_with_env, wait_for

pytestmark = pytest.mark.e2e

# Writes a marker, then runs until a file named "release" appears, and says so on its way out.
HOLDER = """
    echo started > marker
    while [ ! -e release ]; do sleep 0.02; done
    echo finished >> marker
    exit 5
"""


def runtime_of(jobs: Jobs, job: dict) -> dict:
    return json.loads((jobs.daemon.home / "jobs" / job["id"] / "attempt-1" / "runtime.json").read_text())


def kill_shim(jobs: Jobs, job: dict) -> dict:
    """SIGKILL the job's shim; returns its runtime.json once the runner has seen it die
    (and follows the job alone, or, as it once did, has ended the job)."""
    runtime = runtime_of(jobs, job)
    os.kill(runtime["shim_pid"], signal.SIGKILL)
    following = f"its shim (pid {runtime['shim_pid']}) died while the job ran; following"
    wait_for(lambda: following in jobs.daemon.log() or jobs.get(job["id"])["status"] != "RUNNING",
             what="the runner to see the shim die")
    assert jobs.get(job["id"])["status"] == "RUNNING"
    return runtime


def slot_owner(jobs: Jobs) -> str | None:
    return jobs.client.get("/api/v1/nodes")["nodes"][0]["gpus"][0]["owner_job_id"]


def test_a_killed_shim_neither_ends_the_job_nor_frees_its_gpu(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    job = jobs.sh(HOLDER, gpu=1)
    jobs.wait(job["id"], "RUNNING")
    wait_for(jobs.file("marker").exists, what="the job to start")
    launcher = psutil.Process(runtime_of(jobs, job)["shim_pid"]).ppid()
    second = jobs.sh("echo second", gpu=1)
    runtime = kill_shim(jobs, job)

    assert psutil.Process(runtime["pid"]).ppid() == launcher  # its subreaper, not init
    assert jobs.get(job["id"])["status"] == "RUNNING"
    assert jobs.get(second["id"])["status"] == "QUEUED"
    assert slot_owner(jobs) == job["id"]

    jobs.file("release").touch()
    done = jobs.wait(job["id"])
    # The launcher reaped the job, so its own exit code is known; the message tells the rest.
    assert (done["status"], done["exit_code"], done["failure_reason"]) == ("FAILED", 5, "EXIT_CODE")
    assert done["failure_message"] == f"exit code 5; its shim (pid {runtime['shim_pid']}) died while the job ran"
    assert jobs.file("marker").read_text() == "started\nfinished\n"  # it ran on to its own end
    after = jobs.wait(second["id"])
    assert (after["status"], after["gpu_indexes"]) == ("SUCCEEDED", [0])


def test_a_job_whose_shim_and_daemon_died_is_adopted_and_its_end_recorded_as_unknown(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    job = jobs.sh(HOLDER, gpu=1)
    jobs.wait(job["id"], "RUNNING")
    runtime = kill_shim(jobs, job)
    first = jobs.daemon
    first.signal(signal.SIGKILL)  # and with it the launcher: the job goes to init, its exit status with it
    first.proc.wait(10)

    jobs.restart(daemon_factory, "--gpus=fake:1")
    wait_for(lambda: f"re-adopted job {job['id']} attempt 1" in jobs.daemon.log(), what="the job to be re-adopted")
    second = jobs.sh("echo second", gpu=1)
    wait_for(lambda: "following" in jobs.daemon.log(), what="the runner to follow the job")
    assert jobs.get(job["id"])["status"] == "RUNNING"
    assert slot_owner(jobs) == job["id"]
    assert jobs.get(second["id"])["status"] == "QUEUED"

    os.kill(runtime["pid"], signal.SIGKILL)
    done = jobs.wait(job["id"])
    assert (done["status"], done["exit_code"], done["failure_reason"]) == ("FAILED", None, "SHIM_DIED")
    assert done["failure_message"] == (f"its shim (pid {runtime['shim_pid']}) died while the job ran; the job ran "
                                       "on to its end, and its own exit code is unknown")
    assert jobs.wait(second["id"])["status"] == "SUCCEEDED"


def test_cancel_and_timeout_still_stop_a_job_whose_shim_died(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:2")
    # A job that shrugs off SIGTERM, with a child that does too and has left its process
    # group (not its shim's session).
    stubborn = f"""
        trap '' TERM
        {sys.executable} -c "import os, time; os.setpgid(0, 0); time.sleep(1000)" &
        echo started > marker-$N
        while true; do sleep 0.02; done
    """
    cancelled = jobs.sh(stubborn, gpu=1, env={"N": "c"}, stop_grace_s=0.5)
    timed_out = jobs.sh(stubborn, gpu=1, env={"N": "t"}, stop_grace_s=0.5, timeout_s=3)
    for job, name in ((cancelled, "marker-c"), (timed_out, "marker-t")):
        jobs.wait(job["id"], "RUNNING")
        wait_for(jobs.file(name).exists, what="the job to start")
    kill_shim(jobs, cancelled)
    kill_shim(jobs, timed_out)

    jobs.client.post(f"/api/v1/jobs/{cancelled['id']}/cancel")
    assert jobs.wait(cancelled["id"])["status"] == "CANCELLED"
    done = jobs.wait(timed_out["id"])
    assert (done["status"], done["failure_reason"]) == ("FAILED", "TIMEOUT")
    for job in (cancelled, timed_out):  # nothing of either job is left
        assert processes_with_env(f"GPUPLANE_JOB_ID={job['id']}") == []
    assert all(g["owner_job_id"] is None for g in jobs.client.get("/api/v1/nodes")["nodes"][0]["gpus"])
