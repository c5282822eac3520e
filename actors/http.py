"""The http actor: the daemon's app on TCP, for browsers, remote CLIs, agents and MCP.

Owns: one hypercorn server on ``--http HOST:PORT`` (default 127.0.0.1:8765), on a socket
this actor binds itself so that port 0 (a free port) can be reported; at most ``[http]
max_connections`` connections, the excess answered 503 and closed, but a connection not yet
authenticated gives way to a newcomer, and one token or address holds only its share
(``gpuplaned.http.connections``); a request without credentials is refused at its headers
(``gpuplaned.http.front_guard``).
Inputs: HTTP and WebSocket requests; every one needs ``Authorization: Bearer <token>`` with
the scope its route needs (``gpuplaned.http.scopes``), and a Host this front answers to
(``gpuplaned.http.front_guard``: loopback names on a loopback front, plus ``[http]
allowed_hosts``); the Unix socket stays the trusted local way in.
Outputs: calls into the service layer; ``/mcp`` is the MCP server (``gpuplaned.mcp.asgi``).
Restart: permanent. A front that cannot be bound when the daemon starts (the port in use, no
permission) fails the start (``FrontUnavailable``: gpuplaned exits 1 before READY), so a
daemon never reports READY without the UI and API it was configured to serve; a later restart
of this actor that cannot bind backs off and retries like any crash.
Ready: listening; ``started()`` passes an ``HttpHandle`` whose ``url`` is set while listening.
Stop: graceful; in-flight requests get ``connections.GRACE`` seconds.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import socket

import attrs
import trio

from gpuplaned.config import HttpFront
from gpuplaned.http import front_guard
from gpuplaned.http.app import RequestStats, create_app
from gpuplaned.http.connections import ConnectionCap, cap_for, hypercorn_config, limit_connections
from gpuplaned.mcp import asgi as mcp_asgi
from gpuplaned.runtime.context import ActorContext
from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.http")


@attrs.frozen
class HttpStats:
    url: str | None
    requests: int
    errors: int
    connections: int  # open now
    refused_connections: int  # over [http] max_connections, since this actor started
    evicted_connections: int  # closed, not yet authenticated, to let a newcomer in, since this actor started


@attrs.define
class HttpHandle:
    request_stats: RequestStats
    cap: ConnectionCap
    url: str | None = None  # "http://HOST:PORT" while listening

    def statistics(self) -> HttpStats:
        return HttpStats(self.url, self.request_stats.requests, self.request_stats.errors, self.cap.open,
                         self.cap.refused, self.cap.evicted)


# What to do about the usual reasons a front cannot be had, said to the person starting it.
_WAY_OUT = "set another address with --http HOST:PORT (or [http] listen in the config), or --no-http"
_HINTS = {
    errno.EADDRINUSE: "another program holds it",
    errno.EACCES: "ports below 1024 need privileges",
    errno.EADDRNOTAVAIL: "no interface of this machine has that address",
}


class FrontUnavailable(OSError):
    """The HTTP front's address cannot be had; ``str()`` is the whole sentence for the user."""

    def __str__(self) -> str:
        return str(self.strerror)


def bind(front: HttpFront) -> socket.socket:
    """A listening TCP socket for ``front``.

    Raises:
        FrontUnavailable: the address cannot be had; the message names it, the reason and the
            flags that choose another.
    """
    family = socket.AF_INET6 if ":" in front.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((front.host, front.port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        reason = (exc.strerror or str(exc)).lower()
        hint = "; ".join(part for part in (_HINTS.get(exc.errno or 0), _WAY_OUT) if part)
        raise FrontUnavailable(exc.errno, f"cannot listen on {front}: {reason} ({hint})") from None
    return sock


async def run(ctx: ActorContext[ServerContext], *, task_status: trio.TaskStatus[HttpHandle] = trio.TASK_STATUS_IGNORED) -> None:
    front = ctx.shared.config.http
    limits = ctx.shared.config.http_limits
    app, request_stats = create_app(ctx.shared, tokens=True, body_timeout_s=limits.body_timeout_s)
    handle = HttpHandle(request_stats, cap_for(limits))
    sock = bind(front)  # before started(): at the daemon's start, a front it cannot have fails the start
    try:
        host, port = sock.getsockname()[:2]
        where = f"{'[' + host + ']' if ':' in host else host}:{port}"
        cfg = hypercorn_config(f"fd://{os.dup(sock.fileno())}", limits)  # hypercorn closes what it is given
        limit_connections(cfg, handle.cap)  # the TCP front only, never the control socket
        async with trio.open_nursery() as nursery:
            hosts = front_guard.allowed_hosts(front, limits.allowed_hosts)
            await nursery.start(functools.partial(mcp_asgi.serve, ctx.shared, app, cfg, tokens=True,
                                                  guard=lambda mount: front_guard.FrontGuard(mount, hosts, handle.cap),
                                                  shutdown_trigger=ctx.stop_requested.wait))
            handle.url = f"http://{where}"
            log.info("HTTP front listening on %s (bearer tokens required)", handle.url)
            if not front.loopback:
                log.warning("the HTTP front listens on %s, beyond this machine, without TLS: put TLS in front "
                            "(a reverse proxy) or keep it on a private network", where)
            task_status.started(handle)
    finally:
        handle.url = None
        sock.close()
