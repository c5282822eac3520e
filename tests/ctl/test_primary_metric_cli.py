"""``gpuplanectl primary-metric show|set|clear`` at each level, ``ckpt prune --metric``, and
errors that name the caller's own flag or argument, against a real daemon."""

from __future__ import annotations

import json


def sdk_run(daemon, metrics: dict[str, list[tuple[int, float]]], **session) -> str:
    """A run opened through the SDK's API that logged ``metrics`` (name -> [(step, value)])."""
    api = daemon.client()
    opened = api.post("/api/v1/sessions", session)
    api.post(f"/api/v1/sessions/{opened['session_id']}/batches", {"seq": 0, "metrics": {
        name: {"step": [s for s, _ in points], "ts": [1_000 + s for s, _ in points], "value": [v for _, v in points]}
        for name, points in metrics.items()}})
    return opened["run_id"]


def test_primary_metric_at_each_level(daemon):
    run_id = sdk_run(daemon, {"eval/loss": [(0, 2.0), (10, 1.0)], "eval/acc": [(0, 0.5), (10, 0.7)]},
                     project="qwen", experiment="lr-1")
    api = daemon.client()

    shown = daemon.run_ctl("primary-metric", "show")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == ["primary: - (none set: checkpoints are not ranked)", "global:  -"]

    done = daemon.run_ctl("primary-metric", "set", "eval/score", "--direction", "maximize")  # not logged yet
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "primary: eval/score (maximize), set globally"
    assert api.get("/api/v1/primary-metric")["primary_metric"]["settings"]["global"] == "eval/score"
    assert api.get("/api/v1/metric-definitions/eval/score")["metric_definition"]["direction"] == "maximize"

    on_project = daemon.run_ctl("primary-metric", "set", "eval/acc", "--project", "qwen")
    assert on_project.returncode == 0, on_project.stderr
    lines = on_project.stdout.splitlines()
    assert lines[0] == "primary: eval/acc (maximize), set on the project"  # its direction, inferred from its name
    assert lines[1].startswith("project: eval/acc (qwen, prj_")
    assert lines[2] == "global:  eval/score"

    on_experiment = daemon.run_ctl("primary-metric", "set", "eval/loss", "--project", "qwen", "--experiment", "lr-1",
                                   "--json")
    assert on_experiment.returncode == 0, on_experiment.stderr
    body = json.loads(on_experiment.stdout)
    assert (body["primary_metric"]["metric"], body["primary_metric"]["source"]) == ("eval/loss", "experiment")
    assert body["primary_metric"]["settings"] == {"experiment": "eval/loss", "project": "eval/acc",
                                                  "global": "eval/score"}
    assert body["metric_definition"]["direction"] == "minimize"
    assert "primary:  eval/loss (minimize, from experiment)" in daemon.run_ctl("run", "show", run_id).stdout

    experiment_id = body["primary_metric"]["experiment"]["id"]  # an experiment's id needs no --project
    cleared = daemon.run_ctl("primary-metric", "clear", "--experiment", experiment_id)
    assert cleared.returncode == 0, cleared.stderr
    assert cleared.stdout.splitlines()[0] == "primary:    eval/acc (maximize), set on the project"
    assert f"experiment: - (lr-1, {experiment_id})" in cleared.stdout
    assert daemon.run_ctl("primary-metric", "show", "--project", "qwen").stdout.splitlines()[0] == \
        "primary: eval/acc (maximize), set on the project"
    daemon.run_ctl("primary-metric", "clear")
    assert api.get("/api/v1/primary-metric")["primary_metric"]["settings"]["global"] is None


def test_primary_metric_errors_name_the_flag(daemon):
    sdk_run(daemon, {"eval/loss": [(0, 1.0)]}, project="qwen", experiment="lr-1")
    unknown = daemon.run_ctl("primary-metric", "set", "eval/loss", "--project", "nope")
    assert (unknown.returncode, unknown.stderr) == (1, "error: --project: no project 'nope' (by id or name)\n")
    no_experiment = daemon.run_ctl("primary-metric", "show", "--project", "qwen", "--experiment", "nope")
    assert (no_experiment.returncode, no_experiment.stderr) == (
        1, "error: --experiment: no experiment 'nope' in project 'qwen'\n")
    bad_name = daemon.run_ctl("primary-metric", "set", "bad\x01name")
    assert bad_name.returncode == 2 and bad_name.stderr.startswith("error: METRIC: "), bad_name.stderr
    # --json keeps the API's body: its field is the API's.
    as_json = json.loads(daemon.run_ctl("primary-metric", "set", "x", "--project", "nope", "--json").stdout)
    assert as_json["error"]["details"]["field"] == "project"
    bad_direction = daemon.run_ctl("primary-metric", "set", "eval/loss", "--direction", "up")
    assert bad_direction.returncode == 2 and "--direction" in bad_direction.stderr
    assert daemon.client().get("/api/v1/primary-metric")["primary_metric"]["metric"] is None  # nothing was set


def test_ckpt_prune_ranks_by_the_metric_given(daemon, tmp_path):
    run_id = sdk_run(daemon, {"eval/loss": [(10, 3.0), (20, 1.0), (30, 2.0)],
                              "eval/acc": [(10, 0.9), (20, 0.1), (30, 0.2)]})
    api = daemon.client()
    # The script's working directory: its checkpoint files are there (retention touches no other).
    sid = api.post("/api/v1/sessions", {"run_id": run_id, "cwd": str(tmp_path)})["session_id"]
    files = {step: tmp_path / f"step{step}.pt" for step in (10, 20, 30)}
    for step, path in files.items():
        path.write_bytes(b"w" * step)
    api.post(f"/api/v1/sessions/{sid}/batches", {"seq": 0, "metrics": {}, "checkpoints": [
        {"path": str(path), "step": step, "size_bytes": step} for step, path in files.items()]})

    def kept_best(*flags: str) -> dict:
        done = daemon.run_ctl("ckpt", "prune", run_id, "--keep-best", "1", "--keep-last", "0", *flags, "--json")
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        assert found["dry_run"] is True
        return found

    by_acc = kept_best("--metric", "eval/acc")
    assert (by_acc["metric"], by_acc["direction"]) == ("eval/acc", "maximize")
    assert [(ck["step"], ck["reasons"]) for ck in by_acc["kept"]] == [(10, ["best"])]
    assert sorted(ck["step"] for ck in by_acc["deleted"]) == [20, 30]
    by_loss = kept_best("--metric", "eval/loss")
    assert [(ck["step"], ck["reasons"]) for ck in by_loss["kept"]] == [(20, ["best"])]
    unranked = kept_best()  # no primary metric and no --metric: nothing ranks, so nothing goes
    assert unranked["metric"] is None and unranked["deleted"] == []

    text = daemon.run_ctl("ckpt", "prune", run_id, "--keep-best", "1", "--keep-last", "0", "--metric", "eval/acc")
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0] == "would delete 2 (50 B), kept 1; keep best 1 by eval/acc (maximize), last 0"
    assert all(path.exists() for path in files.values())  # a dry run

    bad = daemon.run_ctl("ckpt", "prune", run_id, "--metric", "bad\x01name")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --metric: "), bad.stderr


def test_best_checkpoint_without_a_metric_names_the_flag(daemon):
    sdk_run(daemon, {"eval/loss": [(0, 1.0)]}, project="qwen", experiment="lr-1")
    for spelling in (("ckpt", "best"), ("checkpoints", "best")):
        refused = daemon.run_ctl(*spelling, "lr-1", "--project", "qwen")
        assert refused.returncode == 2
        assert refused.stderr == ("error: --metric: experiment 'lr-1' has no primary metric; "
                                  "name the metric to rank by\n"), spelling
    body = json.loads(daemon.run_ctl("ckpt", "best", "lr-1", "--project", "qwen", "--json").stdout)
    assert body["error"]["details"]["field"] == "metric" and "?" not in body["error"]["message"]
    unknown = daemon.run_ctl("ckpt", "best", "lr-1", "--project", "nope")
    assert (unknown.returncode, unknown.stderr) == (1, "error: --project: no project 'nope' (by id or name)\n")
