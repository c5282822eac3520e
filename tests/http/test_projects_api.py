"""Projects, experiments, metric definitions and the primary metric against a real daemon:
CRUD with unique names and cursor pages, deletes refused while runs belong there, a direction
edit recomputing every run's best, and the primary metric resolved experiment -> project -> global."""

from __future__ import annotations

import math

import pytest
from helpers import running_jobs
from test_openapi import Checker
from unixhttp import BASE_URL, unix_session

from gpuplaned.http import openapi
from gpuplaned.protocol.errors import ApiError, ErrorCode

pytestmark = pytest.mark.e2e


def refused(call, *args) -> ApiError:
    with pytest.raises(ApiError) as err:
        call(*args)
    return err.value


def patch(api, path, body):
    return api.request("PATCH", path, body)


def sdk_run(api, project=None, experiment=None, metrics=None, seq=0) -> str:
    """A run opened by the SDK, with ``metrics`` = {name: [(step, value), ...]} in one batch."""
    body = {k: v for k, v in (("project", project), ("experiment", experiment)) if v}
    opened = api.post("/api/v1/sessions", body)
    if metrics:
        log(api, opened["session_id"], metrics, seq)
    return opened["run_id"]


def log(api, session_id, metrics, seq) -> None:
    api.post(f"/api/v1/sessions/{session_id}/batches", {"seq": seq, "metrics": {
        name: {"step": [s for s, _ in points], "ts": [1_000 + s for s, _ in points], "value": [v for _, v in points]}
        for name, points in metrics.items()}})


def test_projects_crud_names_and_pages(api):
    made = [api.post("/api/v1/projects", {"name": f"p{i}", "description": f"number {i}"})["project"]
            for i in range(5)]
    first = made[0]
    assert first["id"].startswith("prj_") and (first["runs"], first["experiments"]) == (0, 0)
    assert first["primary_metric"] is None and first["description"] == "number 0"
    assert api.get(f"/api/v1/projects/{first['id']}")["project"] == api.get("/api/v1/projects/p0")["project"] == first

    seen, cursor = [], None
    while True:
        page = api.get("/api/v1/projects?limit=2" + (f"&cursor={cursor}" if cursor else ""))
        seen += [p["name"] for p in page["projects"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["p4", "p3", "p2", "p1", "p0"]  # newest first
    assert refused(api.get, "/api/v1/projects?cursor=bad").details["field"] == "cursor"

    renamed = patch(api, "/api/v1/projects/p0", {"name": "first one", "description": None})["project"]
    assert (renamed["id"], renamed["name"], renamed["description"]) == (first["id"], "first one", None)
    assert patch(api, f"/api/v1/projects/{first['id']}", {})["project"] == renamed  # nothing to change
    clash = refused(patch, api, "/api/v1/projects/p1", {"name": "first one"})
    assert clash.code == ErrorCode.CONFLICT and clash.details == {"field": "name", "id": first["id"]}
    assert refused(api.post, "/api/v1/projects", {"name": "p2"}).code == ErrorCode.CONFLICT
    assert refused(api.get, "/api/v1/projects/nothing").code == ErrorCode.NOT_FOUND
    assert refused(patch, api, "/api/v1/projects/nothing", {"name": "x"}).code == ErrorCode.NOT_FOUND

    assert api.request("DELETE", "/api/v1/projects/p1")["project"]["name"] == "p1"
    assert refused(api.get, "/api/v1/projects/p1").code == ErrorCode.NOT_FOUND
    assert refused(api.request, "DELETE", "/api/v1/projects/p1").code == ErrorCode.NOT_FOUND
    assert len(api.get("/api/v1/projects")["projects"]) == 4


@pytest.fixture(scope="module")
def refusals_api(tmp_path_factory):
    """One daemon for the refused bodies: none makes a project (each case checks it), so none
    needs a fresh daemon, whose start was most of such a case's time."""
    with running_jobs(tmp_path_factory.mktemp("refusals"), "--gpus=none") as jobs:
        yield jobs.client


@pytest.mark.parametrize(("body", "field"), [
    ({}, "name"),
    ({"name": ""}, "name"),
    ({"name": "a/b"}, "name"),
    ({"name": " padded"}, "name"),
    ({"name": ".hidden"}, "name"),
    ({"name": "x" * 201}, "name"),
    ({"name": "tab\there"}, "name"),
    ({"name": "prj_01J00000000000000000000000"}, "name"),
    ({"name": 7}, "name"),
    ({"name": "ok", "colour": "red"}, "colour"),
    ({"name": "ok", "description": 5}, "description"),
    ({"name": "ok", "primary_metric": ""}, "primary_metric"),
])
def test_bad_project_bodies_name_the_field(refusals_api, body, field):
    api = refusals_api
    err = refused(api.post, "/api/v1/projects", body)
    assert err.code == ErrorCode.BAD_REQUEST and err.details["field"] == field, err.message
    assert api.get("/api/v1/projects")["projects"] == []


def test_experiments_crud_unique_per_project(api):
    api.post("/api/v1/projects", {"name": "a"})
    b = api.post("/api/v1/projects", {"name": "b"})["project"]
    one = api.post("/api/v1/projects/a/experiments", {"name": "lr-1e4", "description": "baseline"})["experiment"]
    assert one["id"].startswith("exp_") and (one["project"], one["runs"]) == ("a", 0)
    other = api.post(f"/api/v1/projects/{b['id']}/experiments", {"name": "lr-1e4"})["experiment"]
    assert other["project_id"] == b["id"]  # names are unique per project only
    clash = refused(api.post, "/api/v1/projects/a/experiments", {"name": "lr-1e4"})
    assert clash.code == ErrorCode.CONFLICT and clash.details["field"] == "name"
    assert refused(api.post, "/api/v1/projects/nope/experiments", {"name": "x"}).code == ErrorCode.NOT_FOUND
    for i in range(3):
        api.post("/api/v1/projects/a/experiments", {"name": f"e{i}"})
    page = api.get("/api/v1/projects/a/experiments?limit=3")
    rest = api.get(f"/api/v1/projects/a/experiments?limit=3&cursor={page['next_cursor']}")
    assert [e["name"] for e in page["experiments"] + rest["experiments"]] == ["e2", "e1", "e0", "lr-1e4"]
    assert rest["next_cursor"] is None
    assert api.get("/api/v1/projects/a")["project"]["experiments"] == 4

    assert api.get(f"/api/v1/experiments/{one['id']}")["experiment"] == one
    edited = patch(api, f"/api/v1/experiments/{one['id']}", {"name": "lr-3e4", "primary_metric": "eval/acc"})
    assert (edited["experiment"]["name"], edited["experiment"]["primary_metric"]) == ("lr-3e4", "eval/acc")
    assert refused(patch, api, f"/api/v1/experiments/{one['id']}", {"name": "e0"}).code == ErrorCode.CONFLICT
    assert refused(api.get, "/api/v1/experiments/exp_nothing").code == ErrorCode.NOT_FOUND

    assert api.request("DELETE", f"/api/v1/experiments/{one['id']}")["experiment"]["id"] == one["id"]
    assert refused(api.get, f"/api/v1/experiments/{one['id']}").code == ErrorCode.NOT_FOUND
    # A project without runs goes with its (empty) experiments.
    api.request("DELETE", "/api/v1/projects/a")
    assert refused(api.get, "/api/v1/projects/a/experiments").code == ErrorCode.NOT_FOUND


def test_what_holds_runs_is_never_deleted(api):
    run_id = sdk_run(api, "kept", "exp", {"train/loss": [(0, 1.0), (1, 0.5)]})
    project = api.get("/api/v1/projects/kept")["project"]
    assert (project["runs"], project["experiments"]) == (1, 1)
    experiment = api.get("/api/v1/projects/kept/experiments")["experiments"][0]
    assert experiment["runs"] == 1
    err = refused(api.request, "DELETE", "/api/v1/projects/kept")
    assert err.code == ErrorCode.CONFLICT and err.details["runs"] == 1 and "1 run(s)" in err.message
    err = refused(api.request, "DELETE", f"/api/v1/experiments/{experiment['id']}")
    assert err.code == ErrorCode.CONFLICT and err.details["runs"] == 1
    # Nothing went: the project, experiment, run and its points are all there.
    assert api.get("/api/v1/projects/kept")["project"] == project
    assert api.get(f"/api/v1/experiments/{experiment['id']}")["experiment"] == experiment
    detail = api.get(f"/api/v1/runs/{run_id}")
    assert detail["project"] == {"id": project["id"], "name": "kept"}
    assert detail["experiment"] == {"id": experiment["id"], "name": "exp"}
    assert api.get(f"/api/v1/runs/{run_id}/metrics")["series"]["train/loss"]["count"] == [1, 1]
    # A rename keeps the run where it was.
    patch(api, "/api/v1/projects/kept", {"name": "renamed"})
    assert api.get(f"/api/v1/runs/{run_id}")["project"]["name"] == "renamed"


def test_metric_definitions_list_filter_and_edit(api):
    sdk_run(api, "vision", "resnet", {"eval/top1_acc": [(0, 0.5)], "lr": [(0, 0.1)]})
    sdk_run(api, "nlp", None, {"train/loss": [(0, 2.0)]})
    everything = api.get("/api/v1/metric-definitions")["metric_definitions"]
    assert {d["name"]: d["direction"] for d in everything} == {
        "eval/top1_acc": "maximize", "lr": None, "train/loss": "minimize"}
    by_project = api.get("/api/v1/metric-definitions?project=vision")["metric_definitions"]
    assert sorted(d["name"] for d in by_project) == ["eval/top1_acc", "lr"]
    experiment = api.get("/api/v1/projects/vision/experiments")["experiments"][0]
    assert {d["name"] for d in api.get(f"/api/v1/metric-definitions?experiment={experiment['id']}")[
        "metric_definitions"]} == {"eval/top1_acc", "lr"}
    assert {d["name"] for d in api.get("/api/v1/metric-definitions?project=vision&experiment=resnet")[
        "metric_definitions"]} == {"eval/top1_acc", "lr"}
    page = api.get("/api/v1/metric-definitions?limit=2")
    rest = api.get(f"/api/v1/metric-definitions?limit=2&cursor={page['next_cursor']}")
    assert sorted(d["name"] for d in page["metric_definitions"] + rest["metric_definitions"]) == \
        ["eval/top1_acc", "lr", "train/loss"]
    err = refused(api.get, "/api/v1/metric-definitions?project=nowhere")
    assert err.code == ErrorCode.NOT_FOUND and err.details["field"] == "project"

    one = api.get("/api/v1/metric-definitions/eval/top1_acc")["metric_definition"]
    assert one == {**one, "name": "eval/top1_acc", "is_primary": False, "unit": None}
    edited = patch(api, "/api/v1/metric-definitions/lr", {"display_name": "Learning rate", "unit": "1/step",
                                                          "scope": "train", "direction": "none"})
    assert edited["runs_updated"] == 0  # it had no direction before either
    assert {k: edited["metric_definition"][k] for k in ("display_name", "unit", "scope", "direction")} == {
        "display_name": "Learning rate", "unit": "1/step", "scope": "train", "direction": None}
    assert refused(api.get, "/api/v1/metric-definitions/nothing/here").code == ErrorCode.NOT_FOUND
    for body, field in (({"direction": "up"}, "direction"), ({"scope": "test"}, "scope"),
                        ({"unit": "u" * 51}, "unit"), ({"is_primary": True}, "is_primary")):
        err = refused(patch, api, "/api/v1/metric-definitions/lr", body)
        assert err.code == ErrorCode.BAD_REQUEST and err.details["field"] == field


def test_a_new_direction_recomputes_every_runs_best(api):
    # Points in several batches (so several chunks), with NaN and infinities that never count as best.
    opened = api.post("/api/v1/sessions", {"project": "p"})
    curve = [(s, float(abs(50 - s))) for s in range(100)]
    log(api, opened["session_id"], {"eval/score": curve[:40]}, 0)
    log(api, opened["session_id"], {"eval/score": curve[40:80] + [(80, math.inf), (81, math.nan)]}, 1)
    log(api, opened["session_id"], {"eval/score": curve[82:] + [(100, -math.inf)]}, 2)
    run_id = opened["run_id"]
    other = sdk_run(api, None, None, {"eval/score": [(0, 3.0), (1, 7.0), (2, 7.0)]})

    def best(run):
        return api.get(f"/api/v1/runs/{run}/summary")["summary"]["metrics"]["eval/score"].get("best")

    assert api.get("/api/v1/metric-definitions/eval/score")["metric_definition"]["direction"] is None
    assert best(run_id) is None
    assert patch(api, "/api/v1/metric-definitions/eval/score", {"direction": "minimize"})["runs_updated"] == 2
    assert best(run_id) == {"step": 50, "value": 0.0} and best(other) == {"step": 0, "value": 3.0}
    patch(api, "/api/v1/metric-definitions/eval/score", {"direction": "maximize"})
    assert best(run_id) == {"step": 0, "value": 50.0}
    assert best(other) == {"step": 1, "value": 7.0}  # a tie: the earliest step
    summary = api.get(f"/api/v1/runs/{run_id}/summary")["summary"]["metrics"]["eval/score"]
    assert summary["direction"] == "maximize" and summary["count"] == 101
    # Later batches go on by the new direction.
    log(api, opened["session_id"], {"eval/score": [(101, 60.0)]}, 3)
    assert best(run_id) == {"step": 101, "value": 60.0}
    patch(api, "/api/v1/metric-definitions/eval/score", {"direction": None})
    assert best(run_id) is None and best(other) is None


def test_primary_metric_resolves_experiment_then_project_then_global(api):
    run_id = sdk_run(api, "qwen", "sft", {"eval/loss": [(0, 2.0), (10, 1.5), (20, 1.7)],
                                          "eval/acc": [(0, 0.2), (20, 0.4)], "train/loss": [(20, 0.9)]})
    lone = sdk_run(api, None, None, {"eval/acc": [(5, 0.9)]})

    def primary(run):
        summary = api.get(f"/api/v1/runs/{run}/summary")["summary"]["primary_metric"]
        assert api.get(f"/api/v1/runs/{run}")["primary_metric"] == summary
        return summary

    assert primary(run_id) is None and primary(lone) is None
    assert api.get("/api/v1/primary-metric")["primary_metric"] == {
        "metric": None, "source": None, "project": None, "experiment": None,
        "settings": {"experiment": None, "project": None, "global": None}}

    set_global = api.request("PUT", "/api/v1/primary-metric", {"metric": "eval/acc"})["primary_metric"]
    assert (set_global["metric"], set_global["source"]) == ("eval/acc", "global")
    assert api.get("/api/v1/metric-definitions/eval/acc")["metric_definition"]["is_primary"] is True
    assert primary(lone) == {"name": "eval/acc", "source": "global", "direction": "maximize", "count": 1,
                             "latest": {"step": 5, "ts": 1005, "value": 0.9}, "best": {"step": 5, "value": 0.9}}

    patch(api, "/api/v1/projects/qwen", {"primary_metric": "eval/loss"})
    assert primary(run_id) == {"name": "eval/loss", "source": "project", "direction": "minimize", "count": 3,
                               "latest": {"step": 20, "ts": 1020, "value": 1.7}, "best": {"step": 10, "value": 1.5}}
    assert primary(lone)["source"] == "global"

    by_name = api.request("PUT", "/api/v1/primary-metric", {"metric": "train/loss", "project": "qwen",
                                                            "experiment": "sft"})["primary_metric"]
    assert (by_name["metric"], by_name["source"]) == ("train/loss", "experiment")
    assert by_name["settings"] == {"experiment": "train/loss", "project": "eval/loss", "global": "eval/acc"}
    assert primary(run_id)["name"] == "train/loss"

    # A metric no run logged yet: its definition is made with the direction its name suggests.
    api.request("PUT", "/api/v1/primary-metric", {"metric": "eval/ndcg@10", "project": "qwen", "experiment": "sft"})
    assert primary(run_id) == {"name": "eval/ndcg@10", "source": "experiment", "direction": "maximize",
                               "count": 0, "latest": None, "best": None}

    experiment = api.get("/api/v1/projects/qwen/experiments")["experiments"][0]
    patch(api, f"/api/v1/experiments/{experiment['id']}", {"primary_metric": None})
    assert primary(run_id)["source"] == "project"
    api.request("PUT", "/api/v1/primary-metric", {"metric": None, "project": "qwen"})
    assert primary(run_id)["name"] == "eval/acc"
    api.request("PUT", "/api/v1/primary-metric", {"metric": "train/loss"})  # a new global one replaces the old
    flags = {d["name"]: d["is_primary"] for d in api.get("/api/v1/metric-definitions")["metric_definitions"]}
    assert [name for name, on in flags.items() if on] == ["train/loss"]
    api.request("PUT", "/api/v1/primary-metric", {"metric": None})
    assert primary(run_id) is None

    resolved = api.get(f"/api/v1/primary-metric?experiment={experiment['id']}")["primary_metric"]
    assert resolved["project"]["name"] == "qwen" and resolved["experiment"]["name"] == "sft"
    for body, field in (({}, "metric"), ({"metric": 3}, "metric"), ({"metric": "x", "project": ""}, "project"),
                        ({"metric": "x", "scope": "global"}, "scope")):
        err = refused(api.request, "PUT", "/api/v1/primary-metric", body)
        assert err.code == ErrorCode.BAD_REQUEST and err.details["field"] == field
    err = refused(api.request, "PUT", "/api/v1/primary-metric", {"metric": "x", "experiment": "nope"})
    assert err.code == ErrorCode.NOT_FOUND and err.details["field"] == "experiment"


def test_idempotent_create_and_replies_match_the_openapi_document(jobs):
    check = Checker(openapi.document()).check
    s = unix_session(str(jobs.daemon.socket_path))
    url = BASE_URL + "/api/v1"
    with s:
        created = check(s.post(f"{url}/projects", json={"name": "doc"}, headers={"Idempotency-Key": "k"}),
                        "POST", "/api/v1/projects", 201)
        again = s.post(f"{url}/projects", json={"name": "doc"}, headers={"Idempotency-Key": "k"})
        assert check(again, "POST", "/api/v1/projects", 201) == created
        assert again.headers["Idempotent-Replayed"] == "true"
        check(s.post(f"{url}/projects", json={"name": "doc"}), "POST", "/api/v1/projects", 409)
        check(s.post(f"{url}/projects", json={"name": "a/b"}), "POST", "/api/v1/projects", 400)
        check(s.get(f"{url}/projects"), "GET", "/api/v1/projects", 200)
        check(s.get(f"{url}/projects/doc"), "GET", "/api/v1/projects/{project}", 200)
        check(s.get(f"{url}/projects/none"), "GET", "/api/v1/projects/{project}", 404)
        check(s.patch(f"{url}/projects/doc", json={"primary_metric": "eval/loss"}), "PATCH",
              "/api/v1/projects/{project}", 200)
        exp = check(s.post(f"{url}/projects/doc/experiments", json={"name": "e"}), "POST",
                    "/api/v1/projects/{project}/experiments", 201)["experiment"]
        check(s.get(f"{url}/projects/doc/experiments"), "GET", "/api/v1/projects/{project}/experiments", 200)
        check(s.get(f"{url}/experiments/{exp['id']}"), "GET", "/api/v1/experiments/{experiment_id}", 200)
        check(s.patch(f"{url}/experiments/{exp['id']}", json={"description": "d"}), "PATCH",
              "/api/v1/experiments/{experiment_id}", 200)
        run_id = sdk_run(jobs.client, "doc", "e", {"eval/loss": [(0, 1.0), (1, 0.5)]})
        check(s.delete(f"{url}/experiments/{exp['id']}"), "DELETE", "/api/v1/experiments/{experiment_id}", 409)
        check(s.delete(f"{url}/projects/doc"), "DELETE", "/api/v1/projects/{project}", 409)
        check(s.get(f"{url}/runs/{run_id}"), "GET", "/api/v1/runs/{run_id}", 200)
        check(s.get(f"{url}/runs/{run_id}/summary"), "GET", "/api/v1/runs/{run_id}/summary", 200)
        check(s.get(f"{url}/metric-definitions", params={"project": "doc"}), "GET", "/api/v1/metric-definitions",
              200)
        check(s.get(f"{url}/metric-definitions/eval/loss"), "GET", "/api/v1/metric-definitions/{metric}", 200)
        check(s.patch(f"{url}/metric-definitions/eval%2Floss", json={"direction": "maximize"}), "PATCH",
              "/api/v1/metric-definitions/{metric}", 200)
        check(s.patch(f"{url}/metric-definitions/eval/loss", json={"direction": 1}), "PATCH",
              "/api/v1/metric-definitions/{metric}", 400)
        check(s.get(f"{url}/primary-metric", params={"project": "doc"}), "GET", "/api/v1/primary-metric", 200)
        check(s.put(f"{url}/primary-metric", json={"metric": "eval/loss"}), "PUT", "/api/v1/primary-metric", 200)
        check(s.put(f"{url}/primary-metric", json={"metric": "x", "project": "none"}), "PUT",
              "/api/v1/primary-metric", 404)
        empty = check(s.post(f"{url}/projects", json={"name": "empty"}), "POST", "/api/v1/projects", 201)
        check(s.delete(f"{url}/projects/{empty['project']['id']}"), "DELETE", "/api/v1/projects/{project}", 200)
