"""``gpuplanectl projects`` and ``project show`` against a real daemon with SDK runs."""

from __future__ import annotations

import json


def test_projects_and_project_show(daemon):
    assert daemon.run_ctl("projects").stdout == "no projects\n"
    api = daemon.client()
    opened = api.post("/api/v1/sessions", {"project": "qwen-sft", "experiment": "lr-2e5"})
    api.post(f"/api/v1/sessions/{opened['session_id']}/batches", {"seq": 0, "metrics": {
        "eval/loss": {"step": [0, 1], "ts": [1, 2], "value": [2.0, 1.0]}}})
    api.post("/api/v1/projects", {"name": "empty", "description": "nothing yet"})
    api.request("PATCH", "/api/v1/projects/qwen-sft", {"primary_metric": "eval/loss"})

    listed = daemon.run_ctl("projects")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["NAME", "ID", "RUNS", "EXPERIMENTS", "PRIMARY", "CREATED"]
    assert [r.split()[0] for r in rows] == ["empty", "qwen-sft"]  # newest first
    assert rows[1].split()[2:5] == ["1", "1", "eval/loss"] and rows[0].split()[2:5] == ["0", "0", "-"]
    assert [p["name"] for p in json.loads(daemon.run_ctl("projects", "--json").stdout)["projects"]] == \
        ["empty", "qwen-sft"]

    shown = daemon.run_ctl("project", "show", "qwen-sft")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("project:  qwen-sft (prj_") and "runs:     1" in lines
    assert "primary:  eval/loss (project)" in lines
    experiment = next(line for line in lines if line.startswith("lr-2e5"))
    assert experiment.split()[2:4] == ["1", "-"]
    as_json = json.loads(daemon.run_ctl("project", "show", "qwen-sft", "--json").stdout)
    assert as_json["primary_metric"]["metric"] == "eval/loss" and as_json["experiments"][0]["name"] == "lr-2e5"
    assert "about:    nothing yet" in daemon.run_ctl("project", "show", "empty").stdout

    missing = daemon.run_ctl("project", "show", "nope")
    assert missing.returncode == 1 and "no project 'nope'" in missing.stderr
