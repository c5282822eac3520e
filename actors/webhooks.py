"""The webhooks actor: sends what the outbox holds, retrying with backoff.

Owns: the delivery of ``webhook_outbox`` rows (filled by a trigger on ``events``, in the
event's own transaction: 0013_events_policies.sql) and its HTTP client.
Inputs: newly recorded events on ``shared.event_feed`` (a wake-up: their notifications are
queued already), and a ``TICK`` for retries that come due and events written without a
publish.
Outputs: one POST per notification (``gpuplaned.service.api.webhooks.send``, rendered by
``gpuplaned.domain.webhooks``); each attempt's result written back to its outbox row.
Isolation: each subscription is sent to by its own task, one notification at a time, so a
dead or slow endpoint holds up only itself (at most ``SEND_TIMEOUT_S`` an attempt); a failure
pushes that subscription's whole queue back by the retry delay (exponential, jittered), so a
dead endpoint is not hammered once per queued event. After ``MAX_ATTEMPTS`` a notification is
given up (counted in ``GET /api/v1/webhooks``). Sent and given-up rows are pruned after
``KEEP_DONE_MS``.
Restart: permanent. Delivery is at least once: a notification whose POST was cut short by a
stop or crash is sent again (receivers dedupe on ``X-GPUPlane-Delivery``).
Ready: once the rows from before sealed URLs are sealed; ``started()`` passes a
``WebhooksHandle``. Its HTTP client is made at the first notification to send.
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from typing import TYPE_CHECKING

import attrs
import trio

from gpuplaned.domain.webhooks import MAX_ATTEMPTS, retry_delay_s
from gpuplaned.runtime.context import ActorContext
from gpuplaned.service.api.webhooks import http_client, seal_legacy_urls, send
from gpuplaned.service.context import ServerContext
from gpuplaned.service.link.registry import now_ms
from gpuplaned.store import webhook_rows
from gpuplaned.store.webhook_rows import Pending
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("gpuplaned.webhooks")

TICK = 1.0
BATCH = 50  # notifications taken per subscription per read
KEEP_DONE_MS = 7 * 86_400_000  # sent or given-up notifications are counted in the list this long
PRUNE_EVERY_S = 3600.0


@attrs.frozen
class WebhooksStats:
    delivered: int
    failed_attempts: int
    gave_up: int
    sending_to: int


@attrs.define
class WebhooksHandle:
    delivered: int = 0
    failed_attempts: int = 0
    gave_up: int = 0
    busy: set[str] = attrs.field(factory=set)  # subscriptions a task is sending to
    wake: trio.Event = attrs.field(factory=trio.Event)

    def statistics(self) -> WebhooksStats:
        return WebhooksStats(self.delivered, self.failed_attempts, self.gave_up, len(self.busy))

    def poke(self) -> None:
        self.wake.set()


async def run(ctx: ActorContext[ServerContext], *, task_status: trio.TaskStatus[WebhooksHandle] = trio.TASK_STATUS_IGNORED) -> None:
    shared = ctx.shared
    handle = WebhooksHandle()
    async with contextlib.AsyncExitStack() as closing, trio.open_nursery() as nursery:
        client = _Client(closing)
        nursery.start_soon(_wake_on_events, shared, handle)
        await seal_legacy_urls(shared)  # rows from before URLs were sealed (migration 0021)
        task_status.started(handle)
        pruned_at = -PRUNE_EVERY_S
        while True:
            if trio.current_time() - pruned_at >= PRUNE_EVERY_S:
                pruned_at = trio.current_time()
                before = now_ms() - KEEP_DONE_MS
                await write(ctx.ports["store"], lambda conn: webhook_rows.prune(conn, before))
            handle.wake = trio.Event()
            busy = sorted(handle.busy)
            due = await shared.readers.run(lambda conn: webhook_rows.due(conn, now_ms(), busy, BATCH))
            queues: dict[str, list[Pending]] = defaultdict(list)
            for item in due:
                queues[item.webhook.id].append(item)
            for webhook_id, queue in queues.items():
                handle.busy.add(webhook_id)
                nursery.start_soon(_deliver, ctx, client, handle, webhook_id, queue)
            with trio.move_on_after(TICK):
                await handle.wake.wait()


class _Client:
    """The HTTP client, made when the first notification is sent (``http_client``) and closed
    with the actor."""

    def __init__(self, closing: contextlib.AsyncExitStack) -> None:
        self._closing = closing
        self._client: httpx.AsyncClient | None = None

    async def get(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = await self._closing.enter_async_context(http_client())
        return self._client


async def _wake_on_events(shared: ServerContext, handle: WebhooksHandle) -> None:
    async with shared.event_feed.subscribe(maxlen=64) as events:
        async for _ in events:  # a Lagged marker wakes too: the outbox is the record, not the feed
            handle.poke()


async def _deliver(ctx: ActorContext[ServerContext], client: _Client, handle: WebhooksHandle,
                   webhook_id: str, queue: list[Pending]) -> None:
    home = ctx.shared.config.home
    store = ctx.ports["store"]
    try:
        for item in queue:
            status, error = await send(await client.get(), home, item.webhook, item.event)
            now = now_ms()
            if error is None:
                await write(store, lambda conn: webhook_rows.mark_delivered(conn, item.outbox_id, now), small=True)
                handle.delivered += 1
                continue
            attempts = item.attempts + 1
            next_at = None if attempts >= MAX_ATTEMPTS else now + int(retry_delay_s(attempts) * 1000)
            await write(store, lambda conn: webhook_rows.mark_failed(conn, item.outbox_id, webhook_id, error, next_at,
                                                                    now), small=True)
            if next_at is None:
                handle.gave_up += 1
                log.warning("webhook %s: gave up on event %s after %d attempts (%s)", webhook_id, item.event.id,
                            attempts, error)
            else:
                handle.failed_attempts += 1
                log.info("webhook %s: event %s attempt %d failed (%s); retrying in %.1f s", webhook_id,
                         item.event.id, attempts, error, (next_at - now) / 1000)
            return  # the rest of this endpoint's queue waits for the retry
    finally:
        handle.busy.discard(webhook_id)
        handle.poke()  # more may be queued for it
