"""Live log feeds: the logs actor's reads of a job attempt's output, fanned out to followers.

Owns: one ``Broadcast`` per followed job attempt, keyed by ``(job_id, attempt)``, created
when the first follower subscribes and dropped when the last one leaves. The logs actor
already reads every new line of every running job; while an attempt has subscribers it
publishes everything it reads there as ``LogBatch`` items, one per stream per pass, with
each line's SSE frame encoded once for all single-stream followers.

The feed is an accelerator, not a source of truth: the files are. A batch says which byte
range of the file it covers (``start`` to ``end``), so a follower that sees a batch start
past where it has read (a pass that published nothing, a logs actor that was restarted)
knows it missed something and reads the files instead; so does one that lagged. A
follower that receives nothing (the logs actor is stopped, or the job runs elsewhere)
keeps reading the files at its own pace (see ``gpuplaned.service.logs``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import attrs
import trio

from gpuplaned.runtime.broadcast import Broadcast, Subscription

__all__ = ["FEED_MAXLEN", "LogBatch", "LogFeeds"]

# Batches queued per follower (one per stream per logs-actor pass: 256 is about 6 s of
# output) before it lags and reads the files instead. The variable is for tests, which
# make followers lag with a tiny queue.
FEED_MAXLEN = int(os.environ.get("GPUPLANE_LOG_FEED_MAXLEN", "256"))

Key = tuple[str, int]


@attrs.frozen
class LogBatch:
    """New lines of one stream from one logs-actor pass.

    Attributes:
        stream: ``stdout`` or ``stderr``.
        start: the file offset the read started at (where the first line starts, unless
            the file was truncated): a follower that has read less than this missed lines.
        end: the file offset just after the last line: where the next batch starts.
        lines: ``(offset, text)`` in file order.
        frames: per line, its single-stream SSE event (``id`` = the offset, ``event`` = the stream).
    """

    stream: str
    start: int
    end: int
    lines: list[tuple[int, str]]
    frames: list[bytes]


@attrs.define
class _Feed:
    broadcast: Broadcast[LogBatch] = attrs.field(factory=Broadcast)
    served_at: float | None = None  # trio clock of the logs actor's last pass over this attempt


class LogFeeds:
    """The registry of live feeds. Followers ``subscribe``; the logs actor ``publish``es."""

    def __init__(self) -> None:
        self._feeds: dict[Key, _Feed] = {}
        # Called when an attempt gets its first follower: the logs actor passes over it at
        # once and then at its faster pace, instead of after its idle poll interval.
        self.on_new_feed: Callable[[], None] | None = None

    @property
    def active(self) -> bool:
        """Whether any attempt has a follower (the logs actor then polls faster)."""
        return bool(self._feeds)

    def wanted(self, key: Key) -> bool:
        return key in self._feeds

    def publish(self, key: Key, batches: list[LogBatch]) -> None:
        """One logs-actor pass over ``key``: its batches (maybe none). Never blocks."""
        feed = self._feeds.get(key)
        if feed is None:
            return
        feed.served_at = trio.current_time()
        for batch in batches:
            feed.broadcast.publish(batch)

    def served_within(self, key: Key, seconds: float) -> bool:
        """Whether the logs actor has passed over ``key`` within the last ``seconds``."""
        feed = self._feeds.get(key)
        return feed is not None and feed.served_at is not None and trio.current_time() - feed.served_at <= seconds

    @asynccontextmanager
    async def subscribe(self, job_id: str, attempt: int, maxlen: int | None = None) -> AsyncIterator[Subscription[LogBatch]]:
        key = (job_id, attempt)
        feed = self._feeds.get(key)
        if feed is None:
            feed = self._feeds[key] = _Feed()
            if self.on_new_feed is not None:
                self.on_new_feed()
        try:
            async with feed.broadcast.subscribe(FEED_MAXLEN if maxlen is None else maxlen) as sub:
                yield sub
        finally:
            if feed.broadcast.statistics().subscribers == 0 and self._feeds.get(key) is feed:
                del self._feeds[key]
