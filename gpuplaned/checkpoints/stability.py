"""When a checkpoint on disk is complete: the sans-io debounce rule.

Theory of operation. Each pass of the watcher gives ``Stability.feed`` the time and what it
saw of every candidate: its size, its mtime and whether one of the job's processes has a
file of it open for writing (an ``Observation``). A candidate is ready once the same size
and mtime have been seen for ``window_s`` without a break and nothing holds it open for
writing; ``feed`` returns it then, and again on every pass until ``registered`` says it was
taken at that size and mtime (so a registration that failed is retried, never lost). A
candidate registered once is returned again only when its size or mtime change and settle
again (``last.pt`` saved anew every epoch). One that disappears is forgotten.

A ``final`` pass is one made once the job has exited (its shim writes ``exit.json`` only
when the job and all its descendants are gone): no writer is left, so whatever is there
is as complete as it will ever be, and is ready without waiting out the window. This is
how the saves of a job shorter than one window, or of one that ended while the daemon was
away, are still registered.

Nothing here reads a clock or a file: the watcher passes both in, and tests use plain numbers.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs


@attrs.frozen
class Observation:
    """A candidate as one pass saw it."""

    size: int
    mtime_ns: int
    writing: bool = False  # a file of it is open for writing by the job

    @property
    def signature(self) -> tuple[int, int]:
        return self.size, self.mtime_ns


@attrs.define
class _Seen:
    signature: tuple[int, int]
    since: float  # when this signature was first seen without a break
    registered: tuple[int, int] | None = None


@attrs.define
class Stability:
    """The debounce state of one job's candidates, keyed by path."""

    window_s: float = 10.0
    _seen: dict[str, _Seen] = attrs.Factory(dict)

    def feed(self, now: float, observed: Mapping[str, Observation], final: bool = False) -> list[str]:
        """What a pass saw at ``now``; returns the paths ready to register, in ``observed``'s
        order. ``final``: the job's processes have all exited."""
        for gone in self._seen.keys() - observed.keys():
            del self._seen[gone]
        ready = []
        for path, seen in observed.items():
            state = self._seen.get(path)
            if state is None:
                state = self._seen[path] = _Seen(seen.signature, now)
            elif state.signature != seen.signature:
                state.signature, state.since = seen.signature, now
            if seen.writing and not final:
                state.since = now  # the window starts again once the writer lets go
                continue
            if (final or now - state.since >= self.window_s) and state.registered != state.signature:
                ready.append(path)
        return ready

    def registered(self, path: str, observation: Observation) -> None:
        """``path`` was taken at ``observation``'s size and mtime: not ready again until they change."""
        state = self._seen.get(path)
        if state is not None and state.signature == observation.signature:
            state.registered = observation.signature

    def due(self) -> float | None:
        """The earliest time a candidate not yet registered may be ready; None when there is none."""
        times = [s.since + self.window_s for s in self._seen.values() if s.registered != s.signature]
        return min(times) if times else None

    def pending(self) -> int:
        """Candidates seen but not registered at their present size and mtime."""
        return sum(1 for s in self._seen.values() if s.registered != s.signature)
