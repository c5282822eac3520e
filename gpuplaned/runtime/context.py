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


class StopSignal:
    """An actor's stop request: a ``trio.Event`` (``set``, ``is_set``, ``wait``) that also ends
    the ``receive_or_stop`` waiting on it, so that waiting for a message costs no task to
    watch it (a nursery and two tasks each time the inbox was empty: the store waits so twice
    for each job a drain runs)."""

    def __init__(self) -> None:
        self._event = trio.Event()
        self._waiting: set[trio.CancelScope] = set()

    def set(self) -> None:
        self._event.set()
        for scope in self._waiting:
            scope.cancel()

    def cancels(self, scope: trio.CancelScope) -> None:
        """Cancel ``scope`` when a stop is requested, until ``forget(scope)``."""
        self._waiting.add(scope)

    def forget(self, scope: trio.CancelScope) -> None:
        self._waiting.discard(scope)

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()


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
    stop_requested: StopSignal = attrs.field(factory=StopSignal)

    async def receive_or_stop(self, deadline: float = math.inf) -> Any | None:
        """The next inbox message, or None once a stop is requested (or the inbox closed);
        ``IDLE`` when nothing came by ``deadline`` (trio time).

        Never cancel a call of this from outside to time it out: a message received just
        as the cancel arrives would be lost. That is what ``deadline`` is for.
        """
        try:
            return self.inbox.receive_nowait()  # one already there: no waiting
        except trio.EndOfChannel:
            return None
        except trio.WouldBlock:
            if self.stop_requested.is_set():
                return None
        # Only the receive itself is cancelled, by the deadline or a stop request: a message
        # is either not taken from the channel, or taken and returned.
        stop = self.stop_requested
        with trio.move_on_at(deadline) as scope:
            stop.cancels(scope)
            try:
                return await self.inbox.receive()
            except trio.EndOfChannel:
                return None
            finally:
                stop.forget(scope)
        return None if self.stop_requested.is_set() else IDLE


IDLE = object()  # what ``receive_or_stop`` returns when its deadline passed first
