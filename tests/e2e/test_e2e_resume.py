"""``gpuplanectl job retry JOB --resume-from best|last|CKPT`` on a real daemon: a training script
(SDK metrics and checkpoints) prints what it is told (``GPUPLANE_RESUME_FROM``,
``GPUPLANE_RESUME_STEP``) and goes on from that step; each resumed attempt's run records
``resumed_from`` and ``resume_step``, the first link of its checkpoints' parent chain. A plain
retry starts afresh. Refusals: an unknown checkpoint, another job's, a job with none yet, a
deleted one, a file gone."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import Jobs, wait_for

from gpuplaned.protocol.errors import ApiError

pytestmark = pytest.mark.e2e

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"

TRAIN = textwrap.dedent("""
    import os
    import gpuplane
    told, at = os.environ.get("GPUPLANE_RESUME_FROM"), os.environ.get("GPUPLANE_RESUME_STEP")
    print(f"resume {told} {at}", flush=True)
    start = int(at) if at else 0
    run = gpuplane.init()
    os.makedirs("ck", exist_ok=True)
    for step in range(start + 10, start + 31, 10):
        path = f"ck/a{os.environ['GPUPLANE_ATTEMPT']}-{step}.bin"
        with open(path, "wb") as f:
            f.write(b"x" * step)
        run.log({"val/loss": abs(step - 20) / 100 + 0.1}, step=step)  # best at step 20
        run.log_checkpoint(path, step=step)
    run.finish()
""")


def _ctl(jobs: Jobs, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuplanectl", *args], env=jobs.daemon.env, cwd=jobs.workdir,
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def _said(jobs: Jobs, job_id: str, attempt: int) -> str:
    lines = jobs.client.get(f"/api/v1/jobs/{job_id}/logs?attempt={attempt}&stream=stdout")["lines"]
    return lines[0]["line"]


def _checkpoints(jobs: Jobs, run_id: str, count: int = 3) -> dict[int, dict]:
    found = wait_for(lambda: (c := jobs.client.get(f"/api/v1/runs/{run_id}/checkpoints")["checkpoints"])
                     and len(c) == count and c, timeout=20, what=f"{count} checkpoints of {run_id}")
    return {ck["step"]: ck for ck in found}


def _retry(jobs: Jobs, job_id: str, *flags: str) -> dict:
    retried = _ctl(jobs, "job", "retry", job_id, *flags)
    assert retried.returncode == 0, retried.stderr
    done = jobs.wait(job_id, timeout=30)
    assert done["status"] == "SUCCEEDED", jobs.daemon.log()
    return done


def test_retry_resumes_from_best_last_or_an_id(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    jobs.client.request("PUT", "/api/v1/primary-metric", {"metric": "val/loss"})
    (jobs.workdir / "train.py").write_text(TRAIN)
    job = jobs.submit([sys.executable, "train.py"], gpu=0, env={"PYTHONPATH": str(SDK_DIR)})
    first = jobs.wait(job["id"], timeout=30)
    assert first["status"] == "SUCCEEDED" and first["resume_from"] is None, jobs.daemon.log()
    assert _said(jobs, job["id"], 1) == "resume None None"
    one = _checkpoints(jobs, first["run_id"])

    best = _retry(jobs, job["id"], "--resume-from", "best")  # attempt 2: from step 20 of attempt 1
    assert best["resume_from"] == one[20]["id"]
    assert _said(jobs, job["id"], 2) == f"resume {one[20]['path']} 20"
    run = jobs.client.get(f"/api/v1/runs/{best['run_id']}")["run"]
    assert (run["resumed_from"], run["resume_step"]) == (one[20]["id"], 20)
    two = _checkpoints(jobs, best["run_id"])
    assert sorted(two) == [30, 40, 50] and two[30]["parent_id"] == one[20]["id"]  # the resume chain

    last = _retry(jobs, job["id"], "--resume-from", "last")  # attempt 3: the newest saved, step 50 of attempt 2
    assert _said(jobs, job["id"], 3) == f"resume {two[50]['path']} 50"
    assert jobs.client.get(f"/api/v1/runs/{last['run_id']}")["run"]["resumed_from"] == two[50]["id"]

    _retry(jobs, job["id"], "--resume-from", one[10]["id"])  # attempt 4: a named one of its lineage
    assert _said(jobs, job["id"], 4) == f"resume {one[10]['path']} 10"
    fresh = _retry(jobs, job["id"])  # attempt 5: afresh
    assert _said(jobs, job["id"], 5) == "resume None None" and fresh["resume_from"] is None
    assert jobs.client.get(f"/api/v1/runs/{fresh['run_id']}")["run"]["resumed_from"] is None

    other = jobs.submit(["true"], gpu=0)
    jobs.wait(other["id"])
    refusals = [
        ((job["id"], "ck_NOPE"), "not_found", "no checkpoint ck_NOPE"),
        ((other["id"], one[10]["id"]), "conflict", f"checkpoint {one[10]['id']} is job {job['id']}'s, not of job "
                                                   f"{other['id']}'s lineage"),
        ((other["id"], "best"), "conflict", f"job {other['id']} has no checkpoint yet: nothing to resume from"),
        (("job_NOPE", "last"), "not_found", "no job 'job_NOPE'"),
        ((job["id"], "sometimes"), "bad_request", "resume_from: best, last or a checkpoint id (ck_...), got "
                                                  "'sometimes'"),
    ]
    pruned = jobs.client.post(f"/api/v1/runs/{first['run_id']}/checkpoints/prune",
                              {"keep_best": 1, "keep_last": 0, "dry_run": False})
    assert one[10]["id"] in json.dumps(pruned)
    refusals.append(((job["id"], one[10]["id"]), "conflict", f"checkpoint {one[10]['id']} was deleted: its file is "
                                                             "gone"))
    Path(two[40]["path"]).unlink()  # gone behind GPUPlane's back
    refusals.append(((job["id"], two[40]["id"]), "conflict", f"job {job['id']} cannot resume: checkpoint "
                                                             f"{two[40]['id']}'s file {two[40]['path']} is gone"))
    for (job_id, which), code, message in refusals:
        with pytest.raises(ApiError) as refused:
            jobs.client.post(f"/api/v1/jobs/{job_id}/retry", {"resume_from": which})
        assert refused.value.code.value == code and refused.value.message.startswith(message), refused.value
    by_ctl = _ctl(jobs, "job", "retry", other["id"], "--resume-from", one[10]["id"], "--json")
    assert by_ctl.returncode == 1 and json.loads(by_ctl.stdout)["error"]["code"] == "conflict"
    assert jobs.get(job["id"])["attempt"] == 5  # none of them queued it
