"""Live run metrics: each committed batch of a run's points, fanned out to its followers, and
the SSE stream ``GET /api/v1/runs/{id}/metrics/stream`` resumes from.

Owns: one sequence for the daemon (``seq``, bumped per published batch, after its commit) and,
per run, the last ``KEEP_BATCHES`` batches and a ``Broadcast`` of new ones. An event's id is
``<epoch>-<seq>``: ``epoch`` is this daemon process's, so a ``Last-Event-ID`` from before a
restart, or older than what a run keeps, cannot be resumed from without a gap, and the
follower gets a ``reset`` event instead: "read the series again (GET /runs/{id}/metrics),
then follow from this id". Within that, a resume sends every batch after the id once: the
follower subscribes before it reads what it missed, both in memory on the event loop, so
nothing falls between them.

``follow_many`` is the same for several runs on one stream (``GET /api/v1/runs/metrics/stream``:
a browser holds six connections to a host, so a page following eight runs cannot hold a
stream each): every run's batches come through one ``Broadcast`` of them all, filtered by run,
each frame naming its run; the seq is the daemon's, so one ``Last-Event-ID`` resumes them all.
Its live frames leave in one write per ``GATHER_S`` (a lone batch at most that late): a page
following many runs gets a few network reads a second instead of one per batch.

Published after the commit by the SDK's batch route (``gpuplaned.service.api.sessions.add_batch``)
and the TensorBoard tailer's points (``gpuplaned.service.link.nodes`` ``tb_points``).
"""

from __future__ import annotations

import json
import math
import os
from collections import OrderedDict, deque
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

import attrs
import trio

from gpuplaned.protocol.patterns import NameFilter
from gpuplaned.protocol.converter import unstructure
from gpuplaned.protocol.metric_stream_frames import RunStreamedPoints, StreamedPoints, StreamReady, StreamReset
from gpuplaned.protocol.sse_frames import format_event
from gpuplaned.runtime.broadcast import Broadcast, Lagged

# Per run, what a reconnect resumes from: the last batches up to this many points (at
# 100 points a second, over 8 minutes; a few MB), and up to this many batches.
KEEP_POINTS = 50_000
KEEP_BATCHES = 1024
GATHER_S = 0.25  # follow_many: live frames published this close together leave in one write
MAX_RUNS = 64  # runs kept (least recently published first to go, never one with followers)
FEED_MAXLEN = 1024


@attrs.frozen
class MetricBatch:
    seq: int
    series: Mapping[str, Mapping[str, Sequence[Any]]]  # name -> {"ts", "step", "value"}, as ingested
    points: int


@attrs.define
class _RunFeed:
    broadcast: Broadcast[MetricBatch] = attrs.field(factory=Broadcast)
    recent: deque[MetricBatch] = attrs.field(factory=deque)
    kept_points: int = 0
    dropped_through: int = 0  # a resume from before this seq may have missed batches
    followers: int = 0


class MetricFeeds:
    def __init__(self, gather_s: float = GATHER_S) -> None:
        self.gather_s = gather_s
        self.epoch = os.urandom(4).hex()
        self.seq = 0
        self._runs: OrderedDict[str, _RunFeed] = OrderedDict()
        self._every: Broadcast[tuple[str, MetricBatch]] = Broadcast()  # every run's batches, for follow_many

    def _feed(self, run_id: str) -> _RunFeed:
        feed = self._runs.get(run_id)
        if feed is None:
            feed = self._runs[run_id] = _RunFeed(dropped_through=self.seq)
            while len(self._runs) > MAX_RUNS:
                victim = next((k for k, f in self._runs.items() if not f.followers and k != run_id), None)
                if victim is None:
                    break
                del self._runs[victim]
        self._runs.move_to_end(run_id)
        return feed

    def publish(self, run_id: str, series: Mapping[str, Mapping[str, Sequence[Any]]]) -> None:
        """A committed batch of ``run_id``'s points (the ingest's columns)."""
        feed = self._feed(run_id)  # before the seq moves: a new feed misses nothing up to here
        self.seq += 1
        # Kept as ingested (lists, or arrays from base64), not copied: the store is done with them.
        batch = MetricBatch(self.seq, {name: dict(cols) for name, cols in series.items()},
                            sum(len(cols.get("value", ())) for cols in series.values()))
        feed.recent.append(batch)
        feed.kept_points += batch.points
        while len(feed.recent) > 1 and (feed.kept_points > KEEP_POINTS or len(feed.recent) > KEEP_BATCHES):
            gone = feed.recent.popleft()
            feed.kept_points -= gone.points
            feed.dropped_through = gone.seq
        feed.broadcast.publish(batch)
        self._every.publish((run_id, batch))

    def event_id(self, seq: int) -> str:
        return f"{self.epoch}-{seq}"

    def resume_point(self, run_id: str, last_event_id: str | None) -> int | None:
        """The seq to send after, or None when ``last_event_id`` cannot be resumed without a gap."""
        if last_event_id is None:
            return self.seq
        epoch, _, seq = last_event_id.partition("-")
        if epoch != self.epoch or not seq.isdigit() or int(seq) > self.seq:
            return None
        return int(seq) if int(seq) >= self._feed(run_id).dropped_through else None

    async def follow(self, run_id: str, names: tuple[str, ...], last_event_id: str | None
                     ) -> AsyncGenerator[bytes, None]:
        """SSE frames: ``reset`` when the resume point is gone, the batches after it, then new ones."""
        wanted = NameFilter(names, "names")  # each series name matched once, not in every batch
        feed = self._feed(run_id)
        feed.followers += 1
        try:
            async with feed.broadcast.subscribe(maxlen=FEED_MAXLEN) as live:
                after = self.resume_point(run_id, last_event_id)
                if after is None:
                    after = self.seq
                    yield _event(StreamReset(reason="resume point unknown: read the series again"),
                                 self.event_id(after), "reset")
                elif last_event_id is None:
                    yield _event(StreamReady(), self.event_id(after), "ready")
                for batch in list(feed.recent):
                    if batch.seq > after:
                        after = batch.seq
                        frame = _frame(self, batch, wanted)
                        if frame is not None:
                            yield frame
                async for item in live:
                    if isinstance(item, Lagged):  # what it missed is in ``recent`` no longer, or soon not
                        yield _event(StreamReset(reason=f"fell behind by {item.skipped} batches"),
                                     self.event_id(self.seq), "reset")
                        return
                    if item.seq > after:
                        after = item.seq
                        frame = _frame(self, item, wanted)
                        if frame is not None:
                            yield frame
        finally:
            feed.followers -= 1


    async def follow_many(self, run_ids: Sequence[str], names: tuple[str, ...], last_event_id: str | None
                          ) -> AsyncGenerator[bytes, None]:
        """``follow`` for several runs at once: their batches in seq order, each frame naming its
        run; ``reset`` when any run's resume point is gone (read them all again)."""
        wanted = NameFilter(names, "names")
        runs = list(dict.fromkeys(run_ids))
        feeds = {run_id: self._feed(run_id) for run_id in runs}
        for feed in feeds.values():
            feed.followers += 1
        try:
            async with self._every.subscribe(maxlen=FEED_MAXLEN) as live:
                points = [self.resume_point(run_id, last_event_id) for run_id in runs]
                after = self.seq if None in points else min(p for p in points if p is not None)
                if None in points:
                    yield _event(StreamReset(reason="resume point unknown: read the series again"),
                                 self.event_id(after), "reset")
                elif last_event_id is None:
                    yield _event(StreamReady(), self.event_id(after), "ready")
                missed = sorted(((b.seq, run_id, b) for run_id, f in feeds.items() for b in f.recent if b.seq > after),
                                key=lambda item: item[0])
                for seq, run_id, batch in missed:
                    after = seq
                    frame = _frame(self, batch, wanted, run_id)
                    if frame is not None:
                        yield frame
                # Live frames go out together, at most one write per GATHER_S: eight runs logging
                # at 100 steps/s published about 150 batches a second, and a browser handles each
                # write as a task of its own (most of a page's main-thread time following them).
                gathered: list[bytes] = []
                flush_at = math.inf
                while True:
                    item: Any = None
                    with trio.move_on_at(flush_at):  # the subscription is cancel-safe
                        try:
                            item = await live.__anext__()
                        except StopAsyncIteration:
                            break
                    if item is None:  # the window is over
                        yield b"".join(gathered)
                        gathered.clear()
                        flush_at = math.inf
                        continue
                    if isinstance(item, Lagged):
                        gathered.append(_event(StreamReset(reason=f"fell behind by {item.skipped} batches"),
                                               self.event_id(self.seq), "reset"))
                        yield b"".join(gathered)
                        return
                    run_id, batch = item
                    if run_id in feeds and batch.seq > after:
                        after = batch.seq
                        frame = _frame(self, batch, wanted, run_id)
                        if frame is not None:
                            if not gathered:
                                flush_at = trio.current_time() + self.gather_s
                            gathered.append(frame)
                if gathered:
                    yield b"".join(gathered)
        finally:
            for feed in feeds.values():
                feed.followers -= 1


def _finite(values: Sequence[Any]) -> tuple[list[Any], dict[str, list[int]]]:
    nonfinite: dict[str, list[int]] = {"NaN": [], "Infinity": [], "-Infinity": []}
    out: list[Any] = []
    for i, v in enumerate(values):
        if isinstance(v, float) and v - v != 0:
            nonfinite["NaN" if v != v else "Infinity" if v > 0 else "-Infinity"].append(i)
            out.append(None)
        else:
            out.append(v)
    return out, nonfinite


def _list(column: Sequence[Any] | None) -> list[Any] | None:
    return None if column is None else list(column)


def _frame(feeds: MetricFeeds, batch: MetricBatch, wanted: NameFilter, run_id: str | None = None) -> bytes | None:
    """The ``points`` event of ``batch``'s wanted series; with ``run_id``, naming its run (follow_many)."""
    series: dict[str, Any] = {}
    for name, cols in batch.series.items():
        if wanted(name):
            values, nonfinite = _finite(cols.get("value", ()))
            series[name] = {"step": _list(cols.get("step")), "ts": _list(cols.get("ts")), "value": values,
                            "nonfinite": nonfinite}
    if not series:
        return None
    frame = StreamedPoints(seq=batch.seq, series=series) if run_id is None else \
        RunStreamedPoints(run_id=run_id, seq=batch.seq, series=series)
    return _event(frame, feeds.event_id(batch.seq), "points")


def _event(frame: StreamedPoints | RunStreamedPoints | StreamReady | StreamReset, event_id: str, kind: str) -> bytes:
    """One SSE event of the stream (``protocol.metric_stream_frames``: what the route documents)."""
    return format_event(json.dumps(unstructure(frame), separators=(",", ":"), allow_nan=False), id=event_id,
                        event=kind)
