"""Which lists a committed write changed, known from SQLite itself: TEMP triggers on the writer.

Owns: the map of tables to topics (named in ``gpuplaned.protocol.change_replies.TOPICS``), the
triggers that mark a topic as a row of its tables is inserted, updated or deleted, and the
``ChangeMarks`` they mark, which the store actor publishes once the transaction has committed
(``actors/store.py``, ``writer.commit_batch``).

Evidence, not timing: a trigger fires only on a row that really changed (an ``INSERT OR
IGNORE`` that inserted nothing fires none), cascades included, whoever wrote it. A write undone
(its savepoint rolled back) or a batch rolled back marks nothing that goes out.

Cost: one Python call per changed row (``gpuplane_changed``). So no trigger sits on the
metric, log or time-series tables, which take rows by the thousand; a live run's points reach
their followers by ``service.link.metric_feeds`` instead. The triggers are TEMP: they live
on the writer connection alone, are made again each time it opens, and are never part of
the schema (a backup or a reader knows nothing of them).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

FUNCTION = "gpuplane_changed"

# Each table whose rows a list page shows, and the topic its changes mark.
TABLE_TOPICS: Mapping[str, str] = {
    "jobs": "jobs", "job_dependencies": "jobs", "queue_control": "jobs",
    "job_groups": "groups",
    "sweeps": "sweeps",
    "runs": "runs", "projects": "runs", "experiments": "runs",
    # The primary metric: per project, per experiment, and globally (``metric_definitions.is_primary``).
    "metric_definitions": "runs", "project_primary_metrics": "runs", "experiment_primary_metrics": "runs",
    "nodes": "nodes", "gpu_slots": "nodes",
    "events": "events",
    "checkpoints": "checkpoints", "artifacts": "checkpoints",
    "evaluations": "evaluations",
    "api_tokens": "tokens",
    "webhook_subscriptions": "webhooks", "webhook_outbox": "webhooks",
    "audit_log": "audit",
    "views": "views",
}
_OPERATIONS = ("INSERT", "UPDATE", "DELETE")
# A token's budget use is read from its jobs (``budget_rows``): one of them submitted, changing
# state or removed changes what the tokens list shows as left. Only those rows, and only those
# changes; a statement more in the jobs table's own triggers (a trigger of its own would cost a
# second trigger program on every job row).
_ALSO: Mapping[tuple[str, str], str] = {
    ("jobs", "INSERT"): f"SELECT {FUNCTION}('tokens') WHERE NEW.token_id IS NOT NULL;",
    ("jobs", "UPDATE"): f"SELECT {FUNCTION}('tokens') WHERE NEW.token_id IS NOT NULL AND NEW.status IS NOT OLD.status;",
    ("jobs", "DELETE"): f"SELECT {FUNCTION}('tokens') WHERE OLD.token_id IS NOT NULL;",
}


class ChangeMarks:
    """The topics the writer's transaction has changed, kept per write until it is kept or undone.

    ``mark`` is what the triggers call (on whichever thread runs the transaction; one
    transaction at a time). ``commit_batch`` keeps a write's marks once its savepoint is
    released and drops them when it is rolled back; ``take`` hands the committed ones over.
    """

    __slots__ = ("_kept", "_write")

    def __init__(self) -> None:
        self._write: set[str] = set()  # marked by the write under way
        self._kept: set[str] = set()  # marked by the writes kept in this transaction

    def mark(self, topic: str) -> None:
        self._write.add(topic)

    def keep(self) -> None:
        """The write under way was kept (its savepoint released)."""
        if self._write:
            self._kept |= self._write
            self._write.clear()

    def undo(self) -> None:
        """The write under way was rolled back: what it marked never happened."""
        self._write.clear()

    def take(self) -> frozenset[str]:
        """The committed transaction's topics (call after COMMIT); starts afresh."""
        self.keep()
        taken = frozenset(self._kept)
        self._kept.clear()
        return taken

    def discard(self) -> None:
        """The transaction was rolled back: nothing of it goes out."""
        self._write.clear()
        self._kept.clear()


def track(conn: sqlite3.Connection) -> ChangeMarks:
    """Make the triggers on the writer ``conn`` and return the marks they fill."""
    marks = ChangeMarks()
    conn.create_function(FUNCTION, 1, marks.mark)
    for table, topic in TABLE_TOPICS.items():
        for operation in _OPERATIONS:
            also = _ALSO.get((table, operation), "")
            conn.execute(f"CREATE TEMP TRIGGER IF NOT EXISTS changed_{table}_{operation.lower()} AFTER {operation} "
                         f"ON main.{table} BEGIN SELECT {FUNCTION}('{topic}'); {also} END")
    return marks
