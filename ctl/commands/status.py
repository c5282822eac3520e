"""``gpuplanectl status``: the daemon in one line, then one row per actor."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, globals_of, reporting
from gpuplaned.protocol.errors import ApiError, ErrorCode


def status(
    ctx: typer.Context,
    json_output: JsonOption = False,
    stats: Annotated[bool, typer.Option("--stats", "-s", help="Add each actor's statistics.")] = False,
) -> None:
    """Show the daemon and its actors.

    One line for the daemon, then per actor: state, uptime, restarts, last error.

    Exits 1 when no daemon runs.
    """
    g = globals_of(ctx)
    with reporting(g, json_output):
        client = connect(g)
        daemon = client.get("/api/v1/daemon")
        try:
            actors = client.get("/api/v1/actors")["actors"]
        except ApiError as exc:
            # A stopping daemon still describes itself but no longer lists its actors.
            if exc.code is not ErrorCode.STOPPING:
                raise
            actors = None
    if json_output:
        render.print_json({"daemon": daemon, "actors": actors})
        return
    print(render.daemon_line(daemon))
    print()
    if actors is None:
        print("(actors not listed: gpuplaned is shutting down)")
    else:
        print(render.actor_table(actors, stats=stats))
