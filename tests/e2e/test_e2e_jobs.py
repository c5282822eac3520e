"""Jobs end to end: real daemons with fake GPUs, real shims, real child processes and signals."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time

import psutil
import pytest
from helpers import DaemonProcess, Jobs, processes_with_env, running_jobs, wait_for

from gpuplaned.protocol.errors import ApiError, ErrorCode

pytestmark = pytest.mark.e2e


@pytest.fixture
def jobs(daemon_factory, tmp_path):
    return Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:2")


def test_two_gpus_three_jobs(jobs):
    block = """
        echo "gpu=$CUDA_VISIBLE_DEVICES job=$GPUPLANE_JOB_ID attempt=$GPUPLANE_ATTEMPT unbuffered=$PYTHONUNBUFFERED"
        while [ ! -e release-$N ]; do sleep 0.02; done
    """
    a = jobs.sh(block, gpu=1, env={"N": "a"})
    b = jobs.sh(block, gpu=1, env={"N": "b"})
    c = jobs.sh(block, gpu=1, env={"N": "c"})
    a, b = jobs.wait(a["id"], "RUNNING"), jobs.wait(b["id"], "RUNNING")
    assert sorted(a["gpu_indexes"] + b["gpu_indexes"]) == [0, 1]
    time.sleep(0.3)
    assert jobs.get(c["id"])["status"] == "QUEUED"
    nodes = jobs.client.get("/api/v1/nodes")["nodes"]
    assert {g["owner_job_id"] for g in nodes[0]["gpus"]} == {a["id"], b["id"]}

    jobs.file("release-a").touch()
    assert jobs.wait(a["id"])["status"] == "SUCCEEDED"
    c = jobs.wait(c["id"], "RUNNING")
    assert c["gpu_indexes"] == a["gpu_indexes"]
    jobs.file("release-b").touch()
    jobs.file("release-c").touch()
    for job in (a, b, c):
        done = jobs.wait(job["id"])
        assert done["status"] == "SUCCEEDED" and done["exit_code"] == 0
        out = jobs.client.get(f"/api/v1/jobs/{job['id']}/logs?stream=stdout")["lines"]
        assert out[0]["line"] == f"gpu={job['gpu_indexes'][0]} job={job['id']} attempt=1 unbuffered=1"
    slots = jobs.client.get("/api/v1/nodes")["nodes"][0]["gpus"]
    assert all(g["owner_job_id"] is None for g in slots)


def test_priority_order(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    hold = jobs.sh("while [ ! -e go ]; do sleep 0.02; done", gpu=1)
    jobs.wait(hold["id"], "RUNNING")
    queued = [jobs.sh(f"echo {name} >> order", gpu=1, priority=p)
              for name, p in (("low", 0), ("high", 10), ("mid", 5), ("low2", 0))]
    jobs.file("go").touch()
    for job in queued:
        jobs.wait(job["id"])
    assert jobs.file("order").read_text().split() == ["high", "mid", "low", "low2"]


def test_cpu_jobs_bounded_by_max_cpu_jobs(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none", "--max-cpu-jobs=2")
    submitted = [jobs.sh("touch started-$N; while [ ! -e go ]; do sleep 0.02; done", gpu=0, env={"N": str(i)})
                 for i in range(3)]
    for job in submitted[:2]:
        assert jobs.wait(job["id"], "RUNNING")["gpu_indexes"] == []
    time.sleep(0.3)
    assert jobs.get(submitted[2]["id"])["status"] == "QUEUED"
    jobs.file("go").touch()
    for job in submitted:
        assert jobs.wait(job["id"])["status"] == "SUCCEEDED"
    with pytest.raises(ApiError) as err:
        jobs.sh("true", gpu=1)
    assert err.value.code is ErrorCode.BAD_REQUEST and "largest matching node has 0" in err.value.message


def test_cancel_leaves_no_survivors(jobs):
    marker = f"GPUPLANE_TEST_MARKER=cancel-{os.getpid()}-{time.monotonic_ns()}"
    script = textwrap.dedent("""
        import os, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
        kids = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]
        subprocess.Popen([sys.executable, "-c", "import os; os.setsid(); " + code])  # escapes the group
        open("ready", "w").close()
        time.sleep(600)
    """)
    key, value = marker.split("=")
    job = jobs.submit([sys.executable, "-c", script], gpu=1, stop_grace_s=0.5, env={key: value})
    wait_for(lambda: jobs.file("ready").exists(), what="the job's children to start")
    # A child caught mid-exec may not show its environment for a moment: wait for all four.
    wait_for(lambda: len(processes_with_env(marker)) == 4, what="the job and its three children")
    jobs.client.post(f"/api/v1/jobs/{job['id']}/cancel")
    done = jobs.wait(job["id"], timeout=10)
    assert done["status"] == "CANCELLED"
    assert processes_with_env(marker) == []
    assert all(g["owner_job_id"] is None for g in jobs.client.get("/api/v1/nodes")["nodes"][0]["gpus"])


def test_cancel_queued_job_is_immediate(jobs):
    hold = jobs.sh("while [ ! -e go ]; do sleep 0.02; done", gpu=2)
    queued = jobs.sh("echo never", gpu=1)
    assert jobs.client.post(f"/api/v1/jobs/{queued['id']}/cancel")["job"]["status"] == "CANCELLED"
    with pytest.raises(ApiError) as err:
        jobs.client.post(f"/api/v1/jobs/{queued['id']}/cancel")
    assert err.value.code is ErrorCode.CONFLICT
    jobs.file("go").touch()
    jobs.wait(hold["id"])
    assert jobs.get(queued["id"])["attempt"] == 0


def test_timeout(jobs):
    job = jobs.sh("echo start; sleep 30", gpu=0, timeout_s=0.5, stop_grace_s=0.5)
    done = jobs.wait(job["id"], timeout=10)
    assert (done["status"], done["failure_reason"]) == ("FAILED", "TIMEOUT")


def test_retry_by_hand_and_automatic(jobs):
    job = jobs.sh("echo attempt $GPUPLANE_ATTEMPT run $GPUPLANE_RUN_ID home $GPUPLANE_HOME; exit 4", gpu=0)
    done = jobs.wait(job["id"])
    assert (done["status"], done["exit_code"], done["failure_reason"], done["attempt"]) == ("FAILED", 4, "EXIT_CODE", 1)
    first_run = done["run_id"]
    jobs.client.post(f"/api/v1/jobs/{job['id']}/retry")
    again = jobs.wait(job["id"])
    assert again["attempt"] == 2 and again["run_id"] != first_run
    out = jobs.client.get(f"/api/v1/jobs/{job['id']}/logs?stream=stdout")["lines"]
    assert out[0]["line"] == f"attempt 2 run {again['run_id']} home {jobs.daemon.home}"  # the SDK spools there
    old = jobs.client.get(f"/api/v1/jobs/{job['id']}/logs?stream=stdout&attempt=1")["lines"]
    assert old[0]["line"] == f"attempt 1 run {first_run} home {jobs.daemon.home}"

    flaky = jobs.sh('[ "$GPUPLANE_ATTEMPT" = 3 ] || exit 1', gpu=0, retry=2)
    done = jobs.wait(flaky["id"])
    assert (done["status"], done["attempt"]) == ("SUCCEEDED", 3)


def test_oom_and_signal_classification(jobs):
    oom = jobs.sh("echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1", gpu=1)
    segv = jobs.sh("kill -SEGV $$", gpu=0)
    assert jobs.wait(oom["id"])["failure_reason"] == "OOM"
    done = jobs.wait(segv["id"])
    assert (done["status"], done["failure_reason"]) == ("FAILED", "SIGNAL(SIGSEGV)")


def test_spawn_failure_is_recorded(jobs):
    job = jobs.submit(["no-such-program-xyz"], gpu=0)
    done = jobs.wait(job["id"])
    assert (done["status"], done["failure_reason"]) == ("FAILED", "SPAWN_FAILED")


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """One daemon for the refused submits: none makes a job (each case checks that none exists
    after it), so none needs a fresh daemon, whose start was most of such a case's time."""
    with running_jobs(tmp_path_factory.mktemp("refusals"), "--gpus=fake:2") as jobs:
        yield jobs


@pytest.mark.parametrize("body, field", [
    ({"command": ["true"], "node": "elsewhere"}, "node"),
    ({"command": ["true"], "gpu": -1}, "gpu"),
    ({"command": ["true"], "gpu": 3}, "gpu"),
    ({"command": []}, "command"),
    ({"command": "echo hi"}, "command"),
    ({"command": ["true"], "cwd": "work/dir"}, "cwd"),  # relative (a missing folder is the node's to find)
    ({"command": ["true"], "timeout_s": -5}, "timeout_s"),
    ({"command": ["true"], "colour": "red"}, "colour"),
    ({"command": ["true"], "env": {"X": "a\x00b"}}, "env"),  # exec could never take it
])
def test_bad_submits_create_nothing(refusals, body, field):
    jobs = refusals
    body = {"cwd": str(jobs.workdir), **body}
    with pytest.raises(ApiError) as err:
        jobs.client.post("/api/v1/jobs", body)
    assert err.value.code is ErrorCode.BAD_REQUEST
    assert err.value.details["field"] == field
    assert jobs.client.get("/api/v1/jobs")["jobs"] == []


def killed_mid_job(daemon_factory, tmp_path, script: str) -> tuple[Jobs, DaemonProcess, dict]:
    """A daemon on one fake GPU, running ``script`` as a job there, killed (SIGKILL) once the job
    is RUNNING; the jobs' driver, the dead daemon and the job."""
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    first = jobs.daemon
    job = jobs.sh(script, gpu=1)
    jobs.wait(job["id"], "RUNNING")
    first.signal(signal.SIGKILL)
    first.proc.wait(10)
    return jobs, first, job


def test_kill_9_of_the_daemon_mid_job(daemon_factory, tmp_path):
    jobs, first, job = killed_mid_job(daemon_factory, tmp_path, """
        i=0
        while [ ! -e finish ]; do i=$((i+1)); echo "line $i"; sleep 0.01; done
        echo done; exit 7
    """)
    out = first.home / "jobs" / job["id"] / "attempt-1" / "stdout.log"
    size = out.stat().st_size
    wait_for(lambda: out.stat().st_size > size + 100, what="the job to keep writing while the daemon is dead")

    jobs.restart(daemon_factory, "--gpus=fake:1")
    assert jobs.wait(job["id"], "RUNNING")["status"] == "RUNNING"
    jobs.file("finish").touch()
    done = jobs.wait(job["id"])
    assert (done["status"], done["exit_code"], done["failure_reason"]) == ("FAILED", 7, "EXIT_CODE")
    lines = out.read_text().splitlines()
    assert lines[-1] == "done"
    assert lines[:-1] == [f"line {i}" for i in range(1, len(lines))]
    page = jobs.client.get(f"/api/v1/jobs/{job['id']}/logs?stream=stdout&offset=0&limit=100000")["lines"]
    assert [entry["line"] for entry in page] == lines
    assert jobs.client.get("/api/v1/nodes")["nodes"][0]["gpus"][0]["owner_job_id"] is None
    # The freed slot is usable: no double booking, no stuck owner.
    after = jobs.sh("echo next", gpu=1)
    assert jobs.wait(after["id"])["status"] == "SUCCEEDED"


def test_kill_9_while_a_jobs_start_is_not_yet_recorded(daemon_factory, tmp_path):
    """A job's start is written with the store's next transaction, up to 20 ms after its process
    started (``NodeLink.report_soon``): a daemon killed in between leaves the job DISPATCHING,
    its process running. The restarted daemon adopts that process; it starts nothing twice."""
    import sqlite3

    jobs, first, job = killed_mid_job(daemon_factory, tmp_path,
                                      "echo started >> starts; while [ ! -e finish ]; do sleep 0.02; done; exit 4")
    # What the store holds when the kill comes inside that window: the dispatch, not the start.
    conn = sqlite3.connect(first.home / "gpuplane.db")
    with conn:
        conn.execute("UPDATE jobs SET status = 'DISPATCHING', started_at = NULL WHERE id = ?", (job["id"],))
        conn.execute("UPDATE runs SET started_at = NULL WHERE job_id = ?", (job["id"],))
    conn.close()
    runtime = json.loads((first.home / "jobs" / job["id"] / "attempt-1" / "runtime.json").read_text())

    jobs.restart(daemon_factory, "--gpus=fake:1")
    running = jobs.wait(job["id"], "RUNNING")
    assert (running["attempt"], running["started_at"]) == (1, int(runtime["started_at"] * 1000))
    jobs.file("finish").touch()
    done = jobs.wait(job["id"])
    assert (done["status"], done["exit_code"], done["attempt"]) == ("FAILED", 4, 1)
    assert jobs.file("starts").read_text() == "started\n"  # one process, the adopted one
    runs = jobs.client.get(f"/api/v1/runs?job_id={job['id']}")["runs"]
    assert [(r["attempt"], r["status"]) for r in runs] == [(1, "FAILED")]
    assert jobs.client.get("/api/v1/nodes")["nodes"][0]["gpus"][0]["owner_job_id"] is None


def test_job_that_ends_while_the_daemon_is_down(daemon_factory, tmp_path):
    jobs, first, job = killed_mid_job(daemon_factory, tmp_path,
                                      "while [ ! -e finish ]; do sleep 0.02; done; echo bye; exit 3")
    jobs.file("finish").touch()
    exit_file = first.home / "jobs" / job["id"] / "attempt-1" / "exit.json"
    wait_for(exit_file.exists, what="the shim to record the exit")

    jobs.restart(daemon_factory, "--gpus=fake:1")
    done = jobs.wait(job["id"])
    assert (done["status"], done["exit_code"]) == ("FAILED", 3)
    assert done["finished_at"] is not None
    assert jobs.client.get("/api/v1/nodes")["nodes"][0]["gpus"][0]["owner_job_id"] is None


def test_a_job_whose_shim_has_moved_on_is_not_adopted(daemon_factory, tmp_path):
    # A shim whose job has ended takes the launcher's next job. Should the daemon die after
    # a job ended but before it recorded the end, the restarted daemon must read that end
    # from exit.json, not take the (busy) shim for the job and wait for it.
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    first = jobs.daemon
    job = jobs.sh("while [ ! -e finish ]; do sleep 0.02; done; exit 5", gpu=1)
    jobs.wait(job["id"], "RUNNING")
    attempt = first.home / "jobs" / job["id"] / "attempt-1"
    shim = json.loads((attempt / "runtime.json").read_text())["shim_pid"]
    launcher = psutil.Process(shim).ppid()
    other = tmp_path / "other"
    first.signal(signal.SIGSTOP)  # from here it hears of nothing
    try:
        jobs.file("finish").touch()
        wait_for((attempt / "exit.json").exists, what="the job to end")
        # The launcher lends the idle shim to another job, as if the daemon had asked.
        request = {"op": "spawn", "id": "other", "job_dir": str(other), "argv": ["sleep", "1000"],
                   "cwd": str(tmp_path), "env": {"PATH": os.environ["PATH"]}, "seq": 10**9}
        with open(f"/proc/{launcher}/fd/0", "wb") as requests:  # the launcher's own request pipe
            requests.write(json.dumps(request).encode() + b"\n")
        wait_for((other / "runtime.json").exists, what="the other job to start")
    finally:
        first.signal(signal.SIGKILL)
    first.proc.wait(10)
    sleeper = json.loads((other / "runtime.json").read_text())
    try:
        assert sleeper["shim_pid"] == shim  # the same shim runs the other job now
        jobs.restart(daemon_factory, "--gpus=fake:1")
        done = jobs.wait(job["id"])
        assert (done["status"], done["exit_code"]) == ("FAILED", 5)
        assert psutil.Process(sleeper["pid"]).ppid() == shim  # untouched
    finally:
        os.killpg(sleeper["pgid"], signal.SIGKILL)


def test_stopping_the_scheduler_pauses_dispatching(jobs):
    running = jobs.sh("while [ ! -e go ]; do sleep 0.02; done", gpu=1)
    jobs.wait(running["id"], "RUNNING")
    assert jobs.client.post("/api/v1/actors/scheduler/stop")["actor"]["state"] == "STOPPED"
    queued = jobs.sh("echo later", gpu=1)
    time.sleep(2.5)  # longer than a scheduler tick
    assert jobs.get(queued["id"])["status"] == "QUEUED"
    assert jobs.get(running["id"])["status"] == "RUNNING"  # running jobs go on
    jobs.file("go").touch()
    assert jobs.wait(running["id"])["status"] == "SUCCEEDED"  # and their end is still recorded
    assert jobs.get(queued["id"])["status"] == "QUEUED"
    jobs.client.post("/api/v1/actors/scheduler/start")
    assert jobs.wait(queued["id"])["status"] == "SUCCEEDED"


def test_store_keeps_the_last_lines_and_serves_them_when_files_are_gone(daemon_factory, tmp_path):
    config = tmp_path / "gpuplaned.toml"
    config.write_text("[node]\nlog_tail_lines = 50\n")
    jobs = Jobs.start(daemon_factory, tmp_path / "work", f"--config={config}", "--gpus=none")
    d = jobs.daemon
    job = jobs.sh("i=0; while [ $i -lt 200 ]; do i=$((i+1)); echo \"line $i\"; done", gpu=0)
    jobs.wait(job["id"])

    def stored():
        import sqlite3
        conn = sqlite3.connect(f"file:{d.home / 'gpuplane.db'}?mode=ro", uri=True)
        try:
            return [r[0] for r in conn.execute(
                "SELECT line FROM job_logs WHERE job_id = ? AND stream = 'stdout' ORDER BY offset", (job["id"],))]
        finally:
            conn.close()

    wait_for(lambda: stored() and stored()[-1] == "line 200", what="the tail in the store")
    assert stored() == [f"line {i}" for i in range(151, 201)]
    import shutil
    shutil.rmtree(d.home / "jobs" / job["id"])
    page = jobs.client.get(f"/api/v1/jobs/{job['id']}/logs?stream=stdout&tail=10")["lines"]
    assert [p["line"] for p in page] == [f"line {i}" for i in range(191, 201)]


def test_cancel_right_after_submit_is_not_lost(jobs):
    """The cancel may reach the runner while the shim is still starting the job."""
    for _ in range(5):
        job = jobs.sh("sleep 30", gpu=1, stop_grace_s=0.5)
        jobs.client.post(f"/api/v1/jobs/{job['id']}/cancel")
        assert jobs.wait(job["id"], timeout=10)["status"] == "CANCELLED"
