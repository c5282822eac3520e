"""``gpuplanectl status``: the daemon in one line, one row per actor, then its nodes, GPUs and queue.

The node, GPU and queue sections come from the job API; a daemon whose role keeps no job
store answers those with ``unavailable`` (or, older, without the routes: ``not_found``),
and status simply leaves them out, in text and in ``--json``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from gpuplanectl import render, render_nodes
from gpuplanectl.client import DaemonClient
from gpuplanectl.commands import JsonOption, connect, globals_of, reporting

from gpuplaned.protocol.errors import ApiError, ErrorCode

QUEUE_SHOWN = 10
QUEUE_FETCHED = 1000
# Answers meaning "this daemon has no such section", not "status failed".
ABSENT = frozenset({ErrorCode.UNAVAILABLE, ErrorCode.NOT_FOUND, ErrorCode.STOPPING, ErrorCode.NOT_READY})


def status(
    ctx: typer.Context,
    json_output: JsonOption = False,
    stats: Annotated[bool, typer.Option("--stats", "-s", help="Add each actor's statistics.")] = False,
) -> None:
    """Show the daemon, its actors, nodes and GPUs, and the job queue.

    One line for the daemon; per actor: state, uptime, restarts, last error; per node:
    status, free GPUs, CPU jobs, conditions (DISK_LOW) and, for a remote agent's node, its
    link, last heartbeat, spool backlog and clock skew; per GPU: its latest utilization,
    memory used/total, temperature, power draw/limit and the job holding it ("-" before the
    node's first sample); then the first queued jobs in the order they will run (priority,
    then age). --json has every queued job.

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
        nodes = _section(client, "/api/v1/nodes", "nodes")
        queued = _section(client, f"/api/v1/jobs?status=QUEUED&limit={QUEUE_FETCHED}", "jobs")
    queue = render.queue_order(queued) if queued is not None else None
    if json_output:
        body: dict[str, Any] = {"daemon": daemon, "actors": actors}
        if nodes is not None:
            body["nodes"] = nodes
        if queue is not None:
            body["queue"] = queue
        render.print_json(body)
        return
    print(render.daemon_line(daemon))
    print()
    if actors is None:
        print("(actors not listed: gpuplaned is shutting down)")
    else:
        print(render.actor_table(actors, stats=stats))
    if nodes is not None:
        print()
        print(render_nodes.node_list_table(nodes) if nodes else "no nodes yet")
        if any(node.get("gpus") for node in nodes):
            print()
            print(render_nodes.gpu_status_table(nodes))
    if queue is not None:
        print()
        if not queue:
            print("queue: empty")
        else:
            more = f", first {QUEUE_SHOWN} shown" if len(queue) > QUEUE_SHOWN else ""
            print(f"queue: {len(queue)}{'+' if len(queue) >= QUEUE_FETCHED else ''} job"
                  f"{'' if len(queue) == 1 else 's'}{more}")
            print(render.queue_table(queue[:QUEUE_SHOWN]))


def _section(client: DaemonClient, path: str, key: str) -> list[Any] | None:
    try:
        return client.get(path)[key]
    except ApiError as exc:
        if exc.code in ABSENT:
            return None
        raise
