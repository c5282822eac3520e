"""``gpuplanectl runs``, ``run show`` and ``metrics`` against a real daemon with an SDK run."""

from __future__ import annotations

import json

import pytest
from gpuplanectl.commands.runs import ASCII_BARS, sparkline


@pytest.fixture
def run_id(daemon):
    api = daemon.client()
    opened = api.post("/api/v1/sessions", {"name": "demo"})
    steps = list(range(200))
    api.post(f"/api/v1/sessions/{opened['session_id']}/batches", {"seq": 0, "metrics": {
        "train/loss": {"step": steps, "ts": [1_000 + s for s in steps], "value": [10.0 - s / 20 for s in steps]},
        "eval/acc": {"step": [0, 100], "ts": [1_000, 1_100], "value": [0.25, 0.75]},
    }})
    return opened["run_id"]


def test_runs_lists_the_sdk_run(daemon, run_id):
    result = daemon.run_ctl("runs")
    assert result.returncode == 0, result.stderr
    header, row = result.stdout.splitlines()
    assert header.split()[:4] == ["ID", "SOURCE", "STATUS", "JOB"]
    assert row.split()[:3] == [run_id, "sdk", "RUNNING"] and "demo" in row
    assert json.loads(daemon.run_ctl("runs", "--json").stdout)["runs"][0]["id"] == run_id
    assert daemon.run_ctl("runs", "--status", "FAILED").stdout == "no runs\n"


def test_run_show_and_metrics(daemon, run_id):
    shown = daemon.run_ctl("run", "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert f"run:      {run_id}" in shown.stdout and "source:   sdk" in shown.stdout
    assert "step:     199" in shown.stdout and "primary:  - (set one" in shown.stdout
    rows = {cells[0]: cells for cells in map(str.split, shown.stdout.splitlines()) if cells and "/" in cells[0]}
    # latest, then best by direction: loss is minimized, acc maximized
    assert rows["train/loss"][1:] == ["200", "0.05", "199", "0.05", "199", "decreasing"]
    assert rows["eval/acc"][1:6] == ["2", "0.75", "100", "0.75", "100"]
    daemon.client().request("PUT", "/api/v1/primary-metric", {"metric": "eval/acc"})
    starred = daemon.run_ctl("run", "show", run_id).stdout
    assert "primary:  eval/acc (maximize, from global), best 0.75" in starred and "eval/acc *" in starred
    as_json = json.loads(daemon.run_ctl("run", "show", run_id, "--json").stdout)
    assert as_json["summary"]["metrics"]["train/loss"]["count"] == 200
    result = daemon.run_ctl("metrics", run_id, "--points", "10")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:]}
    assert rows["eval/acc"][1:5] == ["2", "0.75", "0.25", "0.75"]
    assert len(rows["train/loss"][5]) == 10  # one sparkline character per bucket
    only = json.loads(daemon.run_ctl("metrics", run_id, "--names", "eval/*", "--json").stdout)
    assert list(only["series"]) == ["eval/acc"] and only["x"] == [0, 100]
    missing = daemon.run_ctl("metrics", "run_nope")
    assert missing.returncode == 1 and "no run 'run_nope'" in missing.stderr
    bad = daemon.run_ctl("metrics", run_id, "--x", "epoch")
    assert bad.returncode != 0 and "x" in bad.stderr
    ranged = json.loads(daemon.run_ctl("metrics", run_id, "--step-range", "50:59", "--names", "train/loss",
                                       "--points", "100", "--json").stdout)
    assert ranged["x"] == list(range(50, 60))
    opened = json.loads(daemon.run_ctl("metrics", run_id, "--step-range", "190:", "--json").stdout)
    assert opened["x"][0] == 190 and opened["x"][-1] == 199
    by_time = json.loads(daemon.run_ctl("metrics", run_id, "--window", "1d", "--json").stdout)
    assert by_time["x_axis"] == "ts" and by_time["x"] == []  # this run's points are from 1970
    for args in (("--step-range", "a:b"), ("--step-range", "100"), ("--step-range", "1:2", "--window", "1h")):
        refused = daemon.run_ctl("metrics", run_id, *args)
        assert refused.returncode == 2 and ("--step-range" in refused.stderr or "--window" in refused.stderr), args


def test_sparkline_scales_and_leaves_gaps():
    assert sparkline([0.0, 1.0, None, 2.0], ASCII_BARS) == "_+ @"
    assert sparkline([5.0, 5.0]) == "▁▁"
    assert sparkline([None, float("nan")]) == ""


def test_checkpoints_lists_them_with_the_best_starred(daemon, run_id):
    api = daemon.client()
    sid = api.post("/api/v1/sessions", {"run_id": run_id})["session_id"]
    api.post(f"/api/v1/sessions/{sid}/batches", {"seq": 0, "metrics": {}, "checkpoints": [
        {"path": "/ck/a.pt", "step": 50, "size_bytes": 2048}, {"path": "/ck/b.pt", "step": 150}]})
    result = daemon.run_ctl("checkpoints", run_id, "--metric", "train/loss")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "STEP", "PARENT", "PATH", "SIZE", "REGISTERED", "TRAIN/LOSS", "METRICS"]
    first, second = lines[1].split(), lines[2].split()
    assert first[0].startswith("ck_") and first[1:5] == ["50", "-", "/ck/a.pt", "2.0"]
    assert first[-2] == "7.5"
    assert second[0] == "*" and second[2:5] == ["150", "@50", "/ck/b.pt"] and second[-2] == "2.5"  # its parent: 50
    assert lines[-1] == "* best by train/loss (minimize)"
    plain = daemon.run_ctl("checkpoints", run_id)  # no primary metric set: listed, not ranked
    assert plain.returncode == 0 and "best by" not in plain.stdout and "*" not in plain.stdout
    assert json.loads(daemon.run_ctl("checkpoints", run_id, "--json").stdout)["metric"] is None
    missing = daemon.run_ctl("checkpoints", "run_nope")
    assert missing.returncode == 1 and "no run" in missing.stderr


def test_run_show_prints_a_run_whose_loss_went_nan(daemon):
    """The API sends NaN and the infinities as strings ("NaN", JSON has none): ``run show`` and
    ``metrics`` print them (``show`` raised "Unknown format code 'g' for object of type 'str'")."""
    api = daemon.client()
    opened = api.post("/api/v1/sessions", {"name": "diverged"})
    api.post(f"/api/v1/sessions/{opened['session_id']}/batches", {"seq": 0, "metrics": {
        "train/loss": {"step": [0, 1, 2], "ts": [1_000, 1_001, 1_002], "value": [1.0, 0.5, float("nan")]},
        "grad_norm": {"step": [0, 1, 2], "ts": [1_000, 1_001, 1_002], "value": [1.0, 2.0, float("inf")]},
    }})
    run_id = opened["run_id"]
    summary = api.get(f"/api/v1/runs/{run_id}/summary")["summary"]
    assert summary["metrics"]["train/loss"]["latest"]["value"] == "NaN"  # what reaches the CLI
    shown = daemon.run_ctl("run", "show", run_id)
    assert (shown.returncode, shown.stderr) == (0, ""), shown.stderr
    rows = {cells[0]: cells for cells in map(str.split, shown.stdout.splitlines()) if cells}
    assert rows["train/loss"][1:6] == ["3", "nan", "2", "0.5", "1"]
    assert rows["grad_norm"][1:4] == ["3", "inf", "2"]
    assert any(line.startswith("warning: ") and "NaN" in line for line in shown.stdout.splitlines()), shown.stdout
    result = daemon.run_ctl("metrics", run_id, "--points", "3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].split()[:5] == ["grad_norm", "3", "2", "1", "2"]
