"""The detector's rules on a real daemon: a job whose SDK logs NaN raises LOSS_NAN once (and
its run RUN_STARTED and RUN_FINISHED once each, the end pointing at the NaN), and a job that
falls silent raises RUN_STALLED once, each with evidence that resolves through the API (the
metric's points by step, the job's log lines by offset)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from helpers import Jobs, wait_for

pytestmark = pytest.mark.e2e

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"

NAN = textwrap.dedent("""
    import math
    import gpuplane
    run = gpuplane.init()
    for step in range(100):
        run.log({"train/loss": math.nan if step >= 60 else 1.0 / (step + 1)}, step=step)
    run.finish()
""")

SILENT = textwrap.dedent("""
    import os, time
    import gpuplane
    run = gpuplane.init()
    run.log({"train/loss": 0.5}, step=7)
    print("epoch 1 done", flush=True)
    while not os.path.exists("go"):  # stuck: no point, no line, the process alive
        time.sleep(0.05)
    run.finish()
""")


def _events(jobs: Jobs, type_: str, job_id: str) -> list[dict]:
    return jobs.client.get(f"/api/v1/events?type={type_}&job_id={job_id}")["events"]


def _detector(jobs: Jobs) -> dict:
    return next(a for a in jobs.client.get("/api/v1/actors")["actors"] if a["name"] == "detector")["stats"]


def _metric_resolves(jobs: Jobs, pointer: dict) -> None:
    a, b = pointer["steps"]
    got = jobs.client.get(f"/api/v1/runs/{pointer['run_id']}/series?name={pointer['name']}&start={a}&end={b}")
    nan = set(got["nonfinite"]["NaN"])
    stored = ["NaN" if k in nan else v for k, v in enumerate(got["value"])]
    assert got["step"][0] == a and got["step"][-1] == b and stored[0] == pointer["values"][0]


def test_nan_and_stall_raise_once_with_evidence(daemon_factory, tmp_path):
    config = tmp_path / "gpuplaned.toml"
    config.write_text("[detector]\nstall_after_s = 1.5\ninterval_s = 0.1\n")
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1", f"--config={config}")
    (jobs.workdir / "nan.py").write_text(NAN)
    (jobs.workdir / "silent.py").write_text(SILENT)
    env = {"PYTHONPATH": str(SDK_DIR)}

    job = jobs.submit([sys.executable, "nan.py"], gpu=0, env=env)
    done = jobs.wait(job["id"], timeout=30)
    assert done["status"] == "SUCCEEDED", jobs.daemon.log()
    (nan,) = wait_for(lambda: _events(jobs, "LOSS_NAN", job["id"]), what="LOSS_NAN")
    (pointer,) = nan["context"]["evidence"]
    assert pointer == {"kind": "metric", "run_id": done["run_id"], "name": "train/loss", "steps": [60, 60],
                       "values": ["NaN"]}
    _metric_resolves(jobs, pointer)
    (finished,) = wait_for(lambda: _events(jobs, "RUN_FINISHED", job["id"]), what="RUN_FINISHED")
    assert finished["run_id"] == done["run_id"] and finished["context"]["status"] == "SUCCEEDED"
    assert {"kind": "event", "id": nan["id"]} in finished["context"]["evidence"]
    assert len(_events(jobs, "RUN_STARTED", job["id"])) == 1

    job = jobs.submit([sys.executable, "silent.py"], gpu=0, env=env)
    (stalled,) = wait_for(lambda: _events(jobs, "RUN_STALLED", job["id"]), timeout=20, what="RUN_STALLED")
    assert jobs.get(job["id"])["status"] == "RUNNING"
    log, metric = stalled["context"]["evidence"]
    assert log["kind"] == "log" and log["stream"] == "stdout" and log["attempt"] == 1
    page = jobs.client.get(f"/api/v1/jobs/{job['id']}/logs?stream=stdout&tail=10")
    lines = {line["offset"]: line["line"] for line in page["lines"]}
    assert lines[log["offsets"][0]] == "epoch 1 done"
    assert metric["name"] == "train/loss" and metric["steps"] == [7, 7] and metric["values"] == [0.5]
    _metric_resolves(jobs, metric)
    passes = _detector(jobs)["passes"]  # still silent for 20 more passes: no second event
    wait_for(lambda: _detector(jobs)["passes"] >= passes + 20, what="20 more detector passes")
    assert len(_events(jobs, "RUN_STALLED", job["id"])) == 1
    jobs.file("go").touch()
    assert jobs.wait(job["id"], timeout=20)["status"] == "SUCCEEDED"
