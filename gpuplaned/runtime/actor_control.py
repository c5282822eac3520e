"""What every daemon's control API says of the daemon and does to its actors.

The server's app (through ``gpuplaned.service.api.control``) and a remote agent's
(``gpuplaned.uplink.agent_app``, which must not import the service layer) answer
``GET /api/v1/daemon``, ``GET /api/v1/actors[/<name>]`` and ``POST /api/v1/actors/<name>/<verb>``
from here, so both say the same thing the same way.
"""

from __future__ import annotations

import os
from typing import Any

import trio

from gpuplaned.protocol.control import ActorInfo, DaemonInfo, Endpoints
from gpuplaned.protocol.converter import unstructure
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.version import API_VERSION
from gpuplaned.protocol.vocabulary import ACTOR_VERBS
from gpuplaned.runtime.supervisor import ActorNotStoppable, ActorSnapshot, Supervisor, UnknownActor


def daemon_info(shared: Any, version: str, http_url: str | None = None) -> DaemonInfo:
    """The daemon as ``GET /api/v1/daemon`` shows it.

    Args:
        shared: the daemon's context (its config, endpoint, lifecycle and start times).
        version: gpuplaned's (``gpuplaned.__version__``, which this layer does not import).
        http_url: the HTTP front's, while it listens (a server's; an agent has none).
    """
    endpoint, cfg = shared.endpoint, shared.config
    return DaemonInfo(
        version=version,
        api_version=API_VERSION,
        pid=os.getpid(),
        role=cfg.role,
        state=shared.lifecycle.state.value,
        uptime_s=round(trio.current_time() - shared.started_at, 3),
        started_at=int(shared.started_wall * 1000),
        endpoints=Endpoints(unix=endpoint.unix_path,
                            tcp=f"127.0.0.1:{endpoint.tcp_port}" if endpoint.tcp_port is not None else None,
                            http=http_url),
        runtime_dir=str(cfg.runtime_dir),
        home=str(cfg.home),
        config_file=str(cfg.config_file) if cfg.config_file else None,
        tasks=count_tasks(),
    )


def count_tasks() -> int:
    """Every task under trio's root task (this request's own included)."""
    count, pending = 0, [trio.lowlevel.current_root_task()]
    while pending:
        task = pending.pop()
        count += 1
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    return count


def actor_info(snapshot: ActorSnapshot) -> ActorInfo:
    return ActorInfo(
        name=snapshot.name,
        state=snapshot.state.value,
        uptime_s=round(snapshot.uptime_s, 3),
        restarts=snapshot.restarts,
        last_error=snapshot.last_error,
        last_error_at=int(snapshot.last_error_at * 1000) if snapshot.last_error_at is not None else None,
        depends_on=list(snapshot.depends_on),
        stats=unstructure(snapshot.stats) if snapshot.stats is not None else None,
    )


def list_actors(supervisor: Supervisor) -> list[ActorInfo]:
    return [actor_info(s) for s in supervisor.snapshots()]


def get_actor(supervisor: Supervisor, name: str) -> ActorInfo:
    """Raises:
        ApiError: ``not_found`` naming the actors there are.
    """
    try:
        return actor_info(supervisor.snapshot(name))
    except UnknownActor:
        raise _unknown_actor(supervisor, name) from None


async def command_actor(supervisor: Supervisor, name: str, verb: str, *, running: bool) -> ActorInfo:
    """Start, stop or restart an actor; ``running``: the daemon is READY (not starting or stopping).

    Raises:
        ApiError: ``not_found`` for an unknown verb or actor; ``stopping`` when the daemon
            is not running; ``conflict`` for stopping an actor that may not stop.
    """
    if verb not in ACTOR_VERBS:
        raise ApiError(ErrorCode.NOT_FOUND, f"unknown actor command {verb!r}", {"verbs": list(ACTOR_VERBS)})
    if not running:
        raise ApiError(ErrorCode.STOPPING, "the daemon is not running its actors now")
    try:
        snapshot = await getattr(supervisor, verb)(name)
    except UnknownActor:
        raise _unknown_actor(supervisor, name) from None
    except ActorNotStoppable as exc:
        raise ApiError(ErrorCode.CONFLICT, str(exc), {"actor": name}) from None
    return actor_info(snapshot)


def _unknown_actor(supervisor: Supervisor, name: str) -> ApiError:
    return ApiError(ErrorCode.NOT_FOUND, f"no actor named {name!r}", {"actor": name, "actors": supervisor.names})
