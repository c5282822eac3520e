"""Live log feeds, the server's: a job attempt's new output, fanned out to its followers.

Owns: one ``Broadcast`` per followed job attempt, keyed by ``(job_id, attempt)``, created
when the first follower subscribes and dropped when the last one leaves; ``on_change``
tells the node link of both, which tells the node (``LogFollow``). The node's logs actor
already reads every new line of every running job; while an attempt has followers it
sends everything it reads there through the node link (``LogLines``), and the link's
server half publishes it here (``batches_of``) as ``LogBatch`` items, one per stream per
pass, with each line's SSE frame encoded once for all single-stream followers. A remote
agent's records are published the same way, after their commit, whether they come live or
replayed after a link outage; a pass that held only its last lines (the agent was not told
of the followers) is published as a batch of just those lines, so it starts where they do.

The feed is an accelerator, not a source of truth: the files are. A batch says which byte
range of the file it covers (``start`` to ``end``), so a follower that sees a batch start
past where it has read (a pass that published nothing, a logs actor that was restarted)
knows it missed something and reads the files instead; so does one that lagged. A
follower that receives nothing (the logs actor is stopped, or the job runs elsewhere)
keeps reading the files at its own pace (see ``gpuplaned.service.api.logs``); a remote job's
follower reads through its agent instead (``gpuplaned.service.link.remote_logs``).
"""
from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import attrs
import trio

from gpuplaned.protocol.agent import LogChunk
from gpuplaned.protocol.sse_frames import format_event
from gpuplaned.runtime.broadcast import Broadcast, Subscription

__all__ = ["FEED_MAXLEN", "LogBatch", "LogFeeds", "batches_of"]

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
    lines: Sequence[tuple[int, str]]
    frames: list[bytes]


@attrs.define
class _Feed:
    broadcast: Broadcast[LogBatch] = attrs.field(factory=Broadcast)
    served_at: float | None = None  # trio clock of the logs actor's last pass over this attempt


class LogFeeds:
    """The registry of live feeds. Followers ``subscribe``; the logs actor ``publish``es."""

    def __init__(self) -> None:
        self._feeds: dict[Key, _Feed] = {}
        # Called with (key, True) when an attempt gets its first follower (the logs actor
        # then passes over it at once, and at its faster pace) and with (key, False) once
        # its last one has left: the node link tells the node.
        self.on_change: Callable[[Key, bool], None] | None = None

    @property
    def active(self) -> bool:
        """Whether any attempt has a follower (the logs actor then polls faster)."""
        return bool(self._feeds)

    def wanted(self, key: Key) -> bool:
        return key in self._feeds

    def keys(self) -> list[Key]:
        """The attempts followed now."""
        return list(self._feeds)

    def publish(self, key: Key, batches: list[LogBatch], *, served: bool = True) -> None:
        """One logs-actor pass over ``key``: its batches (maybe none). Never blocks.

        ``served``: the pass was one for followers (``LogLines.served``), which they may wait for."""
        feed = self._feeds.get(key)
        if feed is None:
            return
        if served:
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
            if self.on_change is not None:
                self.on_change(key, True)
        try:
            async with feed.broadcast.subscribe(FEED_MAXLEN if maxlen is None else maxlen) as sub:
                yield sub
        finally:
            if feed.broadcast.statistics().subscribers == 0 and self._feeds.get(key) is feed:
                del self._feeds[key]
                if self.on_change is not None:
                    self.on_change(key, False)


def batches_of(chunks: Sequence[LogChunk]) -> dict[Key, list[LogBatch]]:
    """The feed batches of the chunks, with their SSE frames; per attempt. A chunk that holds only
    the last lines of what was read (not ``complete``) covers only those: its batch starts at its
    first line. Pure (runs on a worker thread for a large pass)."""
    out: dict[Key, list[LogBatch]] = {}
    for chunk in chunks:
        if not chunk.lines:
            continue
        start = chunk.start if chunk.complete else chunk.lines[0][0]
        frames = [format_event(text, id=str(offset), event=chunk.stream) for offset, text in chunk.lines]
        out.setdefault((chunk.job_id, chunk.attempt), []).append(
            LogBatch(chunk.stream, start, chunk.end, chunk.lines, frames))
    return out
