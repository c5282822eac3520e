"""Webhook subscriptions: create, list, delete, test, and ``send`` one notification.

The secret must be recoverable (an HMAC needs the key itself, unlike a token, whose hash
is enough), so it is sealed (``gpuplaned.service.sealing``). A copy of ``gpuplane.db`` (a
backup, a bug report) then carries no secret; the secret is opened only in memory to sign, is
never logged, and no reply shows it back: a subscription says only ``"signed": true``. Slack
and Bark URLs are secrets of their own (their path is the key), so the routes need the
``admin`` scope (``gpuplaned.http.scopes``), are sealed at rest as the secret is, and no
reply or log shows more of a URL than its host (``shown_url``, which is all the row keeps in
the clear).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import attrs

from gpuplaned.domain import webhooks as formats
from gpuplaned.domain.event_types import EVENT_TYPES
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.fields import field
from gpuplaned.protocol.ids import new_id
from gpuplaned.protocol.webhook_replies import (
    FORMATS,
    WebhookInfo,
    WebhookList,
    WebhookReply,
    WebhookTested,
    WebhookTestResult,
)
from gpuplaned.protocol.vocabulary import SEVERITIES
from gpuplaned.service import access
from gpuplaned.service.api.events import to_json
from gpuplaned.service.link.registry import now_ms
from gpuplaned.service.sealing import seal, unseal
from gpuplaned.store import webhook_rows
from gpuplaned.store.event_rows import EventRow
from gpuplaned.store.webhook_rows import WebhookRow
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from pathlib import Path

    import httpx

    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.webhooks")

SEND_TIMEOUT_S = 10.0
TEST_EVENT = "WEBHOOK_TEST"
_URL = re.compile(r"https?://[^\s/?#]+[^\s]*")


def _event_types_fault(types: list[str]) -> str | None:
    unknown = [t for t in types if t != "*" and t not in EVENT_TYPES]
    return f"no event type {', '.join(unknown)} (the types: {', '.join(EVENT_TYPES)}, or * for all)" if unknown else None


@attrs.frozen(kw_only=True)
class WebhookCreate:
    url: str = field(pattern=f"^{_URL.pattern}$", max_length=2048,
                     message="must be an http:// or https:// URL; got {value!r}")
    events: list[str] = field(min_items=1, max_items=64, check=_event_types_fault,
                              description="event types, or [\"*\"] for every type")
    severity: str = field(default="info", enum=SEVERITIES, description="the least severity notified")
    format: str = field(default="json", enum=FORMATS)
    secret: str | None = field(default=None, min_length=8, max_length=256,
                               description="signs each body (HMAC-SHA256); never shown back")


# --- the API ---------------------------------------------------------------------------------


def _info(row: WebhookRow, counts: dict[str, Any] | None) -> WebhookInfo:
    counts = counts or {}
    return WebhookInfo(row.id, shown_url(row.url), row.event_types, row.severity, row.format,
                       row.sealed_secret is not None,
                       row.created_at, counts.get("pending") or 0, counts.get("delivered") or 0,
                       counts.get("gave_up") or 0, counts.get("last_delivered_at"), counts.get("last_error"))


async def create_webhook(shared: ServerContext, made: WebhookCreate) -> WebhookReply:
    types = ("*",) if "*" in made.events else tuple(dict.fromkeys(t.upper() for t in made.events))
    home = shared.config.home
    sealed = seal(home, made.secret) if made.secret else None
    row = WebhookRow(new_id("wh"), shown_url(made.url), types, made.severity, made.format, sealed, True, now_ms(),
                     seal(home, made.url))
    await write(access.store_port(shared, "webhooks"), lambda conn: webhook_rows.insert_webhook(conn, row), small=True)
    log.info("webhook %s added: %s for %s (%s, %s)", row.id, row.url, ",".join(types), row.severity, row.format)
    return WebhookReply(webhook=_info(row, None))


async def seal_legacy_urls(shared: ServerContext) -> int:
    """Seal the URLs of subscriptions made before they were sealed (migration 0021); how many."""
    home = shared.config.home
    legacy = await access.readers(shared, "webhooks").run(webhook_rows.unsealed_urls)
    if not legacy:
        return 0
    sealed = [(webhook_id, shown_url(url), seal(home, url)) for webhook_id, url in legacy]

    def apply(conn: Any) -> None:
        for webhook_id, shown, closed in sealed:
            webhook_rows.seal_url(conn, webhook_id, shown, closed)

    await write(access.store_port(shared, "webhooks"), apply, small=True)
    log.info("sealed the URLs of %d webhook subscription(s) stored before URLs were sealed", len(sealed))
    return len(sealed)


def _read(conn: Any) -> list[WebhookInfo]:
    counts = webhook_rows.outbox_counts(conn)
    return [_info(row, counts.get(row.id)) for row in webhook_rows.list_webhooks(conn)]


async def list_webhooks(shared: ServerContext) -> WebhookList:
    return WebhookList(webhooks=await access.readers(shared, "webhooks").run(_read))


async def _get(shared: ServerContext, webhook_id: str) -> WebhookRow:
    row = await access.readers(shared, "webhooks").run(lambda conn: webhook_rows.get_webhook(conn, webhook_id))
    if row is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no webhook {webhook_id}", {"webhook_id": webhook_id})
    return row


async def delete_webhook(shared: ServerContext, webhook_id: str) -> None:
    deleted = await write(access.store_port(shared, "webhooks"),
                          lambda conn: webhook_rows.delete_webhook(conn, webhook_id), small=True)
    if not deleted:
        raise ApiError(ErrorCode.NOT_FOUND, f"no webhook {webhook_id}", {"webhook_id": webhook_id})


async def test_webhook(shared: ServerContext, webhook_id: str) -> WebhookTested:
    """Send a ``WEBHOOK_TEST`` event now, outside the outbox, and say how the endpoint answered."""
    row = await _get(shared, webhook_id)
    event = EventRow(new_id("ev"), now_ms(), TEST_EVENT, "info", None, None, None, None,
                     f"a test notification from GPUPlane for webhook {row.id}", {})
    async with http_client() as client:
        status, error = await send(client, shared.config.home, row, event)
    return WebhookTested(result=WebhookTestResult(error is None, status, error))


# --- sending ---------------------------------------------------------------------------------


def shown_url(url: str) -> str:
    """The URL as replies and logs show it: its scheme, host and port, and ``/***`` for a path or
    query. A Slack, Discord or Bark hook's path is its credential (Bark's very first segment), so
    none of the path is kept; the id and the event types tell subscriptions apart."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    hidden = parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password
    return f"{parts.scheme}://{netloc}/***" if hidden else f"{parts.scheme}://{netloc}/"


def http_client() -> httpx.AsyncClient:
    """The client notifications go out with. httpx is imported here, at the first one to send:
    a daemon with no webhook never loads it (~85 ms of every start, most of it the command-line
    client that httpx's package imports whenever rich and click are installed)."""
    import httpx

    return httpx.AsyncClient(timeout=SEND_TIMEOUT_S, follow_redirects=False)


async def send(client: httpx.AsyncClient, home: Path, webhook: WebhookRow, event: EventRow) -> tuple[int | None, str | None]:
    """POST one notification: ``(status, None)`` on a 2xx, else ``(status or None, why)``."""
    import httpx  # loaded by ``http_client`` already: a lookup

    out = formats.render(webhook.format, to_json(event), secret=unseal(home, webhook.sealed_secret), now_ms=now_ms())
    try:
        url = unseal(home, webhook.sealed_url) or webhook.url  # a row not sealed yet holds the URL itself
        response = await client.post(url, content=out.body, headers=out.headers)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:300] or type(exc).__name__
    if 200 <= response.status_code < 300:
        return response.status_code, None
    return response.status_code, f"HTTP {response.status_code}"
