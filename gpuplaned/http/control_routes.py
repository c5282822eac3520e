"""Routes for the daemon itself and its supervised actors."""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response
from quart_trio import QuartTrio

from gpuplaned.http.responses import ok
from gpuplaned.http.routes import Param, Reply, Routes
from gpuplaned.protocol.control import ActorList, ActorReply, DaemonInfo, ShutdownReply
from gpuplaned.protocol.vocabulary import ACTOR_VERBS
from gpuplaned.service.api import control

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

api = Routes("daemon")
_ACTOR = Param("name", "the actor's name (see GET /api/v1/actors)")

DAEMON = api.get("/api/v1/daemon", "getDaemon", "The daemon: version, state, endpoints, directories",
                 Reply(200, DaemonInfo, "The daemon."),
                 description="The one route that still answers (with state STOPPING) while the daemon shuts down.")
SHUTDOWN = api.post("/api/v1/daemon/shutdown", "shutdownDaemon", "Stop the daemon (the reply leaves first)",
                    Reply(202, ShutdownReply, "Shutdown has begun."))
ACTORS = api.get("/api/v1/actors", "listActors", "Every supervised actor and its state",
                 Reply(200, ActorList, "The actors, in start order."))
ACTOR = api.get("/api/v1/actors/<name>", "getActor", "One actor", Reply(200, ActorReply, "The actor."), errors=(404,),
                params=(_ACTOR,))
COMMAND = api.post("/api/v1/actors/<name>/<verb>", "commandActor", "Start, stop or restart one actor",
                   Reply(200, ActorReply, "The actor after the command."), errors=(404, 409),
                   params=(_ACTOR, Param("verb", "the command; any other is 404",
                                         {"type": "string", "enum": list(ACTOR_VERBS)})))


def register(app: QuartTrio, shared: ServerContext) -> None:
    @DAEMON.on(app)
    async def get_daemon() -> Response:
        return ok(control.daemon_info(shared))

    @SHUTDOWN.on(app)
    async def shutdown() -> Response:
        # The reply leaves before shutdown begins: the trigger only wakes the daemon's main
        # task, and the control actor stops last, finishing in-flight requests first.
        return ok(ShutdownReply(control.request_shutdown(shared, "shutdown requested over the control API")), 202)

    @ACTORS.on(app)
    async def get_actors() -> Response:
        return ok(ActorList(control.list_actors(shared)))

    @ACTOR.on(app)
    async def get_actor(name: str) -> Response:
        return ok(ActorReply(control.get_actor(shared, name)))

    @COMMAND.on(app)
    async def actor_command(name: str, verb: str) -> Response:
        return ok(ActorReply(await control.command_actor(shared, name, verb)))
