"""The primary metric: ``gpuplanectl primary-metric show|set|clear [--project P [--experiment E]]``.

The primary metric ranks a run's checkpoints (``ckpt list``, ``ckpt best``, ``ckpt prune``,
``job retry --resume-from best``) and heads the run's summary. It is set at three levels and
resolved experiment -> project -> global: with neither ``--project`` nor ``--experiment`` a
command is about the global one; ``--experiment`` takes an experiment's id, or its name with
``--project``. ``set`` and ``clear`` go through ``PUT /api/v1/primary-metric``; ``show``
through ``GET``. ``set --direction`` also gives the metric its direction (``PATCH
/api/v1/metric-definitions/{metric}``), which ranking needs.

Each prints the resolution for the scope, each level's own setting and the metric's direction;
``--json`` the API's body (``{"primary_metric": {...}}``, with ``"metric_definition"`` once a
metric is resolved). Exit 1 for an unknown project or experiment, 2 for a bad metric name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import typer
from gpuplanectl import render
from gpuplanectl.client import DaemonClient
from gpuplanectl.commands import JsonOption, connect, globals_of, reporting

app = typer.Typer(name="primary-metric", help="Show, set or clear the primary metric that ranks checkpoints: "
                                              "globally, for a project or for an experiment.",
                  no_args_is_help=True, rich_markup_mode=None)

DIRECTIONS = ("minimize", "maximize")
PATH = "/api/v1/primary-metric"
LEVELS = ("experiment", "project", "global")
# The API's fields, as this command's flags and arguments name them (for its error messages).
FLAGS = {"metric": "METRIC", "project": "--project", "experiment": "--experiment", "direction": "--direction"}

ProjectOption = Annotated[str | None, typer.Option("--project", metavar="P", show_default=False,
                                                   help="A project (its id or name) [default: the global setting].")]
ExperimentOption = Annotated[str | None, typer.Option(
    "--experiment", metavar="E", show_default=False,
    help="An experiment: its id, or its name with --project.")]


@app.command("show")
def show(ctx: typer.Context, project: ProjectOption = None, experiment: ExperimentOption = None,
         json_output: JsonOption = False) -> None:
    """Show the primary metric for a scope, where it is set, and each level's own setting."""
    g = globals_of(ctx)
    query = urlencode(_scope(project, experiment))
    with reporting(g, json_output, FLAGS):
        client = connect(g)
        primary = client.get(PATH + (f"?{query}" if query else ""))["primary_metric"]
        definition = _definition(client, primary["metric"])
    _print(primary, definition, json_output)


@app.command("set")
def set_metric(
    ctx: typer.Context,
    metric: Annotated[str, typer.Argument(metavar="METRIC", show_default=False,
                                          help="The metric's name, as logged (eval/loss); one not logged yet is "
                                               "defined now.")],
    project: ProjectOption = None,
    experiment: ExperimentOption = None,
    direction: Annotated[str | None, typer.Option(
        "--direction", metavar="minimize|maximize", show_default=False,
        help="Also set which way the metric is better (ranking needs it) [default: leave it as it is].")] = None,
    json_output: JsonOption = False,
) -> None:
    """Set the primary metric globally, for a project or for an experiment."""
    if direction is not None and direction not in DIRECTIONS:
        raise typer.BadParameter(f"{direction!r}: minimize or maximize", param_hint="--direction")
    _put(ctx, metric, project, experiment, direction, json_output)


@app.command("clear")
def clear(ctx: typer.Context, project: ProjectOption = None, experiment: ExperimentOption = None,
          json_output: JsonOption = False) -> None:
    """Clear a level's primary metric, so that the level above (project, then global) decides."""
    _put(ctx, None, project, experiment, None, json_output)


def _put(ctx: typer.Context, metric: str | None, project: str | None, experiment: str | None,
         direction: str | None, json_output: bool) -> None:
    g = globals_of(ctx)
    with reporting(g, json_output, FLAGS):
        client = connect(g)
        primary = client.request("PUT", PATH, {"metric": metric, **_scope(project, experiment)})["primary_metric"]
        if direction is not None and metric is not None:
            client.request("PATCH", _definition_path(metric), {"direction": direction})
        definition = _definition(client, primary["metric"])
    _print(primary, definition, json_output)


def _scope(project: str | None, experiment: str | None) -> dict[str, str]:
    return {k: v for k, v in (("project", project), ("experiment", experiment)) if v is not None}


def _definition_path(metric: str) -> str:
    return f"/api/v1/metric-definitions/{quote(metric, safe='/')}"


def _definition(client: DaemonClient, metric: str | None) -> dict[str, Any] | None:
    return client.get(_definition_path(metric))["metric_definition"] if metric else None


def _print(primary: Mapping[str, Any], definition: Mapping[str, Any] | None, json_output: bool) -> None:
    if json_output:
        render.print_json({"primary_metric": primary, **({"metric_definition": definition} if definition else {})})
        return
    print("\n".join(primary_lines(primary, definition)))


def primary_lines(primary: Mapping[str, Any], definition: Mapping[str, Any] | None) -> list[str]:
    """``primary: eval/loss (minimize), set on the project``, then each level's own setting:
    ``project: eval/loss (qwen, prj_...)``."""
    metric = primary["metric"]
    if metric is None:
        head = f"{render.NONE} (none set: checkpoints are not ranked)"
    else:
        direction = (definition or {}).get("direction") or "no direction: set one with --direction"
        where = "globally" if primary["source"] == "global" else f"on the {primary['source']}"
        head = f"{metric} ({direction}), set {where}"
    rows = [("primary", head)]
    for level in LEVELS:
        ref = primary.get(level)
        if level != "global" and ref is None:
            continue
        where = "" if ref is None else f" ({ref['name']}, {ref['id']})"
        rows.append((level, (primary["settings"][level] or render.NONE) + where))
    return render.kv_lines(rows)
