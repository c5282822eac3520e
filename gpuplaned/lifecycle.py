"""The daemon's lifecycle: NOT_READY -> READY -> STOPPING -> CLOSED.

Theory of operation: the daemon is NOT_READY while it claims its endpoint and starts its
actors (requests are answered 503 ``not_ready``), READY once every actor is up, STOPPING
from the first shutdown trigger (a signal, a shutdown request, owner death, a crash of the
serve loop: the reason of the first one is kept), and CLOSED when everything is torn down.
STOPPING may be entered from NOT_READY (a signal during start-up). Pure: no trio, no I/O.
"""

from __future__ import annotations

import enum


class DaemonState(enum.Enum):
    NOT_READY = "NOT_READY"
    READY = "READY"
    STOPPING = "STOPPING"
    CLOSED = "CLOSED"


_NEXT = {
    DaemonState.NOT_READY: {DaemonState.READY, DaemonState.STOPPING, DaemonState.CLOSED},
    DaemonState.READY: {DaemonState.STOPPING},
    DaemonState.STOPPING: {DaemonState.CLOSED},
    DaemonState.CLOSED: set(),
}


class Lifecycle:
    def __init__(self) -> None:
        self.state = DaemonState.NOT_READY
        self.stop_reason: str | None = None

    def ready(self) -> None:
        self._go(DaemonState.READY)

    def stopping(self, reason: str) -> bool:
        """Enter STOPPING; False (and no change) when already stopping or closed."""
        if self.state in (DaemonState.STOPPING, DaemonState.CLOSED):
            return False
        self._go(DaemonState.STOPPING)
        self.stop_reason = reason
        return True

    def closed(self) -> None:
        if self.state is not DaemonState.CLOSED:
            self._go(DaemonState.CLOSED)

    def _go(self, new: DaemonState) -> None:
        if new not in _NEXT[self.state]:
            raise ValueError(f"daemon cannot go from {self.state.value} to {new.value}")
        self.state = new
