"""Control API bodies: what ``GET /api/v1/daemon`` and ``/api/v1/actors`` return."""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.protocol.fields import doc


@attrs.frozen
class Endpoints:
    unix: str | None = doc("the control socket's path", default=None)
    tcp: str | None = doc("127.0.0.1:PORT when the control endpoint fell back to loopback TCP", default=None)
    http: str | None = None  # "http://HOST:PORT": the token-authenticated HTTP front, while it listens


@attrs.frozen
class DaemonInfo:
    version: str
    api_version: int
    pid: int
    role: str
    state: str  # NOT_READY / READY / STOPPING / CLOSED
    uptime_s: float
    started_at: int = doc("ms since the epoch")  # like every timestamp of the API
    endpoints: Endpoints
    runtime_dir: str
    home: str
    config_file: str | None
    tasks: int = 0  # trio tasks alive in the daemon: a leak shows as a count that only grows


@attrs.frozen
class ActorInfo:
    """One supervised actor (store, scheduler, runner, logs, monitor, ...)."""

    name: str
    state: str
    uptime_s: float
    restarts: int
    last_error: str | None
    last_error_at: int | None = doc("ms since the epoch")
    depends_on: list[str]
    stats: dict[str, Any] | None = doc("the actor's own counters")


@attrs.frozen
class ActorList:
    actors: list[ActorInfo]


@attrs.frozen
class ActorReply:
    actor: ActorInfo


@attrs.frozen
class ShutdownReply:
    state: str
