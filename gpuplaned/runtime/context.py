"""What an actor receives when it starts: its inbox, the other actors' inboxes, its stop signal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import trio


@attrs.define
class ActorContext:
    """One incarnation's view of the world.

    ``inbox`` outlives incarnations: messages sent while the actor is in BACKOFF wait for
    the next one. ``stop_requested`` is new for each incarnation; an actor whose spec says
    ``graceful_stop`` returns on its own once it is set.
    """

    name: str
    inbox: trio.MemoryReceiveChannel[Any]
    ports: Mapping[str, trio.MemorySendChannel[Any]]
    shared: Any  # the daemon's DaemonContext: config, paths, lifecycle, supervisor
    stop_requested: trio.Event = attrs.field(factory=trio.Event)

    async def receive_or_stop(self) -> Any | None:
        """The next inbox message, or None once a stop is requested (or the inbox closed)."""
        if self.stop_requested.is_set():
            try:
                return self.inbox.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                return None
        result: list[Any] = []
        async with trio.open_nursery() as nursery:

            async def receive() -> None:
                try:
                    result.append(await self.inbox.receive())
                except trio.EndOfChannel:
                    pass
                nursery.cancel_scope.cancel()

            async def watch_stop() -> None:
                await self.stop_requested.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(receive)
            nursery.start_soon(watch_stop)
        return result[0] if result else None
