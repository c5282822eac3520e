"""The control actor: serves the daemon's app on the local control endpoint.

Owns: one hypercorn (trio worker) server over a duplicate of the endpoint's listening
socket, which the daemon claimed at start and keeps open, so a restart of this actor never
unbinds the socket.
Inputs: HTTP requests from gpuplanectl, the SDK and scripts on this machine.
Outputs: calls into the service layer; nothing on its inbox. ``/mcp`` is the MCP server, the
caller trusted (``gpuplaned.mcp.asgi``). In role agent there is no service layer: it serves
the agent's small app instead (``gpuplaned.uplink.agent_app``: the daemon, its actors, and
the SDK's calls forwarded to the server over the uplink).
Restart: permanent. It cannot be stopped through the API it serves.
Ready: the server accepts connections; ``started()`` passes a ``ControlHandle``.
Stop: graceful; hypercorn stops accepting and finishes in-flight requests (the shutdown
reply among them) for up to ``connections.GRACE`` seconds.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

import attrs
import trio

from gpuplaned.http.connections import hypercorn_config
from gpuplaned.runtime.context import ActorContext

if TYPE_CHECKING:
    from gpuplaned.http.app import RequestStats
    from gpuplaned.service.context import ServerContext
    from gpuplaned.uplink.agent_app import AgentRequestStats

log = logging.getLogger("gpuplaned.control")

@attrs.frozen
class ControlStats:
    endpoint: str
    requests: int
    errors: int


@attrs.define
class ControlHandle:
    endpoint: str
    request_stats: RequestStats | AgentRequestStats

    def statistics(self) -> ControlStats:
        return ControlStats(self.endpoint, self.request_stats.requests, self.request_stats.errors)


async def run(ctx: ActorContext[ServerContext], *, task_status: trio.TaskStatus[ControlHandle] = trio.TASK_STATUS_IGNORED) -> None:
    endpoint = ctx.shared.endpoint
    limits = ctx.shared.config.http_limits
    cfg = hypercorn_config(endpoint.hypercorn_bind(), limits)
    async with trio.open_nursery() as nursery:
        # Each role imports only its own app: an agent has no use for the server's (~30 MB).
        if ctx.shared.config.role == "agent":
            from hypercorn.trio import serve as hypercorn_serve

            from gpuplaned.uplink import agent_app

            agent, request_stats = agent_app.create_agent_app(ctx.shared, secret=endpoint.secret,
                                                              body_timeout_s=limits.body_timeout_s)
            await nursery.start(functools.partial(hypercorn_serve, agent, cfg,
                                                  shutdown_trigger=ctx.stop_requested.wait))
        else:
            from gpuplaned.http.app import create_app
            from gpuplaned.mcp import asgi as mcp_asgi

            app, request_stats = create_app(ctx.shared, secret=endpoint.secret, body_timeout_s=limits.body_timeout_s)
            await nursery.start(functools.partial(mcp_asgi.serve, ctx.shared, app, cfg, secret=endpoint.secret,
                                                  shutdown_trigger=ctx.stop_requested.wait))
        where = endpoint.portfile().endpoint
        log.info("control API listening on %s", where)
        task_status.started(ControlHandle(where, request_stats))
