"""Routes for webhooks (issue 16, notifications). Over TCP they need the ``admin`` scope: a
Slack or Bark URL is a credential of its own (``gpuplaned.http.scopes``).

- ``POST /api/v1/webhooks`` ``{"url", "events": [TYPE, ...] | ["*"], "severity", "format", "secret"}``
  -> 201 ``{"webhook": Webhook}``; the secret is never shown back (``"signed": true``).
- ``GET /api/v1/webhooks`` -> ``{"webhooks": [Webhook, ...]}``, oldest first, with delivery counts.
- ``DELETE /api/v1/webhooks/{id}`` -> ``{"deleted": {"id"}}``; its notifications not yet sent go with it.
- ``POST /api/v1/webhooks/{id}/test`` -> ``{"result": {"delivered", "status", "error"}}``: a
  ``WEBHOOK_TEST`` notification sent now, outside the outbox, rendered and signed like any other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response
from quart_trio import QuartTrio

from gpuplaned.http.responses import ok
from gpuplaned.http.routes import Param, Reply, Routes
from gpuplaned.protocol.webhook_replies import WebhookDeleted, WebhookList, WebhookReply, WebhookTested
from gpuplaned.service.api import webhooks
from gpuplaned.service.api.webhooks import WebhookCreate

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


api = Routes("webhooks")
_ID = Param("webhook_id", "the webhook's id (wh_...)")

CREATE = api.post("/api/v1/webhooks", "createWebhook", "Subscribe a URL to events",
                  Reply(201, WebhookReply, "The subscription (its secret is never shown back)."),
                  errors=(400, 413), body=WebhookCreate)
LIST = api.get("/api/v1/webhooks", "listWebhooks", "The webhook subscriptions, with delivery counts",
               Reply(200, WebhookList, "The subscriptions, oldest first."))
DELETE = api.delete("/api/v1/webhooks/<webhook_id>", "deleteWebhook", "Remove a subscription",
                    Reply(200, WebhookDeleted, "It is gone, with its notifications not yet sent."), errors=(404,),
                    params=(_ID,))
TEST = api.post("/api/v1/webhooks/<webhook_id>/test", "testWebhook", "Send a test notification now",
                Reply(200, WebhookTested, "How the endpoint answered."), errors=(404,), params=(_ID,))


def register(app: QuartTrio, shared: ServerContext) -> None:
    @CREATE.on(app)
    async def create_webhook(body: WebhookCreate) -> Response:
        return ok(await webhooks.create_webhook(shared, body), 201)

    @LIST.on(app)
    async def list_webhooks() -> Response:
        return ok(await webhooks.list_webhooks(shared))

    @DELETE.on(app)
    async def delete_webhook(webhook_id: str) -> Response:
        await webhooks.delete_webhook(shared, webhook_id)
        return ok({"deleted": {"id": webhook_id}})

    @TEST.on(app)
    async def test_webhook(webhook_id: str) -> Response:
        return ok(await webhooks.test_webhook(shared, webhook_id))
