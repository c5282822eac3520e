"""Actors: ``gpuplanectl actor list|start|stop|restart``; one control-API verb each, then the
actor's new state.

The daemon answers ``stop`` once the actor has ended, and ``start``/``restart`` once the
new incarnation called ``started()``: still STARTING until it has run ``startsecs``. Like
supervisorctl, ``start`` and ``restart`` then wait (``--wait``, the default) until the actor
is RUNNING or has given up, so the exit code says whether it came up.

Output: the actor's state line, or ``{"actor": {...}}`` with ``--json`` (``list``: one line per
actor, or ``{"actors": [...]}``). Exit 1 when the actor did not reach the state asked for (the
line or JSON is still printed, the reason on stderr).

The hidden old spellings ``start``, ``stop`` and ``restart`` at the top take an actor too, and
``start JOB`` and ``stop JOB``, for an argument that starts with ``job_``, are ``job retry``
and ``job cancel`` (``gpuplanectl.commands.jobs``); no actor has a name like that."""

from __future__ import annotations

import time
from typing import Annotated, Any
from urllib.parse import quote

import typer
from gpuplanectl import render
from gpuplanectl.client import DaemonClient
from gpuplanectl.commands import JsonOption, connect, globals_of, jobs, reporting
from gpuplanectl.exit_codes import EXIT_FAILURE

app = typer.Typer(name="actor", help="List the daemon's actors; start, stop or restart one.", no_args_is_help=True,
                  rich_markup_mode=None)

# States an actor passes through on its own; anything else stays until someone acts.
SETTLING = frozenset({"STARTING", "BACKOFF", "STOPPING"})
# What each verb is for: the states that count as success.
GOALS = {
    "start": frozenset({"RUNNING"}),
    "restart": frozenset({"RUNNING"}),
    "stop": frozenset({"STOPPED", "EXITED", "FATAL"}),
}
POLL_INTERVAL = 0.05

ActorArgument = Annotated[str, typer.Argument(metavar="ACTOR", help="An actor's name, as `gpuplanectl actor list` "
                                                                   "lists it.", show_default=False)]
ActorOrJobArgument = Annotated[str, typer.Argument(
    metavar="ACTOR|JOB", show_default=False,
    help="An actor's name, as `gpuplanectl actor list` lists it, or a job id (job_...).")]
JOB_PREFIX = "job_"
WaitOption = Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until the actor is RUNNING or has given up (FATAL).")]
TimeoutOption = Annotated[float, typer.Option("--timeout", metavar="SECONDS", min=0.0, help="The longest --wait waits.")]


@app.command("list")
def list_actors(ctx: typer.Context, json_output: JsonOption = False) -> None:
    """List the daemon's actors in start order: state, uptime, restarts, last error."""
    g = globals_of(ctx)
    with reporting(g, json_output):
        found = connect(g).get("/api/v1/actors")
    if json_output:
        render.print_json(found)
    else:
        for actor in found["actors"]:
            print(render.actor_line(actor))


@app.command("start")
def start_actor(ctx: typer.Context, actor: ActorArgument, json_output: JsonOption = False,
                wait: WaitOption = True, timeout: TimeoutOption = 30.0) -> None:
    """Start an actor and wait until it is RUNNING.

    Starts a STOPPED, EXITED or FATAL actor with a fresh restart budget; a no-op for one
    that is already running.
    """
    _command(ctx, "start", actor, json_output, wait=wait, timeout=timeout)


@app.command("stop")
def stop_actor(ctx: typer.Context, actor: ActorArgument, json_output: JsonOption = False) -> None:
    """Stop an actor, returning once it has ended.

    Stopping `control` is refused: it serves the API this command talks to.
    """
    _command(ctx, "stop", actor, json_output, wait=False, timeout=0.0)


def start(ctx: typer.Context, actor: ActorOrJobArgument, json_output: JsonOption = False,
          wait: WaitOption = True, timeout: TimeoutOption = 30.0) -> None:
    """Start an actor and wait until it is RUNNING (`actor start`); or retry a job (`job retry`)."""
    if actor.startswith(JOB_PREFIX):
        jobs.retry_job(ctx, actor, json_output)
    else:
        start_actor(ctx, actor, json_output, wait, timeout)


def stop(ctx: typer.Context, actor: ActorOrJobArgument, json_output: JsonOption = False) -> None:
    """Stop an actor (`actor stop`); or cancel a job (`job cancel`)."""
    if actor.startswith(JOB_PREFIX):
        jobs.cancel_job(ctx, actor, json_output)
    else:
        stop_actor(ctx, actor, json_output)


@app.command("restart")
def restart(ctx: typer.Context, actor: ActorArgument, json_output: JsonOption = False,
            wait: WaitOption = True, timeout: TimeoutOption = 30.0) -> None:
    """Stop an actor, then start it again.

    It gets a fresh restart budget; waits until it is RUNNING.
    """
    _command(ctx, "restart", actor, json_output, wait=wait, timeout=timeout)


def _command(ctx: typer.Context, verb: str, name: str, json_output: bool, *, wait: bool, timeout: float) -> None:
    g = globals_of(ctx)
    path = f"/api/v1/actors/{quote(name, safe='')}"
    with reporting(g, json_output):
        client = connect(g)
        actor = client.post(f"{path}/{verb}")["actor"]
        if wait:
            actor = _wait_settled(client, path, actor, timeout)
    if json_output:
        render.print_json({"actor": actor})
    else:
        print(render.actor_line(actor))
    state = actor["state"]
    if state in GOALS[verb] or (not wait and state in SETTLING):
        return
    if state in SETTLING:
        render.print_error(f"actor {name!r} is still {state} after {timeout:g} s")
    else:
        reason = f"; last error: {actor['last_error']}" if actor.get("last_error") else ""
        render.print_error(f"actor {name!r} did not {verb}: it is {state}{reason}")
    raise typer.Exit(EXIT_FAILURE)


def _wait_settled(client: DaemonClient, path: str, actor: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Poll the actor until it leaves the SETTLING states or ``timeout`` passes; returns the last seen."""
    deadline = time.monotonic() + timeout
    while actor["state"] in SETTLING and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL)
        actor = client.get(path)["actor"]
    return actor
