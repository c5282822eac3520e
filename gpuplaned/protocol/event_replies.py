"""Events as the API shows them: one event of the durable log, and a page of them."""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.reply_words import next_cursor_field
from gpuplaned.protocol.vocabulary import SEVERITIES


@attrs.frozen
class EventRow:
    id: str = doc("ev_<ULID>; also the SSE id to resume after")
    ts: int = doc("ms since the epoch")
    type: str = doc("a word like DISK_LOW or GPU_LOST")
    severity: str = doc(enum=SEVERITIES)
    node_id: str | None
    job_id: str | None
    run_id: str | None
    step: int | None
    message: str | None
    context: dict[str, Any]

    __schema_name__ = "Event"  # the API's word for it


@attrs.frozen(kw_only=True)
class EventList:
    events: list[EventRow]
    next_cursor: str | None = next_cursor_field()
