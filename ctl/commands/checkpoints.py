"""``gpuplanectl ckpt list RUN``: what a run registered with ``run.log_checkpoint`` (or the
node's watcher found); ``gpuplanectl ckpt best EXPERIMENT``: the experiment's best.

One line per checkpoint, oldest step first (``GET /api/v1/runs/{id}/checkpoints``): its id,
step, parent (``@STEP`` for the run's checkpoint before it; another run's id for the checkpoint
this run resumed from), the ranking metric's value at its step and a few of the run's other
metrics nearest it; the best one starred (never a NaN), a deleted one marked ``x``; then each
one's evaluations, newest first. The metric is the run's primary metric unless ``--metric``
names another.

``best EXPERIMENT`` (its id, or its name with ``--project``) prints the best checkpoint over
all the experiment's runs whose file is still what was registered
(``GET /api/v1/experiments/{id}/best-checkpoint``), and the better ones passed over because
their file is gone or changed. Exit 1 when there is none or the metric has no direction, 2
when no metric is named or set.

The hidden old spelling ``checkpoints RUN`` is ``ckpt list``, and ``checkpoints best
EXPERIMENT`` is ``ckpt best`` (``best`` is no run id: those are ``run_<ULID>``).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote, urlencode

import typer
from gpuplanectl import render
from gpuplanectl.commands import Globals, JsonOption, connect, globals_of, reporting


BEST = "best"
# The API's query parameters as these commands' flags, for their error messages.
FLAGS = {"metric": "--metric", "project": "--project", "experiment": "EXPERIMENT"}

MetricOption = Annotated[str | None, typer.Option("--metric", metavar="NAME",
                                                  help="Rank by this metric (default: the primary metric).")]
ProjectOption = Annotated[str | None, typer.Option("--project", metavar="NAME",
                                                   help="The experiment's project (id or name).")]


def list_checkpoints(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="The run's id (run_...).", show_default=False)],
    metric: MetricOption = None,
    json_output: JsonOption = False,
) -> None:
    """List a run's checkpoints, the best by the metric starred, with their evaluations."""
    _list(globals_of(ctx), run_id, metric, json_output)


def best(
    ctx: typer.Context,
    experiment: Annotated[str, typer.Argument(metavar="EXPERIMENT", show_default=False,
                                              help="The experiment's id, or its name with --project.")],
    metric: MetricOption = None,
    project: ProjectOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show the best checkpoint over an experiment's runs, its file verified present."""
    _best(globals_of(ctx), experiment, metric, project, json_output)


def checkpoints(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN|best", help="The run's id, or 'best' and an experiment.",
                                          show_default=False)],
    experiment: Annotated[str | None, typer.Argument(metavar="[EXPERIMENT]", show_default=False,
                                                     help="With 'best': the experiment's id, or its name with "
                                                          "--project.")] = None,
    metric: MetricOption = None,
    project: Annotated[str | None, typer.Option("--project", metavar="NAME",
                                                help="With 'best': the experiment's project (id or name).")] = None,
    json_output: JsonOption = False,
) -> None:
    """The old spelling of `ckpt list RUN`, and as 'checkpoints best EXPERIMENT' of `ckpt best`."""
    g = globals_of(ctx)
    if run_id == BEST:
        if experiment is None:
            raise typer.BadParameter("'best' needs an EXPERIMENT", param_hint="EXPERIMENT")
        _best(g, experiment, metric, project, json_output)
        return
    if experiment is not None or project is not None:
        raise typer.BadParameter("EXPERIMENT and --project go with 'best' only", param_hint="EXPERIMENT")
    _list(g, run_id, metric, json_output)


def _list(g: Globals, run_id: str, metric: str | None, json_output: bool) -> None:
    query = f"?{urlencode({'metric': metric})}" if metric else ""
    with reporting(g, json_output, FLAGS):
        found = connect(g).get(f"/api/v1/runs/{quote(run_id, safe='')}/checkpoints{query}")
    if json_output:
        render.print_json(found)
        return
    if not found["checkpoints"]:
        print("no checkpoints")
        return
    ranked = found["metric"]
    cks = found["checkpoints"]
    step_of = {ck["id"]: ck["step"] for ck in cks}
    headers = ("", "ID", "STEP", "PARENT", "PATH", "SIZE", "REGISTERED") + ((ranked.upper(),) if ranked else ()) + (
        "METRICS",)
    rows = []
    for ck in cks:
        row = (_mark(ck), ck["id"], _step(ck["step"]), _parent(ck.get("parent_id"), step_of), ck["path"],
               render.format_bytes(ck["size_bytes"]), render.event_time(ck["created_at"]))
        if ranked:
            value = ck.get("metric_value")
            row += (render.format_number(value, ".6g"),)
        others = [m for m in ck.get("metrics", []) if m["name"] != ranked][:SHOWN_METRICS]
        rows.append(row + (" ".join(f"{m['name']}={_value(m['value'])}" for m in others) or "-",))
    print(render.table(headers, rows))
    evaluated = [ck for ck in cks if ck.get("evaluations")]
    if evaluated:
        print("\nevaluations (newest first):")
        for ck in evaluated:
            for ev in ck["evaluations"]:
                print(render.printable(f"  {ck['id']} step {_step(ck['step'])}: {ev['id']} {ev['status']}"
                                       + "".join(f" {k} {ev[k]}" for k in ("suite", "dataset") if ev.get(k))
                                       + "".join(f" {k}={_value(v)}" for k, v in sorted(ev["metrics"].items()))))
    notes = []
    if ranked:
        direction = found["direction"] or "no direction"
        notes.append(f"* best by {render.printable(ranked)} ({direction})" + (
            "" if found["best_id"] else ": no checkpoint has a value"))
    if any(ck.get("deleted_at") for ck in cks):
        notes.append("x deleted: its file was removed by retention")
    if notes:
        print("\n" + "; ".join(notes))


SHOWN_METRICS = 3  # beside the ranking metric; --json has them all


def _mark(ck: dict) -> str:
    return "x" if ck.get("deleted_at") else "*" if ck.get("best") else ""


def _step(step: int | None) -> str:
    return "-" if step is None else str(step)


def _parent(parent_id: str | None, step_of: dict) -> str:
    """The parent's step when it is this run's (``@10``), else its id (a run resumed from it)."""
    if parent_id is None:
        return "-"
    return f"@{_step(step_of[parent_id])}" if parent_id in step_of else parent_id


def _value(value: float | None) -> str:
    return "nan" if value is None else render.format_number(value, ".4g")


def _best(g: Globals, experiment: str, metric: str | None, project: str | None, json_output: bool) -> None:
    query = urlencode({k: v for k, v in (("metric", metric), ("project", project)) if v})
    with reporting(g, json_output, FLAGS):
        found = connect(g).get(f"/api/v1/experiments/{quote(experiment, safe='')}/best-checkpoint"
                               + (f"?{query}" if query else ""))
    if json_output:
        render.print_json(found)
        return
    ck = found["checkpoint"]
    print("\n".join(render.kv_lines([
        ("checkpoint", ck["id"]), ("run", found["run_id"]), ("path", ck["path"]),
        ("step", render.NONE if ck["step"] is None else str(ck["step"])),
        ("size", render.format_bytes(ck["size_bytes"])),
        (found["metric"], f"{render.format_number(found['metric_value'], '.6g')} ({found['direction']})")])))
    for passed in found["skipped"]:
        print(f"skipped {passed['checkpoint_id']}: {render.printable(passed['reason'])}")
