"""Rows of ``webhook_subscriptions`` and ``webhook_outbox``.

The outbox is filled by a trigger on ``events`` (0017_job_failed_kinds.sql), in the transaction
that records the event; this module reads what is due and records each attempt. ``secret``
here is always the sealed form (``gpuplaned.service.api.webhooks``), never the secret itself; so
is ``sealed_url``, and ``url`` holds only what replies show of it (``scheme://host/***``; a row
made before migration 0021 holds the URL itself there until ``seal_legacy_urls``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import attrs

from gpuplaned.store.event_rows import _COLUMNS as _EVENT_COLUMNS
from gpuplaned.store.event_rows import EventRow, _row


@attrs.frozen
class WebhookRow:
    id: str
    url: str
    event_types: tuple[str, ...]
    severity: str
    format: str
    sealed_secret: str | None
    enabled: bool
    created_at: int
    sealed_url: str | None = None  # None: a row made before 0021, not sealed yet


@attrs.frozen
class Pending:
    """One notification to send: the outbox row, its subscription and its event."""

    outbox_id: int
    attempts: int
    webhook: WebhookRow
    event: EventRow


_SUB = "id, url, event_types, severity, format, secret, enabled, created_at, url_sealed"


def _webhook(row: Sequence[Any]) -> WebhookRow:
    id_, url, types, severity, fmt, secret, enabled, created, sealed_url = row
    return WebhookRow(id_, url, tuple(t for t in types.split(",") if t), severity, fmt, secret, bool(enabled), created,
                      sealed_url)


def insert_webhook(conn: sqlite3.Connection, row: WebhookRow) -> None:
    conn.execute(f"INSERT INTO webhook_subscriptions ({_SUB}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (row.id, row.url, ",".join(row.event_types), row.severity, row.format, row.sealed_secret,
                  int(row.enabled), row.created_at, row.sealed_url))


def unsealed_urls(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(id, URL) of the rows made before URLs were sealed (migration 0021)."""
    return conn.execute("SELECT id, url FROM webhook_subscriptions WHERE url_sealed IS NULL").fetchall()


def seal_url(conn: sqlite3.Connection, webhook_id: str, shown: str, sealed: str) -> None:
    conn.execute("UPDATE webhook_subscriptions SET url = ?, url_sealed = ? WHERE id = ? AND url_sealed IS NULL",
                 (shown, sealed, webhook_id))


def list_webhooks(conn: sqlite3.Connection) -> list[WebhookRow]:
    return [_webhook(r) for r in conn.execute(f"SELECT {_SUB} FROM webhook_subscriptions ORDER BY created_at, id")]


def get_webhook(conn: sqlite3.Connection, webhook_id: str) -> WebhookRow | None:
    found = conn.execute(f"SELECT {_SUB} FROM webhook_subscriptions WHERE id = ?", (webhook_id,)).fetchone()
    return _webhook(found) if found else None


def delete_webhook(conn: sqlite3.Connection, webhook_id: str) -> bool:
    """Deletes the subscription and (cascade) its notifications not yet sent."""
    return conn.execute("DELETE FROM webhook_subscriptions WHERE id = ?", (webhook_id,)).rowcount > 0


def outbox_counts(conn: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    """Per subscription: pending, delivered and given-up notifications, and the last error."""
    rows = conn.execute(
        "SELECT subscription_id, SUM(delivered_at IS NULL AND gave_up_at IS NULL), SUM(delivered_at IS NOT NULL), "
        "SUM(gave_up_at IS NOT NULL), MAX(delivered_at), "
        "(SELECT last_error FROM webhook_outbox o2 WHERE o2.subscription_id = o.subscription_id "
        " AND o2.last_error IS NOT NULL ORDER BY o2.id DESC LIMIT 1) "
        "FROM webhook_outbox o GROUP BY subscription_id").fetchall()
    return {r[0]: {"pending": r[1], "delivered": r[2], "gave_up": r[3], "last_delivered_at": r[4],
                   "last_error": r[5]} for r in rows}


def due(conn: sqlite3.Connection, now_ms: int, skip: Sequence[str], per_webhook: int) -> list[Pending]:
    """Notifications due now, oldest first, at most ``per_webhook`` for each subscription not in
    ``skip`` (those being sent to already)."""
    skipped = f"AND o.subscription_id NOT IN ({','.join('?' * len(skip))})" if skip else ""
    event_columns = ", ".join(f"e.{c.strip()}" for c in _EVENT_COLUMNS.split(","))
    sub_columns = ", ".join(f"s.{c.strip()}" for c in _SUB.split(","))
    rows = conn.execute(
        f"SELECT * FROM (SELECT o.id, o.attempts, {sub_columns}, {event_columns}, "
        f"ROW_NUMBER() OVER (PARTITION BY o.subscription_id ORDER BY o.id) AS n "
        f"FROM webhook_outbox o JOIN webhook_subscriptions s ON s.id = o.subscription_id "
        f"JOIN events e ON e.id = o.event_id "
        f"WHERE o.delivered_at IS NULL AND o.gave_up_at IS NULL AND o.next_at <= ? {skipped}) "
        f"WHERE n <= ? ORDER BY 1",
        (now_ms, *skip, per_webhook)).fetchall()
    width = len(_SUB.split(","))
    return [Pending(r[0], r[1], _webhook(r[2:2 + width]), _row(r[2 + width:-1])) for r in rows]


def next_due_ms(conn: sqlite3.Connection) -> int | None:
    found = conn.execute("SELECT MIN(next_at) FROM webhook_outbox WHERE delivered_at IS NULL AND gave_up_at IS NULL"
                         ).fetchone()
    return found[0] if found else None


def mark_delivered(conn: sqlite3.Connection, outbox_id: int, now_ms: int) -> None:
    conn.execute("UPDATE webhook_outbox SET delivered_at = ?, attempts = attempts + 1 WHERE id = ?",
                 (now_ms, outbox_id))


def mark_failed(conn: sqlite3.Connection, outbox_id: int, webhook_id: str, error: str, next_at_ms: int | None,
                now_ms: int) -> None:
    """One more failed attempt; ``next_at_ms`` None gives the notification up. The rest of the
    subscription's queue waits as long (backoff per endpoint, not per notification)."""
    if next_at_ms is None:
        conn.execute("UPDATE webhook_outbox SET attempts = attempts + 1, last_error = ?, gave_up_at = ? WHERE id = ?",
                     (error, now_ms, outbox_id))
        return
    conn.execute("UPDATE webhook_outbox SET attempts = attempts + 1, last_error = ?, next_at = ? WHERE id = ?",
                 (error, next_at_ms, outbox_id))
    conn.execute("UPDATE webhook_outbox SET next_at = ? WHERE subscription_id = ? AND next_at < ? "
                 "AND delivered_at IS NULL AND gave_up_at IS NULL", (next_at_ms, webhook_id, next_at_ms))


def prune(conn: sqlite3.Connection, before_ms: int) -> int:
    """Forget notifications delivered or given up before ``before_ms``; the pending stay."""
    return conn.execute("DELETE FROM webhook_outbox WHERE coalesce(delivered_at, gave_up_at) < ?",
                        (before_ms,)).rowcount
