"""The changes stream (``GET /api/v1/changes/stream``): which lists changed, for pages that
refetch on it instead of polling.

Each follower subscribes to ``shared.changes`` (the store actor's committed topics, the node
registry's ``nodes`` per live snapshot), keeps the topics its caller may hear, and paces them
with ``domain.change_pacing`` (500 ms, leading and trailing edge). A follower so far behind that
its queue overflowed cannot know what it missed: it is told every topic it may hear, which
costs a refetch and loses nothing. The first event, ``ready``, lists those topics: the client
refetches what it shows then (a change between its first fetch and the stream, a reconnect).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator

import trio

from gpuplaned.domain.change_pacing import WINDOW_S, ChangePacing
from gpuplaned.protocol.sse_frames import format_event
from gpuplaned.runtime.broadcast import Broadcast, Lagged

# Enough for a burst of commits (each one item) while the follower waits out its window.
QUEUE = 256


def topics_frame(event: str, topics: list[str]) -> bytes:
    return format_event(json.dumps({"topics": topics}, separators=(",", ":")), event=event)


async def follow(changes: Broadcast[frozenset[str]], allowed: frozenset[str], *,
                 window_s: float = WINDOW_S) -> AsyncGenerator[bytes, None]:
    """SSE frames: ``ready`` with ``allowed``, then ``changes`` events of the topics in ``allowed``
    that committed writes changed, paced per ``ChangePacing``. Ends only once ``changes`` is closed."""
    async with changes.subscribe(maxlen=QUEUE) as committed:  # before ready: nothing after it is missed
        yield topics_frame("ready", sorted(allowed))
        pacing = ChangePacing(window_s)
        while True:
            due = pacing.due()
            if due is not None and due <= trio.current_time():
                yield topics_frame("changes", pacing.take(trio.current_time()))
                continue
            # Only the wait is in the cancel scope: never yield inside one (PEP 789).
            with trio.move_on_at(due if due is not None else float("inf")):
                try:
                    item = await committed.__anext__()
                    pacing.add(allowed if isinstance(item, Lagged) else item & allowed)
                    while committed.pending:  # all that is queued goes into the next event
                        item = await committed.__anext__()
                        pacing.add(allowed if isinstance(item, Lagged) else item & allowed)
                except StopAsyncIteration:  # the daemon is going: so is the stream
                    return
