"""A node with ``[node] runner = "slurm"``: a real daemon hands its jobs to the private Slurm
fixture (a real slurmctld, slurmd and munge, fake GPUs), and our shim runs one-shot in each
allocation."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from helpers import Jobs, wait_for

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"
TB_SCRIPT = """\
from torch.utils.tensorboard import SummaryWriter
w = SummaryWriter("tb/exp")
for step in range(5):
    w.add_scalar("train/loss", 1.0 / (step + 1), step)
w.close()
"""
SDK_SCRIPT = """\
import gpuplane
run = gpuplane.init()
for step in range(5):
    run.log({"loss": 1.0 / (step + 1)})
run.finish()
"""



def slurm_node(daemon_factory, cluster, *, env: dict[str, str] | None = None, **slurm: object) -> Jobs:
    """A READY daemon whose one node runs its jobs on ``cluster`` (``env``: more of the
    daemon's environment; ``slurm``: ``[slurm]`` keys)."""
    settings = {"poll_interval_s": 0.2, "poll_max_s": 1.0, "command_timeout_s": 5.0, "lost_after_s": 5.0,
                "signal_before_s": 0, **slurm}
    daemon = daemon_factory(env={"SLURM_CONF": str(cluster.conf), **(env or {})})
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


def test_a_job_runs_through_slurm_with_its_output_and_exit_code(daemon_factory, slurm, tmp_path):
    shared = tmp_path / "shared"  # the cluster's shared filesystem; the store stays in the home
    jobs = slurm_node(daemon_factory, slurm, job_dir=str(shared))
    node = jobs.client.get("/api/v1/nodes")["nodes"][0]
    assert (node["name"], node["runner"]) == ("hpc", "slurm")

    job = jobs.sh("echo to-stdout; echo to-stderr >&2; echo $SLURM_JOB_ID > slurm_id; exit 3")
    done = jobs.wait(job["id"], timeout=60)
    assert (done["status"], done["exit_code"], done["failure_reason"]) == ("FAILED", 3, "EXIT_CODE")
    slurm_id = jobs.file("slurm_id").read_text().strip()
    assert (shared / "jobs" / job["id"] / "attempt-1" / "exit.json").exists()
    assert not (jobs.daemon.home / "jobs" / job["id"]).exists()
    assert slurm_id.isdigit()  # it ran inside a Slurm allocation
    shown = jobs.daemon.run_ctl("logs", job["id"], "--full")
    assert shown.returncode == 0, shown.stderr
    assert "to-stdout" in shown.stdout
    # Slurm's own record agrees with ours.
    scontrol = slurm.client("scontrol", "-o", "show", "job", slurm_id).stdout
    assert f"JobName=gp-{job['id']}-1" in scontrol and "ExitCode=3:0" in scontrol

    # The SDK inside the allocation reaches the daemon, and its points land on the job's run.
    (jobs.workdir / "train.py").write_text(SDK_SCRIPT)
    trained = jobs.submit([sys.executable, "train.py"], gpu=0, env={"PYTHONPATH": str(SDK_DIR)})
    assert jobs.wait(trained["id"], timeout=60)["status"] == "SUCCEEDED"
    run_id = jobs.get(trained["id"])["run_id"]
    summary = wait_for(lambda: (s := jobs.client.get(f"/api/v1/runs/{run_id}/summary")["summary"])["metrics"] and s,
                       20, what="the run's metrics")
    assert summary["metrics"]["loss"]["count"] == 5

    # TensorBoard's event files in the shared job's folder reach the job's run too.
    (jobs.workdir / "tb.py").write_text(TB_SCRIPT)
    tb = jobs.submit([sys.executable, "tb.py"], gpu=0, env={"GPUPLANE_TB_DIR": str(jobs.workdir / "tb")})
    assert jobs.wait(tb["id"], timeout=60)["status"] == "SUCCEEDED"
    tb_run = jobs.get(tb["id"])["run_id"]
    wait_for(lambda: (jobs.client.get(f"/api/v1/runs/{tb_run}/summary")["summary"]["metrics"].get("train/loss") or {})
             .get("count") == 5, 30, what="the event file's 5 points")


def test_a_job_waits_with_slurms_reason_and_a_cancel_leaves_no_process(daemon_factory, slurm):
    jobs = slurm_node(daemon_factory, slurm)
    # Another user's job holds the one GPU: ours waits in Slurm, and GPUPlane leaves that job alone.
    foreign = slurm.client("sbatch", "--parsable", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "sleep 300")
    foreign_id = foreign.stdout.strip()
    wait_for(lambda: "RUNNING" in slurm.client("squeue", "-h", "-j", foreign_id, "-o", "%T").stdout, 30,
             what="the foreign job to run")
    holder = jobs.sh("touch started; exec sleep 300", gpu=1)
    wait_for(lambda: jobs.get(holder["id"])["wait_reason"] == "Slurm: Resources", 30,
             what="our job to wait for the foreign one")
    assert "RUNNING" in slurm.client("squeue", "-h", "-j", foreign_id, "-o", "%T").stdout
    slurm.client("scancel", foreign_id)  # its owner's doing, not ours
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


def test_slurm_down_is_a_node_condition_and_no_job_is_lost_or_doubled(daemon_factory, slurm):
    jobs = slurm_node(daemon_factory, slurm, command_timeout_s=2.0)
    job = jobs.sh("touch started; while [ ! -e go ]; do sleep 0.1; done; echo done", gpu=0)
    wait_for(lambda: jobs.file("started").exists(), 60, what="the job to run")
    slurm.pause_controller()  # SIGSTOP: requests wait in its socket, unanswered
    try:
        # Dispatched at once (the node cannot know yet): its sbatch times out while slurmctld
        # holds the request, which it takes once it runs again.
        late = jobs.sh("echo late > late.out", gpu=0)
        node = wait_for(lambda: (n := jobs.client.get("/api/v1/nodes")["nodes"][0])["condition_messages"] and n, 30,
                        what="the node's slurm_unreachable condition")
        assert "slurm_unreachable" in node["condition_messages"]
        assert jobs.get(late["id"])["status"] == "DISPATCHING"
        # Running jobs carry on, and one that started just before Slurm stopped answering is
        # known to run from its runtime.json, squeue or not.
        assert jobs.wait(job["id"], "RUNNING", timeout=30)["status"] == "RUNNING"
        jobs.file("go").touch()
    finally:
        slurm.resume_controller()
    assert jobs.wait(job["id"], timeout=60)["status"] == "SUCCEEDED"
    assert jobs.wait(late["id"], timeout=60)["status"] == "SUCCEEDED"
    assert jobs.file("late.out").read_text() == "late\n"
    wait_for(lambda: not jobs.client.get("/api/v1/nodes")["nodes"][0]["condition_messages"], 30,
             what="the condition to clear")
    types = [e["type"] for e in jobs.client.get("/api/v1/events?limit=200")["events"]]
    assert "NODE_CONDITION_RAISED" in types and "NODE_CONDITION_CLEARED" in types
    names = slurm.client("squeue", "-h", "-t", "all", "-o", "%j").stdout.split()
    assert sorted(names) == sorted([f"gp-{job['id']}-1", f"gp-{late['id']}-1"])  # each once


def test_a_job_that_ended_and_left_squeue_while_the_daemon_was_down_keeps_its_exit_code(daemon_factory,
                                                                                        slurm_factory):
    slurm = slurm_factory(min_job_age=2)  # purged from squeue within ~10 s of its end
    jobs = slurm_node(daemon_factory, slurm)
    job = jobs.sh("touch started; while [ ! -e go ]; do sleep 0.1; done; exit 4", gpu=0)
    wait_for(lambda: jobs.file("started").exists(), 60, what="the job to run")
    jobs.wait(job["id"], "RUNNING")
    jobs.daemon.kill()  # a crash: the job is Slurm's, and runs on
    jobs.file("go").touch()
    wait_for(lambda: not slurm.client("squeue", "-h", "-t", "all", "-o", "%i").stdout.strip(), 60,
             what="the job to leave squeue")
    jobs.restart(lambda: daemon_factory(env={"SLURM_CONF": str(slurm.conf)}))
    done = jobs.wait(job["id"], timeout=60)
    assert (done["status"], done["exit_code"]) == ("FAILED", 4)


PREEMPTIBLE = """\
import os, time, gpuplane
told = os.environ.get("GPUPLANE_RESUME_FROM")
open(f"attempt-{os.environ['GPUPLANE_ATTEMPT']}", "w").write(str(told))
if told:
    raise SystemExit(0)
run = gpuplane.init()
with open("ck-10.bin", "wb") as f:
    f.write(b"x" * 10)
run.log({"loss": 0.5}, step=10)
run.log_checkpoint("ck-10.bin", step=10)
time.sleep(300)
"""


def test_a_preempted_and_requeued_job_resumes_from_its_last_checkpoint(daemon_factory, slurm):
    jobs = slurm_node(daemon_factory, slurm)
    (jobs.workdir / "train.py").write_text(PREEMPTIBLE)
    job = jobs.submit([sys.executable, "train.py"], gpu=1, env={"PYTHONPATH": str(SDK_DIR)},
                      on_preempted={"resume_from": "last"})
    run_id = wait_for(lambda: jobs.get(job["id"])["run_id"], 60, what="the job's run")
    [ckpt] = wait_for(lambda: jobs.client.get(f"/api/v1/runs/{run_id}/checkpoints")["checkpoints"], 60,
                      what="its checkpoint")
    [first] = slurm.client("squeue", "-h", "-n", f"gp-{job['id']}-1", "-o", "%A").stdout.split()
    requeued = slurm.client("scontrol", "requeue", first)  # what a preemption with PreemptMode=REQUEUE does
    assert requeued.returncode == 0, requeued.stderr

    done = wait_for(lambda: (j := jobs.get(job["id"]))["status"] == "SUCCEEDED" and j, 90,
                    what="the job to come back and succeed")
    assert done["attempt"] == 2 and jobs.file("attempt-2").read_text() == ckpt["path"]
    events = jobs.client.get(f"/api/v1/events?job_id={job['id']}&limit=100")["events"]
    [failed] = [e for e in events if e["type"] == "JOB_FAILED"]
    assert failed["context"]["failure_reason"] == "PREEMPTED"
    [action] = [e for e in events if e["type"] == "POLICY_ACTION"]
    assert action["context"]["policy"] == "on_preempted" and action["context"]["resume_from"] == ckpt["id"]
    # Slurm's own rerun of the first attempt was cancelled: the second attempt is a job of its own.
    wanted = [f"gp-{job['id']}-1|CANCELLED", f"gp-{job['id']}-2|COMPLETED"]
    wait_for(lambda: sorted(slurm.client("squeue", "-h", "-t", "all", "-o", "%j|%T").stdout.split()) == wanted, 30,
             what=f"Slurm to say {wanted}")
