"""Nodes: ``gpuplanectl node list``, ``gpuplanectl node show NODE``, ``gpuplanectl node drain|undrain NODE``
and ``gpuplanectl node forget NODE``.

``list`` is one row per node (``GET /api/v1/nodes``), with a remote agent's link (state, last
heartbeat, spool backlog, clock skew) when there are remote nodes; ``show`` is one node in full
(``GET /api/v1/nodes/{id-or-name}``): its hardware and labels, its link, each GPU's latest readings and
processes (with the job each belongs to, or ``foreign``), and the host's CPU, memory and
disks; then the last hour in a few numbers (``/metrics``: average and peak utilization,
peak memory). ``forget`` removes an offline node for good (``DELETE /api/v1/nodes/{key}``): one
renamed or retired, which would stay OFFLINE in the list forever; an online one, or one with a
job dispatched or running, is refused (exit 1). ``drain`` stops new jobs going to a node while its
running ones go on (``POST /api/v1/nodes/{node}/drain``), until ``undrain``; a drained node shows the
condition DRAINED. ``--json`` prints the API's body (``{"nodes": [...]}``, ``{"node": {...}}`` or
``{"forgotten": {"id", "name"}}``). An unknown node exits 1.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote, urlencode

import typer
from gpuplanectl import render, render_nodes
from gpuplanectl.client import DaemonClient
from gpuplanectl.commands import JsonOption, connect, globals_of, reporting

from gpuplaned.protocol.errors import ApiError

app = typer.Typer(
    name="node",
    help="List the nodes, show one with its GPUs' readings, drain or undrain one, or forget one that is gone.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@app.command("list")
def list_nodes(ctx: typer.Context, json_output: JsonOption = False) -> None:
    """List the nodes: status, GPU backend, GPUs and how many are free, CPU jobs, conditions.

    With remote agents' nodes, also each one's LINK (attached or detached; "local" for
    the server's own node), its last HEARTBEAT, the BACKLOG of its agent's spool not yet
    acknowledged (records / bytes) and its clock's SKEW (the agent's minus the server's).
    CONDITIONS: what the node reports wrong (DISK_LOW), and "not accepting jobs" while
    it takes no new ones.
    """
    g = globals_of(ctx)
    with reporting(g, json_output):
        nodes = connect(g).get("/api/v1/nodes")["nodes"]
    if json_output:
        render.print_json({"nodes": nodes})
    elif nodes:
        print(render_nodes.node_list_table(nodes))
    else:
        print("no nodes yet")


@app.command("show")
def show(
    ctx: typer.Context,
    node: Annotated[str, typer.Argument(metavar="NODE", help="A node's name or id, as `gpuplanectl node list` shows it.",
                                        show_default=False)],
    json_output: JsonOption = False,
) -> None:
    """Show a node: hardware, labels, its link, each GPU's readings and processes, the host.

    Readings are the node's latest sample ("-" before the first one). A GPU process
    belongs to a job, or is "foreign": started outside gpuplane.
    """
    g = globals_of(ctx)
    with reporting(g, json_output):
        client = connect(g)
        found = client.get(f"/api/v1/nodes/{quote(node, safe='')}")["node"]
        history = None if json_output else _history(client, found["id"])
    if json_output:
        render.print_json({"node": found})
        return
    print(render_nodes.node_detail(found))
    if history:
        print()
        print(history)


def _history(client: DaemonClient, node_id: str) -> str | None:
    """The last hour in a few numbers; None when the daemon keeps no metrics (or has none yet)."""
    query = urlencode({"names": ",".join(render_nodes.HISTORY_SERIES), "window": "1h", "points": 1})
    try:
        metrics = client.get(f"/api/v1/nodes/{quote(node_id, safe='')}/metrics?{query}")
    except ApiError:
        return None  # an optional section: the node itself was shown
    return render_nodes.history_text(metrics) if isinstance(metrics, dict) else None


NodeArgument = Annotated[str, typer.Argument(metavar="NODE", help="A node's name or id, as `gpuplanectl node list` "
                                                                "shows it.", show_default=False)]


@app.command("drain")
def drain(ctx: typer.Context, node: NodeArgument, json_output: JsonOption = False) -> None:
    """Drain a node: it gets no new jobs; its running jobs go on.

    Kept across restarts until `node undrain`. Jobs that only this node could run
    stay queued, saying why (`job show`).
    """
    _set_drained(ctx, node, "drain", json_output)


@app.command("undrain")
def undrain(ctx: typer.Context, node: NodeArgument, json_output: JsonOption = False) -> None:
    """Undrain a node: it takes new jobs again."""
    _set_drained(ctx, node, "undrain", json_output)


def _set_drained(ctx: typer.Context, node: str, verb: str, json_output: bool) -> None:
    g = globals_of(ctx)
    with reporting(g, json_output):
        found = connect(g).post(f"/api/v1/nodes/{quote(node, safe='')}/{verb}")
    if json_output:
        render.print_json(found)
        return
    shown = found["node"]
    what = "drained: it gets no new jobs, its running jobs go on" if verb == "drain" else "undrained: it takes new jobs"
    print(f"node {render.printable(shown['name'])} ({shown['id']}) {what}")


@app.command("forget")
def forget(
    ctx: typer.Context,
    node: Annotated[str, typer.Argument(metavar="NODE", help="An offline node's name or id.", show_default=False)],
    json_output: JsonOption = False,
) -> None:
    """Forget an offline node that is gone for good (renamed or retired).

    Its record, GPU slots and metrics go; its jobs and runs keep their history. A node
    that is online, or has a job dispatched or running, is refused.
    """
    g = globals_of(ctx)
    with reporting(g, json_output):
        forgotten = connect(g).request("DELETE", f"/api/v1/nodes/{quote(node, safe='')}")
    if json_output:
        render.print_json(forgotten)
        return
    found = forgotten["forgotten"]
    print(f"forgot node {render.printable(found['name'])} ({found['id']})")
