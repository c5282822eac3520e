"""What an actor receives when it starts: its inbox, the other actors' inboxes, its share of
the daemon (``shared``), its stop signal.

``shared`` is typed by the actor: a node-side actor takes ``ActorContext[NodeContext]``
(``gpuplaned.node_context``), a server-side one ``ActorContext[ServerContext]``
(``gpuplaned.service.context``); the daemon builds both and the supervisor hands each actor its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import attrs
import trio


SharedT = TypeVar("SharedT")


@attrs.define
class ActorContext(Generic[SharedT]):
    """One incarnation's view of the world.

    ``inbox`` outlives incarnations: messages sent while the actor is in BACKOFF wait for
    the next one. ``stop_requested`` is new for each incarnation; an actor whose spec says
    ``graceful_stop`` returns on its own once it is set.
    """

    name: str
    inbox: trio.MemoryReceiveChannel[Any]
    ports: Mapping[str, trio.MemorySendChannel[Any]]
    shared: SharedT  # what of the daemon this actor may use (see the module's docstring)
    stop_requested: trio.Event = attrs.field(factory=trio.Event)

    async def receive_or_stop(self, deadline: float = math.inf) -> Any | None:
        """The next inbox message, or None once a stop is requested (or the inbox closed);
        ``IDLE`` when nothing came by ``deadline`` (trio time).

        Never cancel a call of this from outside to time it out: a message received just
        as the cancel arrives would be lost. That is what ``deadline`` is for.
        """
        try:
            return self.inbox.receive_nowait()  # one already there: no tasks to start
        except trio.EndOfChannel:
            return None
        except trio.WouldBlock:
            if self.stop_requested.is_set():
                return None
        result: list[Any] = []
        async with trio.open_nursery() as nursery:

            async def receive() -> None:
                # Only the receive itself is cancelled by the deadline: a message is either
                # not taken from the channel, or taken and kept.
                with trio.move_on_at(deadline):
                    try:
                        result.append(await self.inbox.receive())
                    except trio.EndOfChannel:
                        result.append(None)
                nursery.cancel_scope.cancel()

            async def watch_stop() -> None:
                await self.stop_requested.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(receive)
            nursery.start_soon(watch_stop)
        if result:
            return result[0]
        return None if self.stop_requested.is_set() else IDLE


IDLE = object()  # what ``receive_or_stop`` returns when its deadline passed first
