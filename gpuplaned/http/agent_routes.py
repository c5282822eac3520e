"""``/api/v1/agent/ws``: the WebSocket remote agents dial (seed 000 section 5).

Reserved ahead of the uplink protocol: it authenticates (an ``agent`` token, in the
header, checked before the handshake completes), answers a ``hello`` with ``hello_ok`` and
the node's id (the node is recorded, OFFLINE until agents can take work) or ``hello_err``,
answers ``ping`` with ``pong``, and says plainly that anything else is not supported yet.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import cattrs
from quart import websocket
from quart_trio import QuartTrio

import gpuplaned
from gpuplaned.protocol import bounded_json
from gpuplaned.protocol.agent import Hello
from gpuplaned.protocol.converter import converter
from gpuplaned.service.registry import now_ms
from gpuplaned.store import job_rows
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext

log = logging.getLogger("gpuplaned.agent_ws")

MAX_FRAME = 1 << 20


def register(app: QuartTrio, shared: DaemonContext) -> None:
    @app.websocket("/api/v1/agent/ws")
    async def agent_ws() -> None:
        await websocket.accept()
        while True:
            raw = await websocket.receive()
            reply = await _answer(shared, raw)
            await websocket.send(json.dumps(reply))


async def _answer(shared: DaemonContext, raw: str | bytes) -> dict[str, Any]:
    if len(raw) > MAX_FRAME:
        return {"type": "error", "message": f"frame over {MAX_FRAME} bytes"}
    try:
        frame = bounded_json.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError and bounded_json.TooDeep too
        return {"type": "error", "message": f"not a JSON frame: {exc}"}
    kind = frame.get("type") if isinstance(frame, dict) else None
    if kind == "ping":
        return {"type": "pong", "server_version": gpuplaned.__version__}
    if kind != "hello":
        return {"type": "error", "message": f"frame type {kind!r} is not supported by this server yet"}
    fields = {k: v for k, v in frame.items() if k != "type"}
    try:
        hello = converter.structure(fields, Hello)
    except (cattrs.BaseValidationError, TypeError, ValueError, KeyError) as exc:
        return {"type": "hello_err", "message": f"bad hello: {_reason(exc)}"}
    connected = tuple(shared.nodes.connected())
    names = await shared.readers.run(lambda conn: _names_of(conn, connected))
    if hello.node_name in names:  # e.g. this machine's own node: never overwrite a live one
        return {"type": "hello_err", "message": f"node name {hello.node_name!r} belongs to a connected node"}
    node_id, _active = await write(shared.supervisor.ports["store"],
                                   lambda conn: job_rows.register_node(conn, hello, now_ms()))
    log.info("agent hello from %s (%s): node %s recorded; agents cannot take work yet",
             hello.node_name, hello.agent_version, node_id)
    return {"type": "hello_ok", "node_id": node_id}


def _names_of(conn: Any, node_ids: tuple[str, ...]) -> set[str]:
    rows = conn.execute(f"SELECT name FROM nodes WHERE id IN ({','.join('?' * len(node_ids))})", node_ids)
    return {row[0] for row in rows}


def _reason(exc: BaseException) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(str(e) for e in cattrs.transform_error(exc)) or str(exc)
    return str(exc)
