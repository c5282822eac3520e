"""``gpuplanectl mcp-stdio``: GPUPlane's MCP tools for clients that start a server on stdio
(Claude Code, Codex, Cursor): ``claude mcp add gpuplane -- gpuplanectl mcp-stdio``.

A pipe (``gpuplanectl.mcp_bridge``): JSON-RPC lines from stdin go to the daemon's ``POST /mcp``
over the local socket, where the caller is the trusted local user and needs no token; the
answers come back on stdout. With ``--server``, ``GPUPLANE_SERVER`` or a profile it goes to
that daemon's HTTP front instead, with the token as a bearer header. Only JSON-RPC is
written to stdout; notes go to stderr. The daemon may be stopped, started or restarted
under it: meanwhile each request gets a JSON-RPC error saying what is wrong. EOF on stdin
waits up to ``--drain`` seconds for requests in flight, then exits 0.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from gpuplanectl.client import DaemonUnreachable, NoDaemon
from gpuplanectl.commands import Globals, connect, globals_of
from gpuplanectl.mcp_bridge import Bridge, Endpoint, Unavailable
from gpuplanectl.remote import RemoteError

MCP_PATH = "/mcp"


def mcp_stdio(
    ctx: typer.Context,
    timeout: Annotated[float, typer.Option(
        "--timeout", metavar="SECONDS", min=1.0,
        help="The longest silence from the daemon while it answers one request (wait_for_events "
             "polls for at most 50 s; streams send a keep-alive every 15 s).")] = 300.0,
    drain: Annotated[float, typer.Option(
        "--drain", metavar="SECONDS", min=0.0,
        help="On EOF, how long to wait for requests still in flight.")] = 5.0,
) -> None:
    """Serve the daemon's MCP tools on stdin/stdout (for Claude Code, Codex and other stdio clients)."""
    g = globals_of(ctx)
    bridge = Bridge(lambda: open_endpoint(g, timeout), sys.stdout.buffer)
    try:
        bridge.serve(sys.stdin.buffer, drain_s=drain)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def open_endpoint(g: Globals, timeout: float) -> Endpoint:
    """A fresh connection to the daemon's /mcp: found again for every message, so a daemon
    restarted (a new socket, or a new port-file) is picked up at once.

    Raises:
        Unavailable: no daemon, or unusable remote settings; naming what to do.
    """
    try:
        client = connect(g, timeout=timeout)
    except NoDaemon as exc:
        raise Unavailable(f"{exc}. {g.start_hint()}", {
            "reason": "no_daemon", "runtime_dir": str(g.runtime_dir), "hint": g.start_hint()}) from None
    except DaemonUnreachable as exc:
        raise Unavailable(str(exc), {"reason": "unreachable"}) from None
    except RemoteError as exc:
        raise Unavailable(f"cannot use the remote server settings: {exc}", {"reason": "remote_config"}) from None
    target = MCP_PATH if client.server is None else client.server.base + MCP_PATH
    headers = client.request_headers("application/json, text/event-stream")  # the bearer token, when one is needed
    return Endpoint(client.new_connection(), target, headers, client.endpoint)
