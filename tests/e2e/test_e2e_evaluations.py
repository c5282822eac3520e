"""Evaluations on a real daemon (``--gpus fake:1``): a training job's real ``torch.save``
checkpoints registered through SDK batches on its run; ``gpuplanectl eval`` runs a python
command that ``torch.load``s one and writes ``$GPUPLANE_EVAL_RESULT``: the evaluation SUCCEEDED
with those metrics, an EVALUATION_FINISHED event, and the checkpoint's and experiment's lists.
A bad result file fails it with the reason; ``run.log_evaluation`` is the other way in; a job's
``evaluate = {every = "best"}`` policy queues one for each new best checkpoint, never a NaN one."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import Jobs, wait_for

pytestmark = pytest.mark.e2e

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"

SCORE = textwrap.dedent("""
    import json, os, sys
    import torch
    assert sys.argv[1] == os.environ["GPUPLANE_CHECKPOINT"], (sys.argv, os.environ["GPUPLANE_CHECKPOINT"])
    state = torch.load(sys.argv[1])
    result = {"accuracy": float(state["w"].mean()), "step": state["step"]}
    with open(os.environ["GPUPLANE_EVAL_RESULT"], "w") as f:
        json.dump(result, f)
""")


def _ctl(jobs: Jobs, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuplanectl", *args], env=jobs.daemon.env, cwd=jobs.workdir,
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def _training_run(jobs: Jobs, **fields) -> tuple[dict, str]:
    """A training job that waits for a file; its run joined by a session of experiment p/e."""
    job = jobs.submit([sys.executable, "-c", "import os, time\nwhile not os.path.exists('stop'): time.sleep(0.05)"],
                      gpu=0, **fields)
    run_id = jobs.wait(job["id"], "RUNNING")["run_id"]
    opened = jobs.client.post("/api/v1/sessions", {"run_id": run_id, "project": "p", "experiment": "e"})
    return job, opened["session_id"]


def _save(jobs: Jobs, session: str, seq: int, step: int, loss: float) -> str:
    """A real torch.save checkpoint at ``step`` and ``val/loss`` there, in one SDK batch; its id."""
    path = jobs.workdir / f"model-{step}.pt"
    torch.save({"step": step, "w": torch.full((64,), step / 100)}, path)
    jobs.client.post(f"/api/v1/sessions/{session}/batches", {
        "seq": seq, "metrics": {"val/loss": {"step": [step], "ts": [1000 + step], "value": [loss]}},
        "checkpoints": [{"path": str(path), "step": step}]})
    events = jobs.client.get("/api/v1/events?type=CHECKPOINT_CREATED&limit=1000")["events"]
    return next(e["context"]["checkpoint_id"] for e in events if e["context"]["path"] == str(path))


def _evaluations(jobs: Jobs, checkpoint_id: str) -> list[dict]:
    return jobs.client.get(f"/api/v1/checkpoints/{checkpoint_id}/evaluations")["evaluations"]


def _ended(jobs: Jobs, checkpoint_id: str, count: int = 1) -> list[dict]:
    def done():
        found = _evaluations(jobs, checkpoint_id)
        return found if len(found) == count and all(e["finished_at"] for e in found) else None

    return wait_for(done, timeout=30, what=f"{count} ended evaluation(s) of {checkpoint_id}")


@pytest.fixture
def jobs(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    (jobs.workdir / "score.py").write_text(SCORE)
    jobs.client.request("PUT", "/api/v1/primary-metric", {"metric": "val/loss"})
    return jobs


def test_gpuplanectl_eval_scores_a_torch_checkpoint(jobs):
    job, session = _training_run(jobs)
    ck = _save(jobs, session, 0, 20, 0.4)

    queued = _ctl(jobs, "eval", ck, "--gpu", "0", "--suite", "smoke", "--dataset", "val", "--dataset-version", "v2",
                  "--", sys.executable, "score.py", "{checkpoint}")
    assert queued.returncode == 0, queued.stderr
    eval_id, eval_job, status = queued.stdout.split()
    assert eval_id.startswith("eval_") and eval_job.startswith("job_") and status in ("QUEUED", "DISPATCHING")
    done = jobs.wait(eval_job, timeout=30)
    assert (done["status"], done["type"], done["cwd"]) == ("SUCCEEDED", "EVALUATE", str(jobs.workdir)), \
        jobs.daemon.log()
    [ev] = _ended(jobs, ck)
    path = str(jobs.workdir / "model-20.pt")
    assert {k: ev[k] for k in ("id", "status", "metrics", "error", "suite", "dataset", "dataset_version", "job_id",
                               "run_id", "checkpoint_path", "checkpoint_step")} == {
        "id": eval_id, "status": "SUCCEEDED", "metrics": {"accuracy": pytest.approx(0.2), "step": 20.0},
        "error": None, "suite": "smoke", "dataset": "val", "dataset_version": "v2", "job_id": eval_job,
        "run_id": done["run_id"], "checkpoint_path": path, "checkpoint_step": 20}
    assert 0 < ev["runtime_s"] < 30 and ev["started_at"] <= ev["finished_at"]

    [event] = jobs.client.get(f"/api/v1/events?type=EVALUATION_FINISHED&job_id={eval_job}")["events"]
    assert (event["run_id"], event["step"], event["severity"]) == (jobs.get(job["id"])["run_id"], 20, "info")
    assert event["context"]["checkpoint_id"] == ck and event["context"]["metrics"] == ev["metrics"]
    assert event["context"]["evaluation_id"] == eval_id
    # Logged at its severity too: an evaluation's result is no warning in the daemon's log.
    logged = [line for line in jobs.daemon.log().splitlines() if "event EVALUATION_FINISHED" in line]
    assert logged and all(" INFO " in line for line in logged), logged

    exp = jobs.client.get("/api/v1/projects/p/experiments")["experiments"][0]["id"]
    listed = jobs.client.get(f"/api/v1/experiments/{exp}/evaluations")
    assert [e["id"] for e in listed["evaluations"]] == [eval_id] and listed["experiment_id"] == exp
    assert jobs.client.get("/api/v1/experiments/e/evaluations?project=p")["evaluations"][0]["id"] == eval_id
    table = _ctl(jobs, "evals", ck)
    assert table.returncode == 0 and "SUCCEEDED" in table.stdout and "accuracy=0.2" in table.stdout, table.stdout

    # A bad result file: FAILED, the reason in words; nothing written: FAILED, saying so.
    cases = {"open(os.environ['GPUPLANE_EVAL_RESULT'], 'w').write('[1, 2]')":
             "the result file: must be a JSON object of metric names to numbers, got an array",
             "open(os.environ['GPUPLANE_EVAL_RESULT'], 'w').write('{\"acc\": \"high\"}')":
             "the result file: metrics.acc: must be a number, got the string 'high'",
             "pass": "no metrics: the job wrote no $GPUPLANE_EVAL_RESULT file and logged no evaluation "
                     "(run.log_evaluation)"}
    for code in cases:
        bad = jobs.client.post(f"/api/v1/checkpoints/{ck}/evaluations",
                               {"command": [sys.executable, "-c", f"import os; {code}"], "gpu": 0})
        assert jobs.wait(bad["job"]["id"], timeout=30)["status"] == "SUCCEEDED"
    found = _ended(jobs, ck, 4)
    assert [(e["status"], e["error"], e["metrics"]) for e in found[1:]] == [("FAILED", why, {})
                                                                            for why in cases.values()]
    finished = jobs.client.get("/api/v1/events?type=EVALUATION_FINISHED")["events"]
    assert sorted((e["context"]["status"], e["severity"]) for e in finished) == [("FAILED", "info")] * 3 + [
        ("SUCCEEDED", "info")]  # an evaluation's end is news, not a warning: its status says how it went

    (jobs.workdir / "stop").touch()
    jobs.wait(job["id"])


def test_log_evaluation_through_the_sdk_and_refusals(jobs):
    job, session = _training_run(jobs)
    ck = _save(jobs, session, 0, 10, 0.5)
    script = ("import gpuplane\nrun = gpuplane.init()\nrun.log_evaluation({'acc': 0.75, 'per': {'cls': 3}})\n"
              "run.log_evaluation({'acc': 0.8, 'bad': 'x'})\nrun.log_evaluation({'f1': 0.5})\nrun.finish()")
    queued = _ctl(jobs, "eval", ck, "--gpu", "0", "--env", f"PYTHONPATH={SDK_DIR}", "--", sys.executable, "-c", script)
    assert queued.returncode == 0, queued.stderr
    eval_job = queued.stdout.split()[1]
    assert jobs.wait(eval_job, timeout=30)["status"] == "SUCCEEDED", jobs.daemon.log()
    [ev] = _ended(jobs, ck)
    assert (ev["status"], ev["metrics"]) == ("SUCCEEDED", {"acc": 0.75, "per/cls": 3.0, "f1": 0.5})  # 'bad': skipped

    unknown = _ctl(jobs, "eval", "ck_NOPE", "--", "true")
    assert unknown.returncode == 1 and "no checkpoint ck_NOPE" in unknown.stderr
    (jobs.workdir / "model-10.pt").unlink()
    gone = _ctl(jobs, "eval", ck, "--json", "--", "true")
    assert gone.returncode == 1 and json.loads(gone.stdout)["error"]["code"] == "conflict"
    assert "is gone" in json.loads(gone.stdout)["error"]["message"]
    (jobs.workdir / "stop").touch()
    jobs.wait(job["id"])


def test_the_evaluate_policy_queues_each_new_best(jobs):
    quick = ("import json, os, re, sys; step = int(re.search(r'model-(\\d+)', sys.argv[1])[1]); "
             "json.dump({'step': step}, open(os.environ['GPUPLANE_EVAL_RESULT'], 'w'))")  # no torch: faster
    policy = {"every": "best", "command": [sys.executable, "-c", quick, "{checkpoint}"]}
    job, session = _training_run(jobs, evaluate=policy)
    assert jobs.get(job["id"])["evaluate"] == policy
    ranked = {}
    for seq, (step, loss) in enumerate(((10, 0.9), (20, 1.2), (30, math.nan), (40, 0.1))):
        ranked[step] = _save(jobs, session, seq, step, loss)
        if step in (10, 40):  # the run's best when it arrives: evaluated
            [ev] = _ended(jobs, ranked[step])
            assert (ev["status"], ev["metrics"]["step"]) == ("SUCCEEDED", float(step)), ev
    assert _evaluations(jobs, ranked[20]) == [] and _evaluations(jobs, ranked[30]) == []  # not best; NaN never

    (jobs.workdir / "stop").touch()
    jobs.wait(job["id"])
    (jobs.workdir / "stop").unlink()  # two CPU places: the next training job's, and its evaluations'

    each, session = _training_run(jobs, evaluate={**policy, "every": "each"})
    for seq, (step, loss) in enumerate(((60, 0.9), (70, 1.5))):  # the second is no best: evaluated all the same
        [ev] = _ended(jobs, _save(jobs, session, seq, step, loss))
        assert ev["metrics"] == {"step": float(step)}
    (jobs.workdir / "stop").touch()
    jobs.wait(each["id"])


def test_an_evaluation_that_ends_while_the_daemon_is_down_is_read_after_its_restart(jobs, daemon_factory):
    job, session = _training_run(jobs)
    ck = _save(jobs, session, 0, 10, 0.5)
    script = ("import json, os, time\nwhile not os.path.exists('go'): time.sleep(0.02)\n"
              "json.dump({'acc': 1}, open(os.environ['GPUPLANE_EVAL_RESULT'], 'w'))\nopen('wrote', 'w').close()")
    queued = jobs.client.post(f"/api/v1/checkpoints/{ck}/evaluations",
                              {"command": [sys.executable, "-c", script], "gpu": 0})
    eval_job = queued["job"]["id"]
    assert queued["evaluation"]["status"] == "QUEUED"
    jobs.wait(eval_job, "RUNNING")
    wait_for(lambda: _evaluations(jobs, ck)[0]["status"] == "RUNNING", what="the evaluation RUNNING")
    jobs.daemon.kill()
    (jobs.workdir / "go").touch()
    wait_for(lambda: (jobs.workdir / "wrote").exists(), what="the evaluation to write its result")
    jobs.restart(daemon_factory, "--gpus=fake:1")  # the runner reads the end (and the result) of the adopted job
    assert jobs.wait(eval_job, timeout=30)["status"] == "SUCCEEDED", jobs.daemon.log()
    [ev] = _ended(jobs, ck)
    assert (ev["status"], ev["metrics"], ev["job_id"]) == ("SUCCEEDED", {"acc": 1.0}, eval_job)
    (jobs.workdir / "stop").touch()
    jobs.wait(job["id"])
