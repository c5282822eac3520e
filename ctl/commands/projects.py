"""Projects and their experiments: ``gpuplanectl project list`` and ``gpuplanectl project show NAME``
(``projects``, the hidden old spelling of ``project list``, stays for scripts).

``list`` lists the projects, newest first: name, runs, experiments and the primary
metric set on each. ``project show NAME`` (or its id) prints one project, its primary metric
as resolved (the project's own, else the global one), and its experiments with the primary
metric each sets. Training scripts create projects and experiments on first sight
(``gpuplane.init(project=..., experiment=...)``); the API edits them (``/api/v1/projects``).

``--json`` prints the API's body: ``{"projects": [...], "next_cursor"}`` for the list,
``{"project", "primary_metric", "experiments"}`` for show. Exit 1 for an unknown project.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import typer
from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, globals_of, reporting

app = typer.Typer(name="project", help="List projects or show one with its experiments and primary metric.",
                  no_args_is_help=True, rich_markup_mode=None)


@app.command("list")
def projects(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="At most this many, newest first.")] = 100,
    json_output: JsonOption = False,
) -> None:
    """List projects, newest first, with their runs, experiments and primary metric."""
    g = globals_of(ctx)
    with reporting(g, json_output):
        found = connect(g).get(f"/api/v1/projects?{urlencode({'limit': limit})}")
    if json_output:
        render.print_json(found)
    elif found["projects"]:
        print(render.table(("NAME", "ID", "RUNS", "EXPERIMENTS", "PRIMARY", "CREATED"),
                           [_project_row(p) for p in found["projects"]]))
    else:
        print("no projects")


def _project_row(project: Mapping[str, Any]) -> tuple[str, ...]:
    return (project["name"], project["id"], str(project["runs"]), str(project["experiments"]),
            project["primary_metric"] or render.NONE, render.event_time(project["created_at"]))


@app.command("show")
def show(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(metavar="NAME", help="The project's name or id.", show_default=False)],
    json_output: JsonOption = False,
) -> None:
    """Show a project, its resolved primary metric and its experiments."""
    g = globals_of(ctx)
    with reporting(g, json_output):
        client = connect(g)
        project = client.get(f"/api/v1/projects/{quote(key, safe='')}")["project"]
        primary = client.get(f"/api/v1/primary-metric?{urlencode({'project': project['id']})}")["primary_metric"]
        experiments = client.get(f"/api/v1/projects/{project['id']}/experiments?limit=10000")["experiments"]
    if json_output:
        render.print_json({"project": project, "primary_metric": primary, "experiments": experiments})
        return
    resolved = f"{primary['metric']} ({primary['source']})" if primary["metric"] else render.NONE
    for label, value in (("project", f"{project['name']} ({project['id']})"),
                         ("created", render.event_time(project["created_at"])),
                         ("runs", str(project["runs"])), ("primary", resolved),
                         ("about", project["description"] or render.NONE)):
        print(f"{label + ':':<10}{render.printable(value)}")
    if experiments:
        print()
        print(render.table(("EXPERIMENT", "ID", "RUNS", "PRIMARY", "CREATED"),
                           [(e["name"], e["id"], str(e["runs"]), e["primary_metric"] or render.NONE,
                             render.event_time(e["created_at"])) for e in experiments]))
