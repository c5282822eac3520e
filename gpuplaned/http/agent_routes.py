"""``/api/v1/agent/ws``: the WebSocket remote agents dial (seed 000 section 5).

Reserved ahead of the uplink protocol: it authenticates (an ``agent`` token, in the
header, checked before the handshake completes), answers a ``hello`` with ``hello_ok`` and
the node's id (the node is recorded, OFFLINE until agents can take work) or ``hello_err``,
answers ``ping`` with ``pong``, and says plainly that anything else is not supported yet.
Frames in and out are ``gpuplaned.protocol.agent.FRAMES``, through the one converter.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from quart import websocket
from quart_trio import QuartTrio

import gpuplaned
from gpuplaned.protocol import bounded_json
from gpuplaned.protocol.agent import FRAMES, FrameError, Hello, HelloErr, HelloOk, Pong
from gpuplaned.protocol.converter import FieldInvalid
from gpuplaned.service.registry import now_ms
from gpuplaned.store import job_rows
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.agent_ws")

MAX_FRAME = 1 << 20


def register(app: QuartTrio, shared: ServerContext) -> None:
    @app.websocket("/api/v1/agent/ws")
    async def agent_ws() -> None:
        await websocket.accept()
        while True:
            raw = await websocket.receive()
            reply = await _answer(shared, raw)
            await websocket.send(json.dumps(FRAMES.unstructure(reply)))


async def _answer(shared: ServerContext, raw: str | bytes) -> HelloOk | HelloErr | Pong | FrameError:
    if len(raw) > MAX_FRAME:
        return FrameError(f"frame over {MAX_FRAME} bytes")
    try:
        data = bounded_json.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError and bounded_json.TooDeep too
        return FrameError(f"not a JSON frame: {exc}")
    kind = data.get("type") if isinstance(data, dict) else None
    if kind not in ("hello", "ping"):
        return FrameError(f"frame type {kind!r} is not supported by this server yet")
    try:
        frame = FRAMES.structure(data)
    except FieldInvalid as fault:
        where = f"{fault.field}: " if fault.field else ""
        return (HelloErr if kind == "hello" else FrameError)(f"bad {kind}: {where}{fault.message}")
    if not isinstance(frame, Hello):
        return Pong(gpuplaned.__version__)
    hello = frame
    connected = tuple(shared.nodes.connected())
    names = await shared.readers.run(lambda conn: _names_of(conn, connected))
    if hello.node_name in names:  # e.g. this machine's own node: never overwrite a live one
        return HelloErr(f"node name {hello.node_name!r} belongs to a connected node")
    node_id, _active = await write(shared.supervisor.ports["store"],
                                   lambda conn: job_rows.register_node(conn, hello, now_ms()))
    log.info("agent hello from %s (%s): node %s recorded; agents cannot take work yet",
             hello.node_name, hello.agent_version, node_id)
    return HelloOk(node_id)


def _names_of(conn: Any, node_ids: tuple[str, ...]) -> set[str]:
    rows = conn.execute(f"SELECT name FROM nodes WHERE id IN ({','.join('?' * len(node_ids))})", node_ids)
    return {row[0] for row in rows}
