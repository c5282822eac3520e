"""The semantic functions on a real daemon: training scripts log real points through the SDK,
a job prints "CUDA out of memory" and exits 1; the diagnosis, comparison and explanation
point at steps and byte offsets that resolve through the API to the same values and lines;
the CLI prints them as a report and, with --json, as the API's body."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest
from helpers import Jobs, wait_for

from gpuplaned.http import openapi
from gpuplaned.protocol.errors import ApiError

pytestmark = pytest.mark.e2e

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"

TRAIN = textwrap.dedent("""
    import math, sys
    import gpuplane
    lr, nan_at = float(sys.argv[1]), int(sys.argv[2])
    run = gpuplane.init(config={"lr": lr, "optimizer": {"name": "adam"}})
    for step in range(300):
        loss = math.nan if 0 <= nan_at <= step else 2.0 * math.exp(-lr * step / 10) + 0.1
        run.log({"train/loss": loss}, step=step)
    run.finish()
""")


def _ctl(jobs: Jobs, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuplanectl", *args], env=jobs.daemon.env, cwd=jobs.workdir,
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def _train(jobs: Jobs, lr: float, nan_at: int = -1) -> str:
    job = jobs.submit([sys.executable, "train.py", str(lr), str(nan_at)], gpu=0, env={"PYTHONPATH": str(SDK_DIR)})
    done = jobs.wait(job["id"], timeout=30)
    assert done["status"] == "SUCCEEDED", jobs.daemon.log()
    run_id = done["run_id"]
    wait_for(lambda: sum(jobs.client.get(f"/api/v1/runs/{run_id}/metrics?names=train/loss&points=1")["series"]
                         .get("train/loss", {}).get("count") or [0]) == 300, timeout=20, what=f"{run_id}'s 300 points")
    return run_id


def _fits(body: dict, schema: str) -> dict:
    """The body as its route documents it (the reply types of ``gpuplaned.protocol``)."""
    doc = openapi.document()
    jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{schema}",
                                     "components": doc["components"]}).validate(body)
    return body


def _resolves(jobs: Jobs, pointer: dict) -> None:
    """A metric pointer's first and last step hold the values it names."""
    a, b = pointer["steps"]
    got = jobs.client.get(f"/api/v1/runs/{pointer['run_id']}/series?name={pointer['name']}&start={a}&end={b}")
    by_step = {s: (None if k in got["nonfinite"]["NaN"] else v) for k, (s, v) in enumerate(zip(got["step"],
                                                                                                got["value"]))}
    values = [None if v == "NaN" else v for v in pointer["values"]]
    assert by_step[a] == pytest.approx(values[0]) and by_step[b] == pytest.approx(values[-1])


def test_diagnose_compare_and_explain(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    (jobs.workdir / "train.py").write_text(TRAIN)
    good, slow, bad = _train(jobs, 0.5), _train(jobs, 0.1), _train(jobs, 0.5, nan_at=150)

    found = _fits(jobs.client.get(f"/api/v1/runs/{good}/diagnosis"), "RunDiagnosis")
    (conv,) = [f for f in found["findings"] if f["kind"] == "convergence"]
    assert conv["facts"]["trend"] in ("converging", "plateaued") and found["run_id"] == good
    assert not [f for f in found["findings"] if f["severity"] == "critical"]
    _resolves(jobs, conv["evidence"][0])

    found = _fits(jobs.client.get(f"/api/v1/runs/{bad}/diagnosis"), "RunDiagnosis")
    nan = found["findings"][0]
    assert nan["severity"] == "critical" and nan["kind"] == "instability" and nan["facts"]["first_bad_step"] == 150
    pointer = nan["evidence"][0]
    assert pointer["steps"][1] == 150 and pointer["values"][-1] == "NaN"
    _resolves(jobs, pointer)

    compared = _fits(jobs.client.get(f"/api/v1/runs/compare?ids={good},{slow}"), "RunComparison")
    assert compared["metric"] == "train/loss" and [r["id"] for r in compared["runs"]] == [good, slow]
    (cfg,) = [f for f in compared["findings"] if f["kind"] == "config"]
    assert cfg["facts"]["diff"] == [{"key": "lr", "a": 0.5, "b": 0.1}]
    (div,) = [f for f in compared["findings"] if f["kind"] == "divergence"]
    assert div["facts"]["divergence"] is not None
    for pointer in div["evidence"]:
        _resolves(jobs, pointer)
    by_time = _fits(jobs.client.get(f"/api/v1/runs/compare?ids={good},{slow}&align=time"), "RunComparison")
    assert by_time["align"] == "time"
    (div,) = [f for f in by_time["findings"] if f["kind"] == "divergence"]
    for pointer in div["evidence"]:  # each run's own stretch of time: its points there
        a, b = pointer["ts"]
        got = jobs.client.get(f"/api/v1/runs/{pointer['run_id']}/series?name=train/loss&x=ts&start={a}&end={b}")
        assert got["count"] >= 1

    oom = jobs.sh("""
        echo "epoch 1 step 10"
        echo "Traceback (most recent call last):" >&2
        echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2
        exit 1
    """, gpu=0)
    assert jobs.wait(oom["id"])["status"] == "FAILED"
    explained = _fits(jobs.client.get(f"/api/v1/jobs/{oom['id']}/explanation"), "FailureExplanation")
    assert explained["cause"] == "oom" and explained["attempt"] == 1
    (log,) = [e for e in explained["findings"][0]["evidence"] if e["kind"] == "log"]
    assert log["stream"] == "stderr" and log["lines"] == [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    stderr = jobs.client.get(f"/api/v1/jobs/{oom['id']}/logs?stream=stderr")["lines"]
    assert {line["offset"]: line["line"] for line in stderr}[log["offsets"][0]] == log["lines"][0]
    assert log["offsets"] == [len("Traceback (most recent call last):\n")] * 2

    # the CLI: a short report, and the structure with --json
    text = _ctl(jobs, "explain", oom["id"])
    assert text.returncode == 0, text.stderr
    assert "out of GPU memory" in text.stdout and f"stderr of {oom['id']} attempt 1, bytes 35-35" in text.stdout
    assert json.loads(_ctl(jobs, "explain", oom["id"], "--json").stdout)["cause"] == "oom"
    text = _ctl(jobs, "diagnose", bad)
    assert text.returncode == 0 and "!! [instability] train/loss became NaN at step 150" in text.stdout, text.stdout
    text = _ctl(jobs, "compare", good, slow)
    assert text.returncode == 0 and "lr: 0.5 -> 0.1" in text.stdout and "BEST train/loss" in text.stdout
    assert json.loads(_ctl(jobs, "compare", good, slow, "--json").stdout)["runs"][1]["id"] == slow

    # refusals: bad ids named (400), unknown ones 404
    refused = _ctl(jobs, "compare", good, "no/pe", "--json")
    assert refused.returncode == 2  # bad_request: a usage error
    assert json.loads(refused.stdout)["error"]["details"]["ids"] == ["no/pe"]
    missing = "run_" + "0" * 26
    assert json.loads(_ctl(jobs, "compare", good, missing, "--json").stdout)["error"]["code"] == "not_found"
    assert json.loads(_ctl(jobs, "diagnose", missing, "--json").stdout)["error"]["code"] == "not_found"
    assert json.loads(_ctl(jobs, "explain", "job_NOPE", "--json").stdout)["error"]["code"] == "not_found"


CKPT_TRAIN = textwrap.dedent("""
    import os
    import gpuplane
    run = gpuplane.init()
    for step in (10, 20, 30):
        path = f"ck-{step}.bin"
        with open(path, "wb") as f:
            f.write(b"x" * step)
        run.log({"val/loss": abs(step - 20) / 100 + 0.1}, step=step)  # best at step 20
        run.log_checkpoint(path, step=step)
    run.finish()
""")


def test_compare_checkpoints(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    jobs.client.request("PUT", "/api/v1/primary-metric", {"metric": "val/loss"})
    (jobs.workdir / "train.py").write_text(CKPT_TRAIN)
    job = jobs.submit([sys.executable, "train.py"], gpu=0, env={"PYTHONPATH": str(SDK_DIR)})
    run_id = jobs.wait(job["id"], timeout=30)["run_id"]
    cks = wait_for(lambda: (c := jobs.client.get(f"/api/v1/runs/{run_id}/checkpoints")["checkpoints"])
                   and len(c) == 3 and c, timeout=20, what="3 checkpoints")
    by_step = {ck["step"]: ck["id"] for ck in cks}
    found = _fits(jobs.client.get(f"/api/v1/checkpoints/compare?ids={by_step[10]},{by_step[20]}"),
                  "CheckpointComparison")
    assert found["metric"] == "val/loss" and found["direction"] == "minimize"
    metric, size, lineage = found["findings"]
    assert metric["facts"]["delta"] == pytest.approx(-0.1) and "better" in metric["claim"]
    assert size["facts"]["delta"] == 10 and lineage["claim"] == f"{by_step[20]} descends from {by_step[10]}"
    for pointer in metric["evidence"]:
        assert jobs.client.get(f"/api/v1/checkpoints/{pointer['id']}")["checkpoint"]["id"] == pointer["id"]
    assert found["next_actions"] == [f"{by_step[20]} has the best val/loss: evaluate or resume from it"]
    for ids, code in ((f"{by_step[10]},{run_id}", 400), (f"{by_step[10]},ck_{'0' * 26}", 404),
                      (by_step[10], 400)):
        with pytest.raises(ApiError) as err:
            jobs.client.get(f"/api/v1/checkpoints/compare?ids={ids}")
        assert err.value.code.value == {400: "bad_request", 404: "not_found"}[code], err.value


TWO_LOSSES = textwrap.dedent("""
    import math, sys
    import gpuplane
    parts_at = int(sys.argv[1])
    run = gpuplane.init(config={"parts_at": parts_at})
    for step in range(300):
        train = 2.0 * math.exp(-step / 100) + 0.1
        val = train + 0.05 + (0.01 * (step - parts_at) if 0 <= parts_at <= step else 0.0)
        run.log({"train/loss": train, "lr": 0.001}, step=step)
        if step % 10 == 0:
            run.log({"eval/loss": val}, step=step)
    run.finish()
""")


def test_compare_leads_with_the_eval_loss_that_departs_while_train_loss_matches(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    (jobs.workdir / "train.py").write_text(TWO_LOSSES)
    run_ids = []
    for parts_at in (-1, 150):
        job = jobs.submit([sys.executable, "train.py", str(parts_at)], gpu=0, env={"PYTHONPATH": str(SDK_DIR)})
        done = jobs.wait(job["id"], timeout=30)
        assert done["status"] == "SUCCEEDED", jobs.daemon.log()
        run_ids.append(done["run_id"])
        wait_for(lambda: sum(jobs.client.get(f"/api/v1/runs/{done['run_id']}/metrics?names=eval/loss&points=1")
                             ["series"].get("eval/loss", {}).get("count") or [0]) == 30, timeout=20, what="eval points")
    base, other = run_ids
    compared = _fits(jobs.client.get(f"/api/v1/runs/compare?ids={base},{other}"), "RunComparison")
    assert compared["metric"] == "train/loss"
    assert [(m["name"], [d["run_id"] for d in m["departures"]]) for m in compared["metrics"]] == [
        ("eval/loss", [other]), ("lr", []), ("train/loss", [])]
    first = compared["findings"][0]
    assert (first["kind"], first["facts"]["metric"]) == ("divergence", "eval/loss")
    assert 150 <= first["facts"]["divergence"] <= 200
    for pointer in first["evidence"]:
        _resolves(jobs, pointer)
    assert compared["summary"].startswith(f"eval/loss of {other} departs from {base} at step ")
    (tracks,) = [f for f in compared["findings"] if f["kind"] == "divergence" and f["facts"]["divergence"] is None]
    assert sorted(tracks["facts"]["metrics"]) == ["lr", "train/loss"]
    text = _ctl(jobs, "compare", base, other)
    assert text.returncode == 0 and text.stdout.startswith(f"eval/loss of {other} departs"), text.stdout
    by_time = _fits(jobs.client.get(f"/api/v1/runs/compare?ids={base},{other}&align=time"), "RunComparison")
    assert sorted(m["name"] for m in by_time["metrics"]) == ["eval/loss", "lr", "train/loss"]  # all, by time too
