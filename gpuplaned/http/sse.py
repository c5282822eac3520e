"""Server-Sent Events for Quart-Trio: framing, heartbeats, resume ids. No business logic.

Owns: the ``text/event-stream`` wire format (WHATWG HTML "Server-sent events") and the
keep-alive comment that stops proxies and load balancers from closing an idle stream. What
the events mean (log lines, live metrics) and where they come from belong to the routes
and the actors behind them.

A route streams like this::

    @app.get("/api/v1/jobs/<job_id>/logs/stream")
    async def stream_logs(job_id: str):
        last_id = parse_last_event_id(request.headers)

        async def body():
            async with logs_broadcast.subscribe() as sub:   # cancel-safe source
                async for chunk in sse_stream(sub, encode=to_event):
                    yield chunk

        response = await make_response(body(), 200, dict(SSE_HEADERS))
        response.timeout = None  # a stream has no response deadline
        return response

When the client disconnects, Quart-Trio cancels the task that iterates ``body()``; the
``subscribe()`` block exits and nothing is left behind (no task per stream).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from types import MappingProxyType
from typing import Any

import trio
from quart import make_response

from gpuplaned.protocol.sse_frames import LINE_BREAK, format_event

__all__ = ["HEARTBEAT", "SSE_HEADERS", "format_event", "parse_last_event_id", "sse_stream"]

HEARTBEAT = b": keep-alive\n\n"
"""A comment line: clients ignore it, proxies see traffic."""

SSE_HEADERS: Mapping[str, str] = MappingProxyType(
    {
        "Content-Type": "text/event-stream",
        "Cache-Control": "no-cache",
        # nginx buffers proxied responses by default, which would hold events back.
        "X-Accel-Buffering": "no",
    }
)

_MAX_EVENT_ID = 256


def parse_last_event_id(headers: Mapping[str, str] | Any) -> str | None:
    """The ``Last-Event-ID`` a reconnecting ``EventSource`` sends, or None.

    Accepts werkzeug/Quart ``Headers`` or any mapping (looked up case-insensitively).
    Empty, oversized or malformed values count as absent: resuming from the start is
    always safe, trusting a malformed id is not.
    """
    value = headers.get("Last-Event-ID")
    if value is None:
        for key, item in headers.items():
            if key.lower() == "last-event-id":
                value = item
                break
    if value is None:
        return None
    value = value.strip()
    if not value or len(value) > _MAX_EVENT_ID or LINE_BREAK.search(value) or "\0" in value:
        return None
    return value


async def sse_stream(
    source: AsyncIterator[Any],
    heartbeat_s: float = 15.0,
    *,
    encode: Callable[[Any], bytes] | None = None,
) -> AsyncGenerator[bytes, None]:
    """Pass ``source``'s chunks through, adding ``HEARTBEAT`` after ``heartbeat_s`` of silence.

    Args:
        source: the framed chunks (``bytes``), or items for ``encode``. Its ``__anext__``
            must be *cancel-safe*, because waiting for it is cancelled at each heartbeat:
            a ``Broadcast`` ``Subscription``, a ``trio.MemoryReceiveChannel`` or a
            ``trio.as_safe_channel`` channel. An async generator is not (a cancelled
            generator is finished), so it is refused with ``TypeError``.
        heartbeat_s: the longest silence, timed with trio's clock.
        encode: turns each item into framed bytes, e.g. a ``Lagged`` marker into an
            ``event: lagged`` event; synchronous, so the pair stays cancel-safe.

    The stream ends when ``source`` ends. It holds no task: cancelling the consumer
    (the client went away) cancels the wait and ends the stream.
    """
    if inspect.isasyncgen(source):
        raise TypeError(
            "sse_stream needs a cancel-safe source (a Subscription or a memory channel); "
            "wrap an async generator with trio.as_safe_channel"
        )
    receive = source.__anext__
    while True:
        received = False
        # The silence is timed from when the consumer asks for the next chunk, i.e. once
        # it has sent the last one. Only the wait is inside the cancel scope: yielding
        # there would run the consumer's code under our deadline (PEP 789).
        with trio.move_on_after(heartbeat_s):
            try:
                item = await receive()
            except StopAsyncIteration:
                return
            received = True
        if received:
            yield encode(item) if encode is not None else item
        else:
            yield HEARTBEAT


async def sse_response(frames: AsyncGenerator[bytes, None], heartbeat_s: float = 15.0) -> Any:
    """A streaming Quart response of SSE ``frames`` (an async generator), with heartbeats."""

    @trio.as_safe_channel
    async def produce() -> AsyncGenerator[bytes, None]:
        async for frame in frames:
            yield frame

    async def body() -> AsyncGenerator[bytes, None]:
        async with produce() as channel:
            async for chunk in sse_stream(channel, heartbeat_s):
                yield chunk

    response = await make_response(body(), 200, dict(SSE_HEADERS))
    response.timeout = None  # a stream has no response deadline
    return response
