"""The Experiments workspace's runs (``POST /api/v1/workspace/runs``) over a real store actor and
its read connections: selections by project, experiment, sweep and run id; configs flattened with
their JSON types; per-metric count, last, min, max and best from the summaries; min and max filled
once for summaries kept before they were; and 1,000 runs x 8 metrics answered in well under a second."""

from __future__ import annotations

import json
import math
import time

import pytest
import trio
from inprocess import passes_by_hand

from gpuplaned import tsdb
from gpuplaned.protocol.converter import structure, unstructure
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service import access
from gpuplaned.service.api import workspace
from gpuplaned.service.api.sessions import summarize
from gpuplaned.service.api.workspace import WorkspaceQuery
from gpuplaned.store import project_rows
from gpuplaned.store.writer import write


def _project(conn, name: str) -> str:
    return project_rows.insert_project(conn, name, None, 1)


def _experiment(conn, project_id: str, name: str) -> str:
    return project_rows.insert_experiment(conn, project_rows.find_project(conn, project_id), name, None, 1)


def _run(conn, run_id: str, *, created: int, project_id=None, experiment_id=None, config=None, tags=(),
         job_id=None, status="RUNNING", metrics=None) -> None:
    """A run row as a session opens it, and ``metrics`` = {name: [(step, value), ...]} stored and
    summarised as a batch is."""
    conn.execute("INSERT INTO runs (id, job_id, source, status, project_id, experiment_id, config, created_at) "
                 "VALUES (?, ?, 'sdk', ?, ?, ?, ?, ?)",
                 (run_id, job_id, status, project_id, experiment_id,
                  json.dumps({"config": config, "tags": list(tags)}), created))
    if metrics:
        batch = {name: {"step": [s for s, _ in points], "ts": [1000 + s for s, _ in points],
                        "value": [v for _, v in points]} for name, points in metrics.items()}
        tsdb.ingest(conn, "run", run_id, batch, source=f"s-{run_id}", seq=0)
        summarize(conn, run_id, batch, 1)


def _sweep_trial(conn, sweep_id: str, job_id: str, trial: int, values: dict) -> None:
    conn.execute("INSERT INTO jobs (id, name, type, command, status, created_at, sweep_id, sweep_trial, "
                 "sweep_values) VALUES (?, ?, 'command', 'true', 'RUNNING', 1, ?, ?, ?)", (job_id, job_id, sweep_id, trial, json.dumps(values)))


async def _ask(ctx, **body):
    return unstructure(await workspace.workspace_runs(ctx, structure(body, WorkspaceQuery)))


async def test_selection_configs_and_summaries(tmp_path, nursery):
    async with passes_by_hand(tmp_path, nursery) as ctx:
        def fill(conn):
            vision = _project(conn, "vision")
            lr = _experiment(conn, vision, "lr")
            other = _project(conn, "other")
            conn.execute("INSERT INTO sweeps (id, name, kind, template, parameters, goal, created_at) VALUES "
                         "('swp_1', 'grid', 'grid', '{}', '{}', 'minimize', 1)")
            _sweep_trial(conn, "swp_1", "job_t0", 0, {"optim.lr": 0.1, "layers": 2})
            _run(conn, "run_a", created=10, experiment_id=lr, tags=["base"],
                 config={"optim": {"lr": 0.001, "momentum": None}, "amp": True, "sizes": [1, 2], "note": "x",
                         "empty": {}},
                 metrics={"train/loss": [(0, 3.0), (1, 1.0), (2, 1.0), (3, math.nan)], "acc": [(0, 0.2), (5, 0.7)]})
            _run(conn, "run_b", created=20, project_id=vision, config={"optim": {"lr": "auto"}},
                 metrics={"train/loss": [(0, 2.0), (1, 4.0)]})
            _run(conn, "run_c", created=30, project_id=other,
                 config={"layers": 8, "eps": math.nan, "clip": [1.0, -math.inf], "warm": {"to": math.inf}})
            _run(conn, "run_t", created=40, job_id="job_t0", config={"layers": 4},
                 metrics={"val/loss": [(0, math.inf), (1, math.nan)]})
            project_rows.set_primary(conn, "acc", 1, project=project_rows.find_project(conn, vision))
            return vision, lr

        vision, lr = await write(access.store_port(ctx, "runs"), fill)

        reply = await _ask(ctx, projects=["vision"])
        assert [r["id"] for r in reply["runs"]] == ["run_b", "run_a"]  # newest first; run_a through its experiment
        a = reply["runs"][1]
        assert (a["project"], a["experiment"], a["experiment_id"], a["tags"]) == ("vision", "lr", lr, ["base"])
        assert a["config"] == {"optim.lr": 0.001, "optim.momentum": None, "amp": True, "sizes": [1, 2], "note": "x",
                               "empty": {}}
        loss = a["metrics"]["train/loss"]
        assert loss["count"] == 4
        assert loss["last"] == {"step": 3, "value": "NaN"}
        assert loss["min"] == {"step": 1, "value": 1.0} and loss["max"] == {"step": 0, "value": 3.0}
        assert loss["best"] == {"step": 1, "value": 1.0}  # minimised, by its name
        assert a["metrics"]["acc"]["best"] == a["metrics"]["acc"]["max"] == {"step": 5, "value": 0.7}
        keys = {k["key"]: k["types"] for k in reply["config_keys"]}
        assert keys["optim.lr"] == ["number", "string"] and keys["optim.momentum"] == ["null"]
        assert keys["amp"] == ["bool"] and keys["sizes"] == ["list"] and keys["empty"] == ["object"]
        assert reply["primary_metric"] == "acc"  # the one project's
        assert reply["metrics"] == [{"name": "acc", "direction": "max", "primary": True},
                                    {"name": "train/loss", "direction": "min", "primary": False}]
        assert reply["truncated"] is False

        both = await _ask(ctx, experiments=[lr], runs=["run_c"], limit=1)
        assert [r["id"] for r in both["runs"]] == ["run_c"] and both["truncated"] is True
        # JSON has no NaN or infinity: they travel as strings, and their keys stay numbers.
        c = json.loads(json.dumps(both, allow_nan=False))["runs"][0]
        assert c["config"] == {"layers": 8, "eps": "NaN", "clip": [1.0, "-Infinity"], "warm.to": "Infinity"}
        assert {k["key"]: k["types"] for k in both["config_keys"]}["eps"] == ["number"]

        trials = await _ask(ctx, sweep="swp_1")
        (t,) = trials["runs"]
        assert (t["sweep_id"], t["sweep_trial"]) == ("swp_1", 0)
        assert t["config"] == {"layers": 4, "optim.lr": 0.1}  # the trial's values fill what the config lacks
        assert t["metrics"]["val/loss"]["min"] is None and t["metrics"]["val/loss"]["max"] is None  # none finite
        assert t["metrics"]["val/loss"]["last"]["value"] == "NaN"


@pytest.mark.parametrize(("body", "field"), [
    ({"projects": ["vision", "nope"]}, "projects[1]"),
    ({"experiments": ["exp_nope"]}, "experiments[0]"),
    ({"sweep": "swp_nope"}, "sweep"),
    ({"runs": ["run_x"]}, "runs[0]"),
])
async def test_unknown_names_are_a_400_naming_the_one(tmp_path, nursery, body, field):
    async with passes_by_hand(tmp_path, nursery) as ctx:
        await write(access.store_port(ctx, "runs"), lambda conn: _project(conn, "vision"))
        with pytest.raises(ApiError) as err:
            await _ask(ctx, **body)
        assert err.value.code == ErrorCode.BAD_REQUEST and err.value.details["field"] == field
        assert field.split("[")[0] in err.value.message and "nope" in err.value.message or "run_x" in err.value.message


async def test_an_old_summary_gets_min_and_max_once(tmp_path, nursery):
    """A summary kept before min and max were: filled from the stored points and stored; a batch
    after that keeps them (and one before they were filled never makes them from itself alone)."""
    async with passes_by_hand(tmp_path, nursery) as ctx:
        store = access.store_port(ctx, "runs")

        def old(conn):
            project_rows.insert_project(conn, "p", None, 1)
            pid = project_rows.find_project(conn, "p").id
            _run(conn, "run_o", created=1, project_id=pid, metrics={"loss": [(0, 5.0), (1, 2.0), (2, 3.0)]})
            summary = json.loads(conn.execute("SELECT summary FROM runs").fetchone()[0])
            for metric in summary["metrics"].values():  # as kept before this change
                del metric["min"], metric["max"]
            conn.execute("UPDATE runs SET summary = ?", (json.dumps(summary),))
            # A batch while they are missing: its own extremes alone would be wrong (min 4.0).
            batch = {"loss": {"step": [3], "ts": [1003], "value": [4.0]}}
            tsdb.ingest(conn, "run", "run_o", batch, source="s-run_o", seq=1)
            summarize(conn, "run_o", batch, 1)

        await write(store, old)
        loss = (await _ask(ctx, projects=["p"]))["runs"][0]["metrics"]["loss"]
        assert (loss["min"], loss["max"]) == ({"step": 1, "value": 2.0}, {"step": 0, "value": 5.0})
        stored = await ctx.readers.run(lambda conn: json.loads(conn.execute("SELECT summary FROM runs").fetchone()[0]))
        assert stored["metrics"]["loss"]["min"] == {"step": 1, "value": 2.0}

        def later(conn):
            batch = {"loss": {"step": [4], "ts": [1004], "value": [0.5]}}
            tsdb.ingest(conn, "run", "run_o", batch, source="s-run_o", seq=2)
            summarize(conn, "run_o", batch, 1)

        await write(store, later)
        loss = (await _ask(ctx, projects=["p"]))["runs"][0]["metrics"]["loss"]
        assert loss["min"] == {"step": 4, "value": 0.5} and loss["max"] == {"step": 0, "value": 5.0}


async def test_a_thousand_runs_by_eight_metrics_in_well_under_a_second(tmp_path, nursery):
    names = [f"m{k}/loss" if k % 2 else f"m{k}/acc" for k in range(8)]

    def fill(conn):
        project_rows.insert_project(conn, "big", None, 1)
        pid = project_rows.find_project(conn, "big").id
        for i in range(1000):
            _run(conn, f"run_{i:04d}", created=i, project_id=pid,
                 config={"optim": {"lr": 10 ** -(i % 5), "wd": None}, "layers": i % 7, "amp": i % 2 == 0},
                 metrics={name: [(s, (i + s + k) % 11 / 10) for s in range(4)] for k, name in enumerate(names)})

    async with passes_by_hand(tmp_path, nursery) as ctx:
        await write(access.store_port(ctx, "runs"), fill)
        await _ask(ctx, projects=["big"])  # warm: the first read opens the reader connections
        started = time.perf_counter()
        reply = await workspace.workspace_runs(ctx, structure({"projects": ["big"]}, WorkspaceQuery))
        body = json.dumps(unstructure(reply))  # what the route does to answer
        served = time.perf_counter() - started
        print(f"workspace runs: 1000 runs x 8 metrics in {served * 1000:.0f} ms, {len(body) // 1024} KiB")
        assert len(reply.runs) == 1000 and len(reply.metrics) == 8 and not reply.truncated
        assert all(len(run.metrics) == 8 for run in reply.runs)
        assert served < 3.0  # about 0.3 s on an idle 2-core machine; generous for a loaded one
