"""The ``text/event-stream`` frame (WHATWG HTML "Server-sent events"): pure formatting.

Below the service layer, so that a service can frame the events its followers get
(log lines, recorded events, node readings) without importing the HTTP app;
``gpuplaned.http.sse`` streams them.
"""

from __future__ import annotations

import re

# The event-stream grammar accepts all three line endings; splitting on all of them keeps
# a stray "\r" in a log line (progress bars) from being read as the start of a new field.
LINE_BREAK = re.compile(r"\r\n|\r|\n")


def format_event(data: str, *, id: str | None = None, event: str | None = None) -> bytes:
    """Frame one event: optional ``id:`` and ``event:`` fields, one ``data:`` line per line.

    A client joins the ``data`` lines with ``\\n``, so multi-line data arrives intact
    (line endings normalised to ``\\n``).

    Raises:
        ValueError: ``id`` or ``event`` contains a line break, or ``id`` a NUL (which
            would make browsers ignore it).
    """
    parts: list[str] = []
    if id is not None:
        if LINE_BREAK.search(id) or "\0" in id:
            raise ValueError(f"an event id cannot contain line breaks or NUL: {id!r}")
        parts.append(f"id: {id}\n")
    if event is not None:
        if LINE_BREAK.search(event):
            raise ValueError(f"an event type cannot contain line breaks: {event!r}")
        parts.append(f"event: {event}\n")
    for line in LINE_BREAK.split(data):
        parts.append(f"data: {line}\n")
    parts.append("\n")
    return "".join(parts).encode()
