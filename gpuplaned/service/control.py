"""Daemon and actor control: one function per verb of the control API."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import trio

import gpuplaned
from gpuplaned.lifecycle import DaemonState
from gpuplaned.protocol.control import ActorInfo, DaemonInfo, Endpoints
from gpuplaned.protocol.converter import unstructure
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.version import API_VERSION
from gpuplaned.runtime.supervisor import ActorNotStoppable, ActorSnapshot, UnknownActor

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

ACTOR_VERBS = ("start", "stop", "restart")


def _http_url(shared: ServerContext) -> str | None:
    try:
        handle = shared.supervisor.handle("http")
    except KeyError:
        return None
    return handle.url if handle is not None else None


def daemon_info(shared: ServerContext) -> DaemonInfo:
    endpoint = shared.endpoint
    endpoints = Endpoints(
        unix=endpoint.unix_path,
        tcp=f"127.0.0.1:{endpoint.tcp_port}" if endpoint.tcp_port is not None else None,
        http=_http_url(shared),
    )
    cfg = shared.config
    return DaemonInfo(
        version=gpuplaned.__version__,
        api_version=API_VERSION,
        pid=os.getpid(),
        role=cfg.role,
        state=shared.lifecycle.state.value,
        uptime_s=round(trio.current_time() - shared.started_at, 3),
        started_at=int(shared.started_wall * 1000),
        endpoints=endpoints,
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


def list_actors(shared: ServerContext) -> list[ActorInfo]:
    return [actor_info(s) for s in shared.supervisor.snapshots()]


def get_actor(shared: ServerContext, name: str) -> ActorInfo:
    try:
        return actor_info(shared.supervisor.snapshot(name))
    except UnknownActor:
        raise _unknown_actor(shared, name) from None


async def command_actor(shared: ServerContext, name: str, verb: str) -> ActorInfo:
    if verb not in ACTOR_VERBS:
        raise ApiError(ErrorCode.NOT_FOUND, f"unknown actor command {verb!r}",
                       {"verbs": list(ACTOR_VERBS)})
    if shared.lifecycle.state is not DaemonState.READY:
        raise ApiError(ErrorCode.STOPPING, "the daemon is shutting down")
    supervisor = shared.supervisor
    try:
        snapshot = await getattr(supervisor, verb)(name)
    except UnknownActor:
        raise _unknown_actor(shared, name) from None
    except ActorNotStoppable as exc:
        raise ApiError(ErrorCode.CONFLICT, str(exc), {"actor": name}) from None
    return actor_info(snapshot)


def request_shutdown(shared: ServerContext, reason: str) -> str:
    shared.request_shutdown(reason)
    return DaemonState.STOPPING.value


def _unknown_actor(shared: ServerContext, name: str) -> ApiError:
    return ApiError(ErrorCode.NOT_FOUND, f"no actor named {name!r}",
                    {"actor": name, "actors": shared.supervisor.names})
