"""How often one follower of the changes stream hears of changes: ``ChangePacing``.

Pure (no trio): times are seconds on whatever clock the caller reads. At most one event per
window: a lone change goes out at once (the leading edge) and opens a window; whatever changes
while it is open goes out together when it closes (the trailing edge), which opens the next.
Nothing is dropped: pending topics only grow until they go out, so a burst of 1,000 writes is
one or two events naming the union of what they changed.
"""

from __future__ import annotations

import math

WINDOW_S = 0.5


class ChangePacing:
    def __init__(self, window_s: float = WINDOW_S) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self._window_s = window_s
        self._pending: set[str] = set()
        self._window_ends = -math.inf  # no event yet: the first change goes out at once

    def add(self, topics: frozenset[str] | set[str]) -> None:
        self._pending |= topics

    def due(self) -> float | None:
        """When the pending topics may go out (now or earlier: at once); None: none pending."""
        return self._window_ends if self._pending else None

    def take(self, now: float) -> list[str]:
        """The pending topics, sorted, for the event sent at ``now``, which opens a window."""
        topics = sorted(self._pending)
        self._pending.clear()
        self._window_ends = now + self._window_s
        return topics
