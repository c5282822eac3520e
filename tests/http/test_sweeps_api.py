"""Sweeps over the API (issue 31 item 3): POST/GET /api/v1/sweeps on a real daemon (two fake
GPUs), its TCP front, real tokens, real child processes and its SQLite file. Each trial's job
writes what it got (argv and env) to a file, so the tests read what the processes really saw."""

from __future__ import annotations

import itertools
import json
import sqlite3

import httpx
import pytest
from helpers import jobs_with_front, wait_for

pytestmark = pytest.mark.e2e

SWEEPS = "/api/v1/sweeps"
# Writes its argv and its GPUPLANE_SWEEP_* env to a file named after the trial: whole, by a
# rename (``seen`` reads it once it exists; written in place, it could be read still empty).
REPORT = ("import json, os, sys; "
          "env = {k: v for k, v in os.environ.items() if k.startswith('GPUPLANE_SWEEP_')}; "
          "name = 'seen-' + env['GPUPLANE_SWEEP_ID'] + '-' + env['GPUPLANE_SWEEP_TRIAL']; "
          "open(name + '.part', 'w').write(json.dumps({'argv': sys.argv[1:], 'env': env})); "
          "os.replace(name + '.part', name)")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweeps")
    with jobs_with_front(root) as (jobs, url):
        yield jobs, url


def token(jobs, name, limits=None):
    body = {"name": name, "scopes": ["read", "write"], **({"limits": limits} if limits else {})}
    return jobs.client.post("/api/v1/tokens", body)["secret"]


def call(url, secret, method, path, body=None, key=None):
    headers = {"Authorization": f"Bearer {secret}", **({"Idempotency-Key": key} if key else {})}
    return httpx.request(method, url + path, json=body, headers=headers, timeout=60)


def job(jobs, *args, **fields):
    return {"command": ["python3", "-c", REPORT, *args], "cwd": str(jobs.workdir), "gpu": 0, **fields}


def stored(jobs, sql, *params):
    with sqlite3.connect(jobs.daemon.home / "gpuplane.db") as conn:
        return conn.execute(sql, params).fetchall()


def seen(jobs, sweep_id, trial):
    path = jobs.file(f"seen-{sweep_id}-{trial}")
    wait_for(path.exists, what=f"trial {trial} to write what it got")
    return json.loads(path.read_text())


def wait_sweep(jobs, sweep_id, *states, timeout=30.0):
    def reached():
        sweep = jobs.client.get(f"{SWEEPS}/{sweep_id}")["sweep"]
        return sweep if sweep["status"] in states else None
    return wait_for(reached, timeout, interval=0.05, what=f"{sweep_id} to reach {states}")


def test_a_grid_sweep_runs_each_combination_with_its_values_in_argv_and_env(env):
    jobs, url = env
    secret = token(jobs, "grid")
    body = {"name": "grid-study", "job": job(jobs, "--lr", "{lr}", "--tag={opt}-{bs}", "{other}"),
            "grid": {"lr": [0.1, 0.01], "bs": [32, 64], "opt": ["adam"]}}
    reply = call(url, secret, "POST", SWEEPS, body)
    assert reply.status_code == 201, reply.text
    made = reply.json()
    sweep = made["sweep"]
    assert (made["created"], made["existing"], made["dry_run"]) == (4, 0, False)
    assert sweep["id"].startswith("swp_") and sweep["kind"] == "grid" and sweep["experiment"] == "grid-study"
    done = wait_sweep(jobs, sweep["id"], "SUCCEEDED")
    assert done["counts"] == {"total": 4, "queued": 0, "running": 0, "succeeded": 4, "failed": 0, "cancelled": 0}
    combos = [(0.1, 32), (0.1, 64), (0.01, 32), (0.01, 64)]
    for trial, (lr, bs) in enumerate(combos):
        got = seen(jobs, sweep["id"], trial)
        assert got["argv"] == ["--lr", str(lr), f"--tag=adam-{bs}", "{other}"]
        assert got["env"] == {"GPUPLANE_SWEEP_LR": str(lr), "GPUPLANE_SWEEP_BS": str(bs),
                              "GPUPLANE_SWEEP_OPT": "adam", "GPUPLANE_SWEEP_ID": sweep["id"],
                              "GPUPLANE_SWEEP_TRIAL": str(trial)}
        shown = done["trials"][trial]
        assert (shown["trial"], shown["values"], shown["status"]) == (trial, {"lr": lr, "bs": bs, "opt": "adam"},
                                                                      "SUCCEEDED")
    # Each trial is a job named after the sweep, listed by its sweep; its run is in the sweep's experiment.
    listed = call(url, secret, "GET", f"/api/v1/jobs?sweep={sweep['id']}").json()["jobs"]
    assert sorted(j["name"] for j in listed) == [f"grid-study-{i}" for i in range(4)]
    assert {j["sweep_id"] for j in listed} == {sweep["id"]}
    assert sorted(j["sweep_trial"] for j in listed) == [0, 1, 2, 3]
    runs = stored(jobs, "SELECT r.config, e.name FROM runs r JOIN jobs j ON j.id = r.job_id "
                        "JOIN experiments e ON e.id = r.experiment_id WHERE j.sweep_id = ? ORDER BY j.sweep_trial",
                  sweep["id"])
    assert [(json.loads(c)["config"], e) for c, e in runs] == [
        ({"bs": bs, "lr": lr, "opt": "adam"}, "grid-study") for lr, bs in combos]


def test_a_random_sweep_draws_the_same_trials_for_the_same_seed(env):
    jobs, url = env
    secret = token(jobs, "random")
    body = {"name": "rnd", "job": job(jobs, "--lr={lr}", "--opt", "{opt}"),
            "random": {"lr": "log:1e-5:1e-1", "opt": "choice:adam,sgd"}, "trials": 3, "seed": 11}
    dry = call(url, secret, "POST", SWEEPS, {**body, "dry_run": True}).json()
    assert (dry["dry_run"], dry["created"], dry["sweep"]) == (True, 3, None)
    assert stored(jobs, "SELECT count(*) FROM sweeps WHERE name = 'rnd'") == [(0,)]  # a dry run writes nothing
    made = call(url, secret, "POST", SWEEPS, body).json()
    done = wait_sweep(jobs, made["sweep"]["id"], "SUCCEEDED")
    assert [t["values"] for t in done["trials"]] == [p["values"] for p in dry["planned"]]
    for planned in dry["planned"]:
        got = seen(jobs, made["sweep"]["id"], planned["trial"])
        assert got["argv"] == planned["command"][3:]  # python3 -c REPORT, then the trial's own arguments
        assert got["argv"] == [f"--lr={planned['values']['lr']}", "--opt", planned["values"]["opt"]]
        assert got["env"]["GPUPLANE_SWEEP_OPT"] == planned["values"]["opt"]
    # The same seed again: the same values, so no new trial.
    again = call(url, secret, "POST", SWEEPS, body).json()
    assert (again["created"], again["existing"], again["sweep"]["id"]) == (0, 3, made["sweep"]["id"])


def test_a_list_sweep_and_a_repeat_adds_only_the_new_values(env):
    jobs, url = env
    secret = token(jobs, "lister")
    first = {"name": "listed", "job": job(jobs, "{name}", env={"PATH": "/usr/bin:/bin"}),
             "trials_list": [{"name": "a"}, {"name": "b"}]}
    made = call(url, secret, "POST", SWEEPS, first).json()
    assert made["created"] == 2
    more = {**first, "trials_list": [{"name": "b"}, {"name": "c"}, {"name": "a"}, {"name": "d"}]}
    dry = call(url, secret, "POST", SWEEPS, {**more, "dry_run": True}).json()
    assert [(p["trial"], p["values"]["name"], p["exists"]) for p in dry["planned"]] == [
        (1, "b", True), (2, "c", False), (0, "a", True), (3, "d", False)]
    added = call(url, secret, "POST", SWEEPS, more).json()
    assert (added["created"], added["existing"], added["sweep"]["id"]) == (2, 2, made["sweep"]["id"])
    done = wait_sweep(jobs, made["sweep"]["id"], "SUCCEEDED")
    assert [(t["trial"], t["values"]["name"]) for t in done["trials"]] == [(0, "a"), (1, "b"), (2, "c"), (3, "d")]
    assert seen(jobs, made["sweep"]["id"], 3) == {"argv": ["d"], "env": {
        "GPUPLANE_SWEEP_NAME": "d", "GPUPLANE_SWEEP_ID": made["sweep"]["id"], "GPUPLANE_SWEEP_TRIAL": "3"}}
    assert stored(jobs, "SELECT count(*) FROM jobs WHERE sweep_id = ?", made["sweep"]["id"]) == [(4,)]
    # The same sweep from another shell, whose env values differ (PATH...): the same sweep, no new trial.
    moved = {**more, "job": {**more["job"], "env": {"PATH": "/elsewhere/bin"}}}
    assert call(url, secret, "POST", SWEEPS, moved).json()["created"] == 0
    # Another job under the same name is refused, naming it; nothing is written.
    other = call(url, secret, "POST", SWEEPS, {**more, "job": job(jobs, "--other", "{name}")})
    assert other.status_code == 409
    assert other.json()["error"]["details"]["field"] == "name" and "'listed'" in other.json()["error"]["message"]
    assert stored(jobs, "SELECT count(*) FROM jobs WHERE sweep_id = ?", made["sweep"]["id"]) == [(4,)]


def test_an_idempotency_key_repeat_gets_the_first_reply_and_no_new_trials(env):
    jobs, url = env
    secret = token(jobs, "idem")
    body = {"job": job(jobs, "{x}"), "grid": {"x": [1, 2, 3]}}
    first = call(url, secret, "POST", SWEEPS, body, key="sweep-key-1")
    second = call(url, secret, "POST", SWEEPS, body, key="sweep-key-1")
    assert first.status_code == second.status_code == 201
    assert first.json() == second.json()
    assert first.json()["sweep"]["name"].startswith("python3-")  # no name: the program's and the job's digest
    assert stored(jobs, "SELECT count(*) FROM jobs WHERE sweep_id = ?", first.json()["sweep"]["id"]) == [(3,)]


def test_a_sweep_with_one_refused_trial_queues_none_naming_it(env):
    jobs, url = env
    secret = token(jobs, "budget", {"gpu_hours": 1.0})
    before = stored(jobs, "SELECT count(*) FROM jobs")
    # Each trial may burn 0.3 GPU-hours: the first three fit the budget of 1, the fourth does not.
    body = {"name": "too-big", "job": job(jobs, "{i}", timeout_s=1080, gpu=1), "grid": {"i": [0, 1, 2, 3, 4]}}
    dry = call(url, secret, "POST", SWEEPS, {**body, "dry_run": True})
    assert dry.status_code == 403 and dry.json()["error"]["details"]["refused"][0]["index"] == 3
    reply = call(url, secret, "POST", SWEEPS, body)
    assert reply.status_code == 403, reply.text
    error = reply.json()["error"]
    assert error["message"].startswith("2 of 5 trial(s) refused, so none was queued; the first, trials[3]")
    assert [r["index"] for r in error["details"]["refused"]] == [3, 4]
    assert [r["limit"] for r in error["details"]["refused"]] == ["budget", "budget"]
    assert stored(jobs, "SELECT count(*) FROM jobs") == before
    assert stored(jobs, "SELECT count(*) FROM sweeps WHERE name = 'too-big'") == [(0,)]
    # Within the budget, the dry run says what it would cost.
    fits = call(url, secret, "POST", SWEEPS, {**body, "grid": {"i": [0, 1]}, "dry_run": True}).json()
    assert fits["worst_case_gpu_hours"] == pytest.approx(0.6)


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"grid": {"lr": []}}, "grid.lr", "non-empty list"),
    ({"random": {"lr": "normal:0:1"}, "trials": 3}, "random.lr", "not a distribution"),
    ({"random": {"lr": "uniform:0:1"}}, "trials", "needs its number of trials"),
    ({"grid": {"a": [1]}, "trials_list": [{"a": 1}]}, "grid", "exactly one of"),
    ({"trials_list": [{"a": 1}, {"a": 1}]}, "trials_list[1]", "the same values as trials_list[0]"),
])
def test_bad_parameters_are_refused_naming_the_field(env, body, field, words):
    jobs, url = env
    reply = call(url, token(jobs, f"bad-{len(field)}-{sorted(body)[0]}"), "POST", SWEEPS, {"job": job(jobs), **body})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["details"]["field"] == field and words in error["message"]


def test_a_limited_token_sees_and_acts_on_its_own_sweeps_only(env):
    jobs, url = env
    mine, theirs = token(jobs, "mine", {"max_gpus_per_job": 1}), token(jobs, "theirs", {"max_gpus_per_job": 1})
    made = call(url, mine, "POST", SWEEPS, {"name": "private", "job": job(jobs, "{x}"), "grid": {"x": [1]},
                                            "max_parallel": 1}).json()["sweep"]
    assert [s["id"] for s in call(url, mine, "GET", SWEEPS).json()["sweeps"]] == [made["id"]]
    assert call(url, theirs, "GET", SWEEPS).json()["sweeps"] == []
    for method, path in [("GET", ""), ("POST", "/pause"), ("POST", "/cancel"), ("POST", "/retry-failed")]:
        reply = call(url, theirs, method, f"{SWEEPS}/{made['id']}{path}")
        assert reply.status_code == 403, (path, reply.text)
        assert reply.json()["error"]["details"]["limit"] == "owner"
    assert stored(jobs, "SELECT paused, cancelled_at FROM sweeps WHERE id = ?", made["id"]) == [(0, None)]
    assert call(url, mine, "POST", f"{SWEEPS}/{made['id']}/pause").json()["sweep"]["paused"] is True


def test_an_unknown_sweep_is_404_naming_it(env):
    jobs, url = env
    reply = call(url, token(jobs, "finder"), "GET", f"{SWEEPS}/swp_01NOSUCHSWEEP00000000000000")
    assert reply.status_code == 404 and "swp_01NOSUCHSWEEP00000000000000" in reply.json()["error"]["message"]


HOSTILE = itertools.count()  # each case's token name


def deep(levels: int) -> list:
    nested: list = [1]
    for _ in range(levels):
        nested = [nested]
    return nested


@pytest.mark.parametrize(("parameters", "field", "words"), [
    ({"grid": {"a": list(range(101)), "b": list(range(100))}}, "grid", "at most 10000"),  # huge
    ({"grid": {"l\x00r": [1]}}, "grid.l\x00r", "is not a parameter name"),
    ({"grid": {"lr": ["a\x00b"]}}, "grid.lr", "without NUL bytes"),
    ({"grid": {"lr": ["x" * 100_000]}}, "grid.lr", "at most 1000 characters"),
    ({"grid": {"lr": [[1]]}}, "grid.lr", "must be a string, number or true/false"),
    ({"grid": {"lr": deep(300)}}, None, "nested deeper than 64 levels"),
])
def test_a_hostile_body_is_refused_naming_the_problem_and_writes_nothing(env, parameters, field, words):
    jobs, url = env
    before = stored(jobs, "SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM sweeps)")
    reply = call(url, token(jobs, f"hostile-{next(HOSTILE)}"), "POST", SWEEPS,
                 {"name": "hostile", "job": job(jobs), **parameters})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert words in error["message"] and error["details"].get("field") == field
    assert stored(jobs, "SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM sweeps)") == before


def test_control_characters_in_a_value_reach_the_trial_as_they_are(env):
    """A value is an argument like any other (argv carries any byte but NUL); it is shown escaped
    (gpuplanectl's render.printable), never interpreted."""
    jobs, url = env
    value = "a\nb\x1b[31m"
    made = call(url, token(jobs, "ctrl"), "POST", SWEEPS,
                {"name": "ctrl", "job": job(jobs, "{v}"), "grid": {"v": [value]}}).json()["sweep"]
    assert seen(jobs, made["id"], 0) == {"argv": [value], "env": {
        "GPUPLANE_SWEEP_V": value, "GPUPLANE_SWEEP_ID": made["id"], "GPUPLANE_SWEEP_TRIAL": "0"}}


def test_patch_changes_max_parallel_naming_a_bad_value_and_only_for_its_owner(env):
    jobs, url = env
    mine, theirs = token(jobs, "limiter", {"max_gpus_per_job": 1}), token(jobs, "other", {"max_gpus_per_job": 1})
    made = call(url, mine, "POST", SWEEPS, {"name": "limited", "job": job(jobs, "{x}"), "grid": {"x": [1, 2]},
                                            "max_parallel": 1}).json()["sweep"]
    path = f"{SWEEPS}/{made['id']}"
    changed = call(url, mine, "PATCH", path, {"max_parallel": 3})
    assert changed.status_code == 200 and changed.json()["sweep"]["max_parallel"] == 3
    assert stored(jobs, "SELECT max_parallel FROM sweeps WHERE id = ?", made["id"]) == [(3,)]
    assert call(url, mine, "PATCH", path, {"max_parallel": None}).json()["sweep"]["max_parallel"] is None
    for bad, words in ((0, "between 1 and 10000, got 0"), (10_001, "got 10001"), ("2", "must be an integer")):
        refused = call(url, mine, "PATCH", path, {"max_parallel": bad})
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["details"]["field"] == "max_parallel" and words in error["message"], error
    assert call(url, theirs, "PATCH", path, {"max_parallel": 2}).status_code == 403
    call(url, mine, "POST", f"{path}/cancel")
    assert call(url, mine, "PATCH", path, {"max_parallel": 2}).status_code == 409
    assert stored(jobs, "SELECT max_parallel FROM sweeps WHERE id = ?", made["id"]) == [(None,)]


def test_patch_refuses_hostile_bodies_and_changes_nothing(env):
    jobs, url = env
    mine = token(jobs, "patcher")
    made = call(url, mine, "POST", SWEEPS, {"name": "patched", "job": job(jobs, "{x}"), "grid": {"x": [1]},
                                            "max_parallel": 1}).json()["sweep"]
    path = f"{SWEEPS}/{made['id']}"
    headers = {"Authorization": f"Bearer {mine}", "Content-Type": "application/json"}
    deep = b'{"max_parallel": ' + b"[" * 300 + b"]" * 300 + b"}"
    huge = b'{"max_parallel": 2, "pad": "' + b"x" * 2_000_000 + b'"}'
    for raw, words in ((deep, "deep"), (huge, ""), (b'{"max_parallel\\u0000": 2}', "max_parallel"),
                       (b'{"max_parallel": 2, "extra": 1}', "extra"), (b"[2]", "object"), (b"not json", "JSON")):
        refused = httpx.request("PATCH", url + path, content=raw, headers=headers, timeout=60)
        assert refused.status_code in (400, 413), (raw[:40], refused.text)
        assert words in refused.text, (raw[:40], refused.text)
    assert stored(jobs, "SELECT max_parallel FROM sweeps WHERE id = ?", made["id"]) == [(1,)]
