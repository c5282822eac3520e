"""Writes while the store actor is stopped, on a real daemon: a fast 503 ``store_unavailable``
that changes nothing, and no state change lost once the store runs again."""

from __future__ import annotations

import sqlite3
import time

import pytest
from gpuplanectl.client import DaemonClient
from helpers import Jobs, wait_for

from gpuplaned.protocol.errors import ApiError, ErrorCode

pytestmark = pytest.mark.e2e


def set_store(jobs: Jobs, verb: str) -> None:
    state = jobs.client.post(f"/api/v1/actors/store/{verb}")["actor"]["state"]
    assert state in (("STOPPED",) if verb == "stop" else ("STARTING", "RUNNING")), state


def refused_fast(call) -> ApiError:
    started = time.monotonic()
    with pytest.raises(ApiError) as refused:
        call()
    assert time.monotonic() - started < 1.0
    assert refused.value.code is ErrorCode.STORE_UNAVAILABLE, refused.value.message
    return refused.value


def job_rows(jobs: Jobs) -> list[tuple[str, str]]:
    conn = sqlite3.connect(f"file:{jobs.daemon.home / 'gpuplane.db'}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT id, status FROM jobs ORDER BY created_at").fetchall()
    finally:
        conn.close()


@pytest.fixture
def jobs(daemon_factory, tmp_path) -> Jobs:
    return Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none", "--max-cpu-jobs=1")


def test_a_submit_while_the_store_is_stopped_is_a_fast_503_and_creates_nothing(jobs):
    set_store(jobs, "stop")
    impatient = DaemonClient.discover(jobs.daemon.runtime_dir, timeout=5)
    error = refused_fast(lambda: impatient.post("/api/v1/jobs", {"command": ["true"], "cwd": str(jobs.workdir),
                                                                  "gpu": 0}))
    assert "store actor is STOPPED" in error.message and "nothing was changed" in error.message
    assert error.details["state"] == "STOPPED"

    started = time.monotonic()
    ctl = jobs.daemon.run_ctl("submit", "--gpu", "0", "--", "true")
    assert ctl.returncode == 1 and time.monotonic() - started < 10
    assert ctl.stderr.startswith("error: the store actor is STOPPED") and ctl.stdout == ""

    set_store(jobs, "start")
    # Queued behind anything the refused submits might have left in the store's inbox.
    probe = jobs.submit(["true"], gpu=0)
    assert jobs.wait(probe["id"])["status"] == "SUCCEEDED"  # the CPU slot is free: nothing holds it
    assert job_rows(jobs) == [(probe["id"], "SUCCEEDED")]


def test_a_cancel_while_the_store_is_stopped_is_refused_and_the_job_end_is_kept(jobs):
    job = jobs.sh("while [ ! -e go ]; do sleep 0.05; done", gpu=0)
    jobs.wait(job["id"], "RUNNING")
    set_store(jobs, "stop")
    refused_fast(lambda: jobs.client.post(f"/api/v1/jobs/{job['id']}/cancel"))
    assert jobs.get(job["id"])["status"] == "RUNNING"  # reads go on

    jobs.file("go").touch()  # it ends while the store is down: the runner's report waits
    exit_file = jobs.daemon.home / "jobs" / job["id"] / "attempt-1" / "exit.json"
    wait_for(exit_file.exists, what="the job to end")
    set_store(jobs, "start")
    ended = jobs.wait(job["id"])
    assert (ended["status"], ended["exit_code"], ended["cancel_requested"]) == ("SUCCEEDED", 0, False)
    following = jobs.submit(["true"], gpu=0)  # its CPU slot was given back
    assert jobs.wait(following["id"])["status"] == "SUCCEEDED"


def test_jobs_left_dispatching_are_resolved_when_the_node_says_hello(daemon_factory, tmp_path, jobs):
    """Dispatches an older gpuplaned committed but never delivered: the one whose cancel is
    on record ends CANCELLED (not requeued and run), the other goes back to the queue and runs."""
    assert jobs.client.post("/api/v1/actors/scheduler/stop")["actor"]["state"] == "STOPPED"
    kept = jobs.sh("echo ran > kept", gpu=0)
    cancelled = jobs.sh("echo ran > cancelled", gpu=0)
    node_id = jobs.client.get("/api/v1/nodes")["nodes"][0]["id"]
    jobs.client.post("/api/v1/daemon/shutdown")
    assert jobs.daemon.wait_exit() == 0
    conn = sqlite3.connect(jobs.daemon.home / "gpuplane.db")
    with conn:
        for job, cancel in ((kept, 0), (cancelled, 1)):
            run_id = f"run_{job['id'][4:]}"
            conn.execute("UPDATE jobs SET status = 'DISPATCHING', node_id = ?, attempt = 1, run_id = ?, "
                         "cancel_requested = ? WHERE id = ?", (node_id, run_id, cancel, job["id"]))
            conn.execute("INSERT INTO runs (id, job_id, attempt, node_id, name, source, status, created_at) "
                         "VALUES (?, ?, 1, ?, 'x', 'job', 'RUNNING', 0)", (run_id, job["id"], node_id))
    conn.close()

    jobs.restart(daemon_factory, "--gpus=none", "--max-cpu-jobs=1")
    assert jobs.wait(cancelled["id"])["status"] == "CANCELLED"
    assert jobs.wait(kept["id"])["status"] == "SUCCEEDED"
    assert jobs.file("kept").exists() and not jobs.file("cancelled").exists()
