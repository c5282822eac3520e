"""A node's conditions: what its own parts say is wrong with it for now (the Slurm backend's
``slurm_unreachable`` while slurmctld does not answer), by name, each with a message.

A node-side part raises a condition while the trouble lasts and clears it when it is over;
``NodeContext.conditions`` is the node's one ``NodeConditions``. Each change (raised, cleared)
makes one ``NodeEvent`` for the node link, and the monitor puts ``current()`` in every snapshot:
while any condition holds, the node takes no new work (its running jobs carry on). Raising a
condition that holds already only updates its message (an error's words may differ from one try
to the next): no second event.

Pure: no trio, no I/O. The monitor sends the pending events (``pending``, then ``sent``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpuplaned.protocol.agent import NodeEvent

NODE_CONDITION_RAISED = "NODE_CONDITION_RAISED"  # warning; context: name, message
NODE_CONDITION_CLEARED = "NODE_CONDITION_CLEARED"  # info; context: name, message (the one it had)
EVENT_TYPES = (NODE_CONDITION_RAISED, NODE_CONDITION_CLEARED)


def _wall_ms() -> int:
    return int(time.time() * 1000)  # an event's time stamp: data, not timing


class NodeConditions:
    """The conditions that hold on this node, and the events of their changes not yet sent."""

    def __init__(self, now_ms: Callable[[], int] = _wall_ms) -> None:
        self._now_ms = now_ms
        self._held: dict[str, str] = {}
        self._unsent: list[NodeEvent] = []

    def raise_(self, name: str, message: str) -> bool:
        """Hold ``name`` with ``message``; True when it did not hold before (an event is pending)."""
        if not name:
            raise ValueError("a condition needs a name")
        raised = name not in self._held
        self._held[name] = message
        if raised:
            self._unsent.append(NodeEvent(NODE_CONDITION_RAISED, "warning", f"{name}: {message}", self._now_ms(),
                                          context={"name": name, "message": message}))
        return raised

    def clear(self, name: str) -> bool:
        """``name`` no longer holds; True when it did (an event is pending)."""
        message = self._held.pop(name, None)
        if message is None:
            return False
        self._unsent.append(NodeEvent(NODE_CONDITION_CLEARED, "info", f"{name} cleared (was: {message})",
                                      self._now_ms(), context={"name": name, "message": message}))
        return True

    def current(self) -> dict[str, str]:
        """The conditions that hold: name -> message (a copy)."""
        return dict(self._held)

    def pending(self) -> list[NodeEvent]:
        """The changes' events not yet sent, oldest first (a copy: ``sent`` once the link took them)."""
        return list(self._unsent)

    def sent(self, events: list[NodeEvent]) -> None:
        """``events`` (what ``pending`` gave) reached the link: not to be sent again."""
        del self._unsent[:len(events)]
