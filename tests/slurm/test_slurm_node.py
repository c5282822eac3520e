"""A node with ``[node] runner = "slurm"``: a real daemon hands its jobs to the private Slurm
fixture (a real slurmctld, slurmd and munge, fake GPUs), and our shim runs one-shot in each
allocation."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from helpers import Jobs, wait_for



def slurm_node(daemon_factory, cluster, **slurm: object) -> Jobs:
    """A READY daemon whose one node runs its jobs on ``cluster``."""
    settings = {"poll_interval_s": 0.2, "poll_max_s": 1.0, "command_timeout_s": 5.0, "lost_after_s": 5.0,
                "signal_before_s": 0, **slurm}
    daemon = daemon_factory(env={"SLURM_CONF": str(cluster.conf)})
    config = daemon.root / "config" / "gpuplane" / "gpuplaned.toml"
    config.parent.mkdir(parents=True)
    config.write_text(textwrap.dedent("""\
        [node]
        name = "hpc"
        runner = "slurm"
        [slurm]
        """) + "".join(f"{key} = {value!r}\n".replace("'", '"') for key, value in settings.items()))
    daemon.start().wait_ready()
    jobs = Jobs(daemon, daemon.root / "work")
    jobs.wait_node()
    return jobs


def test_a_job_runs_through_slurm_with_its_output_and_exit_code(daemon_factory, slurm):
    jobs = slurm_node(daemon_factory, slurm)
    node = jobs.client.get("/api/v1/nodes")["nodes"][0]
    assert (node["name"], node["runner"]) == ("hpc", "slurm")

    job = jobs.sh("echo to-stdout; echo to-stderr >&2; echo $SLURM_JOB_ID > slurm_id; exit 3")
    done = jobs.wait(job["id"], timeout=60)
    assert (done["status"], done["exit_code"], done["failure_reason"]) == ("FAILED", 3, "EXIT_CODE")
    slurm_id = jobs.file("slurm_id").read_text().strip()
    assert slurm_id.isdigit()  # it ran inside a Slurm allocation
    shown = jobs.daemon.run_ctl("logs", job["id"], "--full")
    assert shown.returncode == 0, shown.stderr
    assert "to-stdout" in shown.stdout
    # Slurm's own record agrees with ours.
    scontrol = slurm.client("scontrol", "-o", "show", "job", slurm_id).stdout
    assert f"JobName=gp-{job['id']}-1" in scontrol and "ExitCode=3:0" in scontrol

    ok = jobs.sh("exit 0")
    assert jobs.wait(ok["id"], timeout=60)["status"] == "SUCCEEDED"


def test_a_job_waits_with_slurms_reason_and_a_cancel_leaves_no_process(daemon_factory, slurm):
    jobs = slurm_node(daemon_factory, slurm)
    holder = jobs.sh("touch started; exec sleep 300", gpu=1)
    wait_for(lambda: jobs.file("started").exists(), 60, what="the first job to run in its allocation")
    assert jobs.wait(holder["id"], "RUNNING")["status"] == "RUNNING"

    # One fake GPU: the second job is Slurm's to hold, with Slurm's reason.
    second = jobs.sh("echo second > second.out", gpu=1)
    waiting = wait_for(lambda: (j := jobs.get(second["id"]))["wait_reason"] == "Slurm: Resources" and j, 30,
                       what="the second job's wait reason")
    assert waiting["status"] == "DISPATCHING"
    shown = jobs.daemon.run_ctl("job", "show", second["id"])
    assert "Slurm: Resources" in shown.stdout, shown.stdout
    events = jobs.client.get(f"/api/v1/events?job_id={second['id']}")["events"]
    reasons = [e["context"].get("reason") for e in events if e["type"] == "JOB_WAITING"]
    assert reasons.count("Slurm: Resources") == 1  # once per change of reason

    cancelled = jobs.daemon.run_ctl("job", "cancel", holder["id"])
    assert cancelled.returncode == 0, cancelled.stderr
    assert jobs.wait(holder["id"], timeout=60)["status"] == "CANCELLED"
    # Nothing of the first job is left: the second gets the GPU and runs.
    assert jobs.wait(second["id"], timeout=60)["status"] == "SUCCEEDED"
    assert jobs.file("second.out").read_text() == "second\n"
    assert not [pid for pid in slurm.job_processes() if _is_sleep(pid)]


def _is_sleep(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep")
    except OSError:
        return False


def test_slurm_down_is_a_node_condition_and_no_job_is_lost(daemon_factory, slurm):
    jobs = slurm_node(daemon_factory, slurm)
    job = jobs.sh("touch started; while [ ! -e go ]; do sleep 0.1; done; echo done")
    wait_for(lambda: jobs.file("started").exists(), 60, what="the job to run")
    slurm.pause_controller()
    try:
        node = wait_for(lambda: (n := jobs.client.get("/api/v1/nodes")["nodes"][0])["condition_messages"] and n, 30,
                        what="the node's slurm_unreachable condition")
        assert "slurm_unreachable" in node["condition_messages"]
        assert jobs.get(job["id"])["status"] == "RUNNING"  # running jobs carry on
        jobs.file("go").touch()
    finally:
        slurm.resume_controller()
    assert jobs.wait(job["id"], timeout=60)["status"] == "SUCCEEDED"
    wait_for(lambda: not jobs.client.get("/api/v1/nodes")["nodes"][0]["condition_messages"], 30,
             what="the condition to clear")
    types = [e["type"] for e in jobs.client.get("/api/v1/events?limit=200")["events"]]
    assert "NODE_CONDITION_RAISED" in types and "NODE_CONDITION_CLEARED" in types
    assert len(slurm.client("squeue", "-h", "-t", "all", "-o", "%i").stdout.split()) == 1  # never doubled

