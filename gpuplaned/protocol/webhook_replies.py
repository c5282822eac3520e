"""Webhook subscriptions as the API shows them (never a secret), and what a test delivery found."""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.reply_words import Ref
from gpuplaned.protocol.vocabulary import SEVERITIES

FORMATS = ("json", "ntfy", "bark", "slack")  # the bodies a subscription may ask for (gpuplaned.domain.webhooks)


@attrs.frozen
class WebhookInfo:
    """A subscription as the API shows it: never its secret."""

    id: str = doc("wh_<ULID>")
    url: str = doc("scheme://host/***: the path and query, a hook's credential, are never shown")
    events: tuple[str, ...]
    severity: str = doc(enum=SEVERITIES)
    format: str = doc(enum=FORMATS)
    signed: bool = doc("whether a secret signs its bodies")
    created_at: int = doc("ms since the epoch")
    pending: int = doc("notifications not yet delivered", minimum=0)
    delivered: int = doc(minimum=0)
    gave_up: int = doc("notifications given up after every retry failed", minimum=0)
    last_delivered_at: int | None = doc("ms since the epoch")
    last_error: str | None


@attrs.frozen
class WebhookTestResult:
    delivered: bool
    status: int | None = doc("the endpoint's HTTP status; null: no answer")
    error: str | None


@attrs.frozen(kw_only=True)
class WebhookReply:
    webhook: WebhookInfo


@attrs.frozen(kw_only=True)
class WebhookList:
    webhooks: list[WebhookInfo]


@attrs.frozen(kw_only=True)
class WebhookDeleted:
    deleted: Ref


@attrs.frozen(kw_only=True)
class WebhookTested:
    result: WebhookTestResult
