"""Words the reply types share: what a timestamp is, what a next page's cursor is."""

from __future__ import annotations

from typing import Any

from gpuplaned.protocol.fields import doc

MS = "ms since the epoch"
AXES = ("step", "ts")  # a run's series by step, or by time
DIRECTIONS = ("minimize", "maximize", None)


def next_cursor_field() -> Any:
    """A list reply's ``next_cursor`` field."""
    return doc("pass as cursor= for the next page; null: no more")
