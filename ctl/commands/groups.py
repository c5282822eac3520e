"""Groups and queue control (issue 31 item 2, pueue-style): ``gpuplanectl group list|set|pause|resume``,
``queue status|pause|resume``, ``job priority JOB N``, ``job remove JOB`` and ``clean``.

A group (``job submit --group NAME``) runs at most its parallel limit of jobs at once; pausing a
group or the whole queue stops new jobs from starting and leaves running ones alone. The queued
jobs held back say why in ``job list``'s WAIT column and ``job show``: "group train: 2 of 2
running", "group train paused", "queue paused".

``--json`` prints the API's body. Exit 1 for an unknown group or job, or a job in the wrong state
(the message names it); 2 for a bad name or duration.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

import typer
from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, globals_of, reporting
from gpuplanectl.commands.tokens import parse_duration

NOUN = {"no_args_is_help": True, "rich_markup_mode": None}
group_app = typer.Typer(name="group", help="Job groups: each with its own parallel limit, paused or resumed alone.",
                        **NOUN)  # type: ignore[arg-type]
queue_app = typer.Typer(name="queue", help="Pause or resume the whole queue.", **NOUN)  # type: ignore[arg-type]

_NAME = Annotated[str, typer.Argument(metavar="NAME", show_default=False, help="The group's name.")]
_JOB = Annotated[str, typer.Argument(metavar="JOB", show_default=False,
                                     help="A job id (job_...), as `gpuplanectl job list` shows it.")]
REMOVES = ("the job's row and its output kept by the daemon, and its own folder (jobs/<id>/: its attempts' "
           "stdout/stderr logs and records) in the daemon's home and on each remote node that ran it (an agent "
           "away deletes it when it is back). Its runs stay (metrics, checkpoint "
           "records), no longer naming a job; its working directory, checkpoint files and TensorBoard files are "
           "never touched")


def _group_path(name: str) -> str:
    return f"/api/v1/groups/{quote(name, safe='')}"


def _job_path(job_id: str) -> str:
    return f"/api/v1/jobs/{quote(job_id, safe='')}"


def group_line(group: dict[str, Any]) -> str:
    limit = "no limit" if group["parallel"] is None else f"parallel {group['parallel']}"
    paused = ", paused" if group["paused"] else ""
    return f"group {group['name']}: {limit}{paused}; {group['running']} running, {group['queued']} queued"


@group_app.command("list")
def list_groups(ctx: typer.Context, json_output: JsonOption = False) -> None:
    """List the groups: each one's parallel limit, whether it is paused, its jobs running and queued."""
    g = globals_of(ctx)
    with reporting(g, json_output):
        found = connect(g).get("/api/v1/groups")
    if json_output:
        render.print_json(found)
        return
    rows = [(r["name"], "-" if r["parallel"] is None else str(r["parallel"]), "yes" if r["paused"] else "no",
             str(r["running"]), str(r["queued"])) for r in found["groups"]]
    print(render.table(("GROUP", "PARALLEL", "PAUSED", "RUNNING", "QUEUED"), rows) if rows else "no groups")
    if found["queue_paused"]:
        print("the whole queue is paused (gpuplanectl queue resume)")


@group_app.command("set")
def set_group(
    ctx: typer.Context,
    name: _NAME,
    parallel: Annotated[int | None, typer.Option(
        "--parallel", metavar="K", min=1, show_default=False,
        help="Run at most K of the group's jobs at once.")] = None,
    no_limit: Annotated[bool, typer.Option("--no-limit", help="Take the group's limit away.")] = False,
    json_output: JsonOption = False,
) -> None:
    """Make a group, or change its parallel limit (a job submitted with --group makes its group too)."""
    if (parallel is None) == (not no_limit):
        raise typer.BadParameter("give --parallel K or --no-limit", param_hint="--parallel")
    g = globals_of(ctx)
    with reporting(g, json_output, {"parallel": "--parallel", "group": "NAME"}):
        group = connect(g).request("PUT", _group_path(name), {"parallel": parallel})["group"]
    _out(json_output, {"group": group}, group_line(group))


def _pause_group(ctx: typer.Context, name: str, verb: str, json_output: bool) -> None:
    g = globals_of(ctx)
    with reporting(g, json_output, {"group": "NAME"}):
        group = connect(g).post(f"{_group_path(name)}/{verb}")["group"]
    _out(json_output, {"group": group}, group_line(group))


@group_app.command("pause")
def pause_group(ctx: typer.Context, name: _NAME, json_output: JsonOption = False) -> None:
    """Start none of the group's queued jobs until it is resumed; its running jobs go on."""
    _pause_group(ctx, name, "pause", json_output)


@group_app.command("resume")
def resume_group(ctx: typer.Context, name: _NAME, json_output: JsonOption = False) -> None:
    """Let the group's queued jobs start again."""
    _pause_group(ctx, name, "resume", json_output)


def _queue(ctx: typer.Context, verb: str | None, json_output: bool) -> None:
    g = globals_of(ctx)
    with reporting(g, json_output):
        client = connect(g)
        state = client.post(f"/api/v1/queue/{verb}") if verb else client.get("/api/v1/queue")
    if json_output:
        render.print_json(state)
    else:
        print("the queue is paused: no queued job starts" if state["paused"] else "the queue runs")


@queue_app.command("status")
def queue_status(ctx: typer.Context, json_output: JsonOption = False) -> None:
    """Say whether the whole queue is paused."""
    _queue(ctx, None, json_output)


@queue_app.command("pause")
def pause_queue(ctx: typer.Context, json_output: JsonOption = False) -> None:
    """Start no queued job until the queue is resumed (kept across daemon restarts); running jobs go on."""
    _queue(ctx, "pause", json_output)


@queue_app.command("resume")
def resume_queue(ctx: typer.Context, json_output: JsonOption = False) -> None:
    """Let queued jobs start again."""
    _queue(ctx, "resume", json_output)


def priority(
    ctx: typer.Context,
    job_id: _JOB,
    value: Annotated[int, typer.Argument(metavar="N", show_default=False, help="The new priority: higher runs first.")],
    json_output: JsonOption = False,
) -> None:
    """Change a queued job's priority, and so its place in the queue.

    Exits 1 for a job that is not queued (the message names its state).
    """
    g = globals_of(ctx)
    with reporting(g, json_output, {"priority": "N"}):
        job = connect(g).post(f"{_job_path(job_id)}/priority", {"priority": value})["job"]
    _out(json_output, {"job": job}, f"{job['id']} {job['status']} priority {job['priority']}")


def remove(ctx: typer.Context, job_id: _JOB, json_output: JsonOption = False) -> None:
    # its help: below, with what it removes
    g = globals_of(ctx)
    with reporting(g, json_output):
        removed = connect(g).post(f"{_job_path(job_id)}/remove")
    _out(json_output, removed, _removed_text(removed))


remove.__doc__ = f"""Remove a queued or ended job.

    Removes {REMOVES}.

    Exits 1 for a job on a node (cancel it first) or one that jobs still waiting depend on
    (--after): the message names them; cancel or remove them first.
    """


def clean(
    ctx: typer.Context,
    group: Annotated[str | None, typer.Option("--group", metavar="NAME", show_default=False,
                                              help="Only this group's jobs.")] = None,
    older_than: Annotated[str | None, typer.Option(
        "--older-than", metavar="DURATION", show_default=False,
        help="Only jobs that ended at least this long ago: 30d, 12h, 90m, 45s or 2w.")] = None,
    json_output: JsonOption = False,
) -> None:
    # its help: below, with what it removes
    body: dict[str, Any] = {}
    if group is not None:
        body["group"] = group
    if older_than is not None:
        try:
            body["older_than_s"] = parse_duration(older_than)
        except typer.BadParameter as exc:
            raise typer.BadParameter(str(exc), param_hint="--older-than") from None
    g = globals_of(ctx)
    with reporting(g, json_output, {"group": "--group", "older_than_s": "--older-than"}):
        removed = connect(g).post("/api/v1/jobs:clean", body)
    _out(json_output, removed, _removed_text(removed))


clean.__doc__ = f"""Remove ended jobs (SUCCEEDED, FAILED, CANCELLED), the way `pueue clean` does.

    For each: {REMOVES}. An ended job that jobs still waiting depend on (--after) is kept, and
    named.
    """


def _removed_text(removed: dict[str, Any]) -> str:
    lines = [f"removed {len(removed['removed'])} job(s)" + (f": {', '.join(removed['removed'])}"
                                                          if removed["removed"] else "")]
    if removed.get("kept"):
        lines.append(f"kept, since jobs still waiting depend on them: {', '.join(removed['kept'])}")
    if removed.get("files_waiting_on"):
        lines.append(f"their folders on {', '.join(removed['files_waiting_on'])} go once the node's agent is back")
    return "\n".join(lines)


def _out(json_output: bool, body: dict[str, Any], text: str) -> None:
    if json_output:
        render.print_json(body)
    else:
        print(text)
