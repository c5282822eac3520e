"""Output: aligned plain-text tables for people, JSON for scripts, errors on stderr.

Pure formatting plus ``print``; nothing here talks to the daemon. The JSON printed is the
API's own body (or a small envelope around it), so ``--json`` output and the HTTP API agree.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

NONE = "-"


def format_uptime(seconds: float | None) -> str:
    """``12s``, ``3m05s``, ``1h02m``, ``2d03h``: two units at most, truncated, never rounded up."""
    if seconds is None or seconds < 0:
        return NONE
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    rows = [list(headers)] + [list(row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(headers))]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths)] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def endpoint_text(endpoints: Mapping[str, str | None]) -> str:
    parts = []
    if endpoints.get("unix"):
        parts.append(f"unix://{endpoints['unix']}")
    if endpoints.get("tcp"):
        parts.append(f"tcp://{endpoints['tcp']}")
    return ", ".join(parts) or NONE


def daemon_line(info: Mapping[str, Any]) -> str:
    """``gpuplaned 0.1.0 (pid 4242, role all): READY, up 3m05s, unix:///run/user/1000/gpuplane/gpuplaned.sock``"""
    return (
        f"gpuplaned {info['version']} (pid {info['pid']}, role {info['role']}): {info['state']}, "
        f"up {format_uptime(info.get('uptime_s'))}, {endpoint_text(info.get('endpoints') or {})}"
    )


def _active(actor: Mapping[str, Any]) -> bool:
    return actor["state"] in ("STARTING", "RUNNING", "STOPPING")


def last_error_text(actor: Mapping[str, Any], now: float | None = None) -> str:
    """The first line of the actor's last error, with how long ago it happened."""
    error = actor.get("last_error")
    if not error:
        return NONE
    text = str(error).strip().splitlines()[0] if str(error).strip() else str(error)
    at = actor.get("last_error_at")
    if at is not None:
        now = time.time() if now is None else now
        text += f" ({format_uptime(max(0.0, now - at))} ago)"
    return text


def stats_text(stats: Mapping[str, Any] | None) -> str:
    if not stats:
        return NONE
    return " ".join(f"{key}={value}" for key, value in stats.items())


def actor_table(actors: Sequence[Mapping[str, Any]], *, stats: bool = False) -> str:
    headers = ["ACTOR", "STATE", "UPTIME", "RESTARTS", "LAST ERROR"]
    if stats:
        headers.append("STATS")
    now = time.time()
    rows = []
    for actor in actors:
        row = [
            actor["name"],
            actor["state"],
            format_uptime(actor.get("uptime_s")) if _active(actor) else NONE,
            str(actor.get("restarts", 0)),
            last_error_text(actor, now),
        ]
        if stats:
            row.append(stats_text(actor.get("stats")))
        rows.append(row)
    return table(headers, rows)


def actor_line(actor: Mapping[str, Any]) -> str:
    """``store: RUNNING (up 12s, 0 restarts)``, plus the last error when there is one."""
    parts = []
    if _active(actor):
        parts.append(f"up {format_uptime(actor.get('uptime_s'))}")
    restarts = actor.get("restarts", 0)
    parts.append(f"{restarts} restart{'' if restarts == 1 else 's'}")
    if actor.get("last_error"):
        parts.append(f"last error: {last_error_text(actor)}")
    return f"{actor['name']}: {actor['state']} ({', '.join(parts)})"


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def print_error(message: str, *, hint: str | None = None) -> None:
    print(f"error: {message}", file=sys.stderr)
    if hint:
        print(hint, file=sys.stderr)
