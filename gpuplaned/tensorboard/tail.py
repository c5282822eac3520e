"""Following all the event files of one job attempt: discovery, one reader per file, and the
rewind rule, pass by pass. Synchronous and no trio, like ``reader``: the caller (the
``tbtail`` actor, or ``import-run`` for a finished dir) runs ``poll`` in a worker thread.

Exactly once is the caller's to keep, with what ``poll`` returns: each ``FileBatch`` holds
one file's new points and the cursor (and rewind state) that follow them, so storing the
points, the cursor and the state in one transaction, and starting a restarted ``JobTail``
from the stored cursors and state, reads each point once whatever stops in between. A batch
the caller could not store must be stored before the next ``poll``'s (the readers have moved
on).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

from gpuplaned.tensorboard.discovery import Claim, EventFile, Listing, find_event_files
from gpuplaned.tensorboard.events import Columns
from gpuplaned.tensorboard.reader import Cursor, EventFileReader, Problem
from gpuplaned.tensorboard.rewind import Order, Rewinds, order_key

__all__ = ["FileBatch", "JobTail"]


@attrs.frozen
class FileBatch:
    """One file's part of a pass."""

    path: str
    cursor: Cursor  # where its read ended: store it with the points
    points: dict[str, Columns]  # series -> new points, to add after the cuts
    cuts: dict[str, int]  # series -> drop its stored points from this step on, first
    rewinds: dict[str, tuple[Order, int]]  # series -> rewind state after this batch: store it too
    problems: list[Problem]
    records: int


class JobTail:
    """Follows the event files under ``roots`` written since ``since`` (wall-clock seconds).

    Args:
        roots: ``discovery.log_roots(...)`` of the job.
        since: the attempt's start.
        host: this host's name (files of other hosts are left alone), or None.
        cursors: path -> cursor stored with the points of an earlier tail of this attempt.
        rewinds: the rewind state stored with them.
        grace: see ``EventFileReader``.
        claim: whether a file (its path, its name's time, its writer's pid) is the job's, on
            evidence (``discovery.Claim``); asked once a file, and never for a file with a
            stored cursor (it was taken before). None: every file found is.
    """

    def __init__(self, roots: Iterable[str | os.PathLike], *, since: float, host: str | None = None,
                 cursors: Mapping[str, Cursor] | None = None,
                 rewinds: Mapping[str, tuple[Order, int]] | None = None, grace: float = 30.0,
                 claim: Claim | None = None) -> None:
        self.roots = list(roots)
        self.since = since
        self.host = host
        self.grace = grace
        self._claim = claim
        self._decided: dict[str, bool] = {}  # path -> claim's answer
        self._cursors = dict(cursors or {})
        self._rewinds = Rewinds(dict(rewinds or {}))
        self._files: dict[str, tuple[EventFile, EventFileReader]] = {}

    @property
    def files(self) -> list[str]:
        return list(self._files)

    def close(self) -> None:
        for _, reader in self._files.values():
            reader.close()
        self._files.clear()

    def poll(self, now: float, listing: Listing | None = None) -> list[FileBatch]:
        """Look for new files, read every file's new records (in TensorBoard's file order),
        and return a batch per file that moved. ``listing``: the pass's, shared by its tails."""
        claim = None if self._claim is None else self._claims
        for found in find_event_files(self.roots, since=self.since, host=self.host, claim=claim, listing=listing):
            key = os.fspath(found.path)
            if key not in self._files:
                reader = EventFileReader(found.path, self._cursors.get(key), grace=self.grace)
                self._files[key] = (found, reader)
        batches = []
        for key, (found, reader) in sorted(self._files.items(), key=lambda item: order_key(item[1][0].order)):
            before = reader.cursor
            result = reader.read(now)
            if result.cursor == before and not result.problems:
                continue
            points: dict[str, Columns] = {}
            cuts: dict[str, int] = {}
            if any(p.what == "file replaced" for p in result.problems):
                cuts = self._rewinds.reopen(found.order)  # what it gave before goes, in the same batch
            touched: set[str] = set(cuts)
            for tag, columns in result.scalars.items():
                series = found.series(tag)
                kept, cut = self._rewinds.take(series, found.order, columns)
                touched.add(series)
                if cut is not None:
                    cuts[series] = min(cut, cuts.get(series, cut))
                if len(kept):
                    points[series] = kept
            state = {s: self._rewinds.state[s] for s in touched if s in self._rewinds.state}
            batches.append(FileBatch(key, result.cursor, points, cuts, state, result.problems, result.records))
        return batches

    def _claims(self, path: Path, named_at: int, pid: int | None) -> bool:
        key = os.fspath(path)
        if key in self._cursors or key in self._files:
            return True
        if key not in self._decided:
            assert self._claim is not None
            self._decided[key] = self._claim(path, named_at, pid)
        return self._decided[key]
