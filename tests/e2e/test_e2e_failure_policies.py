"""Failure policies on a real daemon: each acts once per trigger, with an event naming why,
across a kill -9 between the trigger and the action and after the action."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import Jobs, wait_for

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"
GPUS = "--gpus=fake:1"

OOM = """
    echo "$BATCH" >> seen
    echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2
    exit 1
"""


@pytest.fixture
def jobs(daemon_factory, tmp_path):
    return Jobs.start(daemon_factory, tmp_path / "work", GPUS)


def _events(jobs: Jobs, job_id: str, kind: str) -> list[dict]:
    return list(reversed(jobs.client.get(f"/api/v1/events?type={kind}&job_id={job_id}&limit=100")["events"]))


def _ended_for_good(jobs: Jobs, job_id: str, status: str, actions: int) -> dict:
    """The job in ``status`` with ``actions`` POLICY_ACTION events and nothing left to do."""
    wait_for(lambda: len(_events(jobs, job_id, "POLICY_ACTION")) >= actions
             and jobs.get(job_id)["status"] == status, timeout=30, what=f"{job_id} {status} after {actions} actions")
    return jobs.get(job_id)


def test_on_oom_retries_n_times_halving_the_batch(jobs):
    job = jobs.sh(OOM, env={"BATCH": "64"}, on_oom={"retry": 2, "env": {"BATCH": "half"}})
    wait_for(lambda: len(_events(jobs, job["id"], "POLICY_SKIPPED")) == 1, timeout=30, what="retries spent")
    done = jobs.get(job["id"])
    assert (done["status"], done["failure_reason"], done["attempt"]) == ("FAILED", "OOM", 3)
    assert jobs.file("seen").read_text().split() == ["64", "32", "16"]
    actions = _events(jobs, job["id"], "POLICY_ACTION")
    assert [a["context"]["action"] for a in actions] == ["requeue", "requeue"]
    assert [a["context"]["env"] for a in actions] == [{"BATCH": "32"}, {"BATCH": "16"}]
    ooms = [e["id"] for e in _events(jobs, job["id"], "OOM")]
    assert [a["context"]["trigger_event_id"] for a in actions] == ooms[:2]
    assert "retry 1 of 2 with BATCH 64 -> 32" in actions[0]["message"]
    [skipped] = _events(jobs, job["id"], "POLICY_SKIPPED")
    assert "retries are spent" in skipped["context"]["reason"]
    assert done["on_oom"] == {"retry": 2, "env": {"BATCH": "half"}}


def test_on_oom_refuses_a_variable_that_is_no_integer_at_submit(jobs):
    from gpuplaned.protocol.errors import ApiError

    with pytest.raises(ApiError) as refused:
        jobs.sh(OOM, env={"BATCH": "big"}, on_oom={"retry": 1, "env": {"BATCH": "half"}})
    assert refused.value.details["field"] == "on_oom" and "not a positive integer" in refused.value.message
    with pytest.raises(ApiError):
        jobs.sh(OOM, on_oom={"retry": 1, "env": {"BATCH": "half"}})  # a variable the job does not have


def test_a_kill_between_the_trigger_and_the_action_acts_once(daemon_factory, jobs):
    assert jobs.daemon.run_ctl("stop", "policies").returncode == 0
    job = jobs.sh(OOM, env={"BATCH": "8"}, on_oom={"retry": 1, "env": {"BATCH": "half"}})
    jobs.wait(job["id"], "FAILED")
    wait_for(lambda: _events(jobs, job["id"], "OOM"), what="the OOM event")
    assert _events(jobs, job["id"], "POLICY_ACTION") == []  # the trigger is recorded; nothing acted
    jobs.daemon.kill()
    jobs.restart(daemon_factory, GPUS)
    wait_for(lambda: _events(jobs, job["id"], "POLICY_SKIPPED"), timeout=30, what="the second OOM's skip")
    jobs.daemon.kill()  # and after the action: a restart acts on nothing again
    jobs.restart(daemon_factory, GPUS)
    jobs.daemon.run_ctl("events")  # a round trip after the policies' first pass
    done = _ended_for_good(jobs, job["id"], "FAILED", 1)
    assert done["attempt"] == 2
    assert jobs.file("seen").read_text().split() == ["8", "4"]
    assert len(_events(jobs, job["id"], "POLICY_ACTION")) == 1
    assert len(_events(jobs, job["id"], "POLICY_SKIPPED")) == 1


NAN_SCRIPT = """
import signal, sys, time, gpuplane
run = gpuplane.init()

def save(step):
    path = f"ck-{step}.bin"
    with open(path, "wb") as f:
        f.write(b"x" * step)
    run.log_checkpoint(path, step=step)

def on_term(*_):  # saves on the way out, as a script that checkpoints on SIGTERM does
    save(4)
    run.finish()
    sys.exit(0)

signal.signal(signal.SIGTERM, on_term)
for step in range(3):
    run.log({"loss": 1.0 / (step + 1)}, step=step)
save(2)
run.log({"loss": float("nan")}, step=3)
time.sleep(60)
"""


def test_on_nan_stops_the_job_and_keeps_the_last_good_checkpoint(jobs):
    job = jobs.submit([sys.executable, "-c", NAN_SCRIPT], gpu=0, env={"PYTHONPATH": str(SDK_DIR)},
                      on_nan="stop", stop_grace_s=5, retention={"keep_best": 0, "keep_last": 1})
    done = _ended_for_good(jobs, job["id"], "CANCELLED", 1)
    [action] = _events(jobs, job["id"], "POLICY_ACTION")
    [nan] = _events(jobs, job["id"], "LOSS_NAN")
    assert action["context"]["action"] == "stop" and action["context"]["trigger_event_id"] == nan["id"]
    assert action["context"]["policy"] == "on_nan" and "NaN" in action["context"]["reason"]
    assert done["attempt"] == 1
    checkpoints = wait_for(lambda: (c := jobs.client.get(f"/api/v1/runs/{done['run_id']}/checkpoints")["checkpoints"])
                           and len(c) == 2 and c, what="both checkpoints")
    by_step = {c["step"]: c for c in checkpoints}
    assert action["context"]["kept_checkpoint"] == by_step[2]["id"]
    plan = jobs.client.post(f"/api/v1/runs/{done['run_id']}/checkpoints/prune",
                            {"keep_best": 0, "keep_last": 1, "dry_run": True})
    [kept] = [k for k in plan["kept"] if k["checkpoint_id"] == by_step[2]["id"]]
    assert any("kept by policy" in why for why in kept["reasons"]), plan
    assert by_step[2]["deleted_at"] is None  # retention (keep_last = 1) would have taken it but for the policy
    assert jobs.file("ck-2.bin").exists() and jobs.file("ck-4.bin").exists()


def test_a_job_without_policies_is_left_alone(jobs):
    job = jobs.sh(OOM, env={"BATCH": "8"})
    jobs.wait(job["id"], "FAILED")
    jobs.daemon.run_ctl("events")
    assert _events(jobs, job["id"], "POLICY_ACTION") == [] and jobs.get(job["id"])["attempt"] == 1


PREEMPTED = """
import os, signal, time, gpuplane
told = os.environ.get("GPUPLANE_RESUME_FROM")
open(f"attempt-{os.environ['GPUPLANE_ATTEMPT']}", "w").write(str(told))
if told:
    raise SystemExit(0)
run = gpuplane.init()
with open("ck-10.bin", "wb") as f:
    f.write(b"x" * 10)
run.log({"loss": 0.5}, step=10)
run.log_checkpoint("ck-10.bin", step=10)
run.flush() if hasattr(run, "flush") else None
open("pid", "w").write(str(os.getpid()))
time.sleep(60)
"""


def test_on_preempted_requeues_resuming_from_the_last_checkpoint(jobs):
    import os
    import signal

    job = jobs.submit([sys.executable, "-c", PREEMPTED], gpu=0, env={"PYTHONPATH": str(SDK_DIR)},
                      on_preempted={"resume_from": "last"})
    wait_for(lambda: jobs.file("pid").exists() and (run := jobs.get(job["id"])["run_id"])
             and jobs.client.get(f"/api/v1/runs/{run}/checkpoints")["checkpoints"], timeout=30, what="a checkpoint")
    [ckpt] = jobs.client.get(f"/api/v1/runs/{jobs.get(job['id'])['run_id']}/checkpoints")["checkpoints"]
    os.kill(int(jobs.file("pid").read_text()), signal.SIGKILL)  # from outside, as a preemption
    done = _ended_for_good(jobs, job["id"], "SUCCEEDED", 1)
    [action] = _events(jobs, job["id"], "POLICY_ACTION")
    assert action["context"]["policy"] == "on_preempted" and "SIGNAL(SIGKILL)" in action["context"]["reason"]
    assert action["context"]["resume_from"] == ckpt["id"]
    assert done["attempt"] == 2 and jobs.file("attempt-2").read_text() == ckpt["path"]


SILENT = """
    echo "attempt $GPUPLANE_ATTEMPT" >> starts
    [ "$GPUPLANE_ATTEMPT" = 2 ] && exit 0
    exec sleep 60
"""


def test_on_stalled_restarts_a_silent_job_once_the_stall_lasted(daemon_factory, tmp_path):
    config = tmp_path / "gpuplaned.toml"
    config.write_text("[detector]\nstall_after_s = 1\ninterval_s = 0.1\n")
    jobs = Jobs.start(daemon_factory, tmp_path / "work", GPUS, f"--config={config}")
    job = jobs.sh(SILENT, gpu=0, stop_grace_s=1, on_stalled={"after": "2s", "action": "restart"})
    done = _ended_for_good(jobs, job["id"], "SUCCEEDED", 2)
    [stalled] = _events(jobs, job["id"], "RUN_STALLED")
    restart, restarted = _events(jobs, job["id"], "POLICY_ACTION")
    assert (restart["context"]["action"], restarted["context"]["action"]) == ("restart", "restarted")
    assert restart["context"]["trigger_event_id"] == stalled["id"]
    assert restart["ts"] - stalled["ts"] >= 1000 - 200  # it waited for the stall to last 2 s in all
    assert done["attempt"] == 2 and jobs.file("starts").read_text().split("\n")[:2] == ["attempt 1", "attempt 2"]


LOSABLE = """
    echo "attempt $GPUPLANE_ATTEMPT" >> starts
    [ "$GPUPLANE_ATTEMPT" = 2 ] && exit 0
    exec sleep 60
"""


def test_on_lost_requeues_a_job_nothing_tells_the_end_of(daemon_factory, jobs):
    import json
    import os
    import signal

    job = jobs.sh(LOSABLE, gpu=1, on_lost="requeue")
    jobs.wait(job["id"], "RUNNING")
    wait_for(jobs.file("starts").exists, what="the job to start")
    runtime_file = jobs.daemon.home / "jobs" / job["id"] / "attempt-1" / "runtime.json"
    runtime = wait_for(lambda: runtime_file.exists() and json.loads(runtime_file.read_text()), what="runtime.json")
    jobs.daemon.kill()  # the launcher goes with it
    for pid in (runtime["shim_pid"], runtime["pid"]):  # then the job and its shim: no exit record is left
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    jobs.restart(daemon_factory, GPUS)
    done = _ended_for_good(jobs, job["id"], "SUCCEEDED", 1)
    [failed] = _events(jobs, job["id"], "JOB_FAILED")
    [action] = _events(jobs, job["id"], "POLICY_ACTION")
    assert failed["context"]["failure_reason"] == "LOST"
    assert (action["context"]["policy"], action["context"]["trigger_event_id"]) == ("on_lost", failed["id"])
    assert done["attempt"] == 2 and jobs.file("starts").read_text().split("\n")[:2] == ["attempt 1", "attempt 2"]
