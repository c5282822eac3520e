"""``/api/v1/agent/ws``: the WebSocket remote agents dial (seed 000 section 5; issue 18).

The handshake is authenticated before it completes (an ``agent`` token in the header:
``gpuplaned.http.app``'s websocket gate answers 401/403 otherwise). The connection is then one
``gpuplaned.service.link.agent_link.AgentSession``: this module only adapts Quart's websocket to
its ``Transport``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from quart import g, websocket
from quart_trio import QuartTrio

from gpuplaned.service.link.agent_link import AgentSession

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.agent_ws")


class _QuartTransport:
    """``agent_link.Transport`` over the request's websocket (accepted already)."""

    async def receive(self) -> str | bytes:
        return await websocket.receive()

    async def send(self, text: str) -> None:
        await websocket.send(text)

    async def close(self, code: int, reason: str) -> None:
        await websocket.close(code, reason)


def register(app: QuartTrio, shared: ServerContext) -> None:
    @app.websocket("/api/v1/agent/ws")
    async def agent_ws() -> None:
        await websocket.accept()
        caller = getattr(g, "caller", None)  # the front's gate authenticated the agent token
        try:
            await AgentSession(shared, _QuartTransport(), caller.token_id if caller else None).run()
        except Exception as exc:  # the peer went away mid-send, mostly: the session has cleaned up
            log.info("agent connection ended: %s: %s", type(exc).__name__, exc)
