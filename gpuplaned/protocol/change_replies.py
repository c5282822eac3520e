"""The changes stream's events (``GET /api/v1/changes/stream``): which lists changed.

A topic names what a list page shows, never a table: the UI refetches the lists keyed on a
topic when it hears it. Which tables mark which topic is the store's (``store.change_topics``).
"""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import doc

# Sorted: the order ``ready`` lists them in.
TOPICS: tuple[str, ...] = ("audit", "checkpoints", "evaluations", "events", "groups", "jobs", "nodes", "runs",
                           "sweeps", "tokens", "views", "webhooks")


@attrs.frozen(kw_only=True)
class ChangedTopics:
    """`ready`: every topic this caller may hear; `changes`: those that changed since the last event."""

    topics: list[str] = doc("sorted, each once", items={"enum": list(TOPICS)})
