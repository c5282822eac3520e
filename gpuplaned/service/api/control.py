"""Daemon and actor control: one function per verb of the control API.

What they say and do is ``gpuplaned.runtime.actor_control``'s, which a remote agent's app
(``gpuplaned.uplink.agent_app``) answers from too; here is what only the server adds: its HTTP
front's URL, and its context's lifecycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gpuplaned
from gpuplaned.lifecycle import DaemonState
from gpuplaned.protocol.control import ActorInfo, DaemonInfo
from gpuplaned.runtime import actor_control

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


def _http_url(shared: ServerContext) -> str | None:
    try:
        handle = shared.supervisor.handle("http")
    except KeyError:
        return None
    return handle.url if handle is not None else None


def daemon_info(shared: ServerContext) -> DaemonInfo:
    return actor_control.daemon_info(shared, gpuplaned.__version__, _http_url(shared))


def list_actors(shared: ServerContext) -> list[ActorInfo]:
    return actor_control.list_actors(shared.supervisor)


def get_actor(shared: ServerContext, name: str) -> ActorInfo:
    return actor_control.get_actor(shared.supervisor, name)


async def command_actor(shared: ServerContext, name: str, verb: str) -> ActorInfo:
    return await actor_control.command_actor(shared.supervisor, name, verb,
                                             running=shared.lifecycle.state is DaemonState.READY)


def request_shutdown(shared: ServerContext, reason: str) -> str:
    shared.request_shutdown(reason)
    return DaemonState.STOPPING.value
