"""What a webhook sends: the body in each format, its HMAC signature, and when to try again.

Pure: the delivery actor (``gpuplaned.actors.webhooks``) and the test route render through
here, so a test delivery looks exactly like a real one.

Formats: ``json`` (the event as the API shows it), ``ntfy`` (plain text with ntfy's Title,
Priority and Tags headers), ``bark`` (Bark's JSON push: title, body, level, group) and
``slack`` (an incoming webhook's ``{"text": ...}``, also what Mattermost and Discord's
``/slack`` endpoint take).

With a secret, ``X-GPUPlane-Signature: sha256=<hex>`` is HMAC-SHA256 over
``"<X-GPUPlane-Timestamp>." + body``: a receiver recomputes it and checks the timestamp is
recent, so a captured request cannot be replayed later. Delivery is at least once: a
receiver dedupes on ``X-GPUPlane-Delivery`` (the event id).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
from collections.abc import Mapping
from typing import Any

import attrs

from gpuplaned.domain.event_types import with_kinds
from gpuplaned.protocol.vocabulary import SEVERITY_RANK

SIGNATURE_HEADER = "X-GPUPlane-Signature"
TIMESTAMP_HEADER = "X-GPUPlane-Timestamp"
DELIVERY_HEADER = "X-GPUPlane-Delivery"
EVENT_HEADER = "X-GPUPlane-Event"

FIRST_RETRY_S = 1.0
LONGEST_RETRY_S = 600.0
MAX_ATTEMPTS = 20  # ~2.5 h of retries with the cap above, then the notification is given up

_NTFY_PRIORITY = {"info": "3", "warning": "4", "critical": "5"}
_BARK_LEVEL = {"info": "active", "warning": "timeSensitive", "critical": "critical"}
_ICON = {"info": "information_source", "warning": "warning", "critical": "rotating_light"}


@attrs.frozen
class Outgoing:
    body: bytes
    headers: dict[str, str]


def title(event: Mapping[str, Any]) -> str:
    where = event.get("run_id") or event.get("job_id") or event.get("node_id")
    return f"GPUPlane {event['type']}" + (f" ({where})" if where else "")


def text(event: Mapping[str, Any]) -> str:
    return str(event.get("message") or event["type"])


def sign(secret: str, timestamp_ms: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp_ms}.".encode() + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def render(fmt: str, event: Mapping[str, Any], *, secret: str | None, now_ms: int) -> Outgoing:
    """The request for ``event`` (the API's JSON of an event) in ``fmt``, signed when ``secret``."""
    severity = str(event.get("severity", "info"))
    headers = {DELIVERY_HEADER: str(event["id"]), EVENT_HEADER: str(event["type"]),
               TIMESTAMP_HEADER: str(now_ms)}
    if fmt == "ntfy":
        body = text(event).encode()
        headers |= {"Content-Type": "text/plain; charset=utf-8", "Title": title(event),
                    "Priority": _NTFY_PRIORITY.get(severity, "3"),
                    "Tags": f"{_ICON.get(severity, 'bell')},{str(event['type']).lower()}"}
    else:
        payload: dict[str, Any]
        if fmt == "bark":
            payload = {"title": title(event), "body": text(event), "level": _BARK_LEVEL.get(severity, "active"),
                       "group": "gpuplane"}
        elif fmt == "slack":
            payload = {"text": f":{_ICON.get(severity, 'bell')}: *{title(event)}*: {text(event)}"}
        elif fmt == "json":
            payload = {"event": dict(event)}
        else:
            raise ValueError(f"no webhook format {fmt!r}")
        body = json.dumps(payload, separators=(",", ":")).encode()
        headers["Content-Type"] = "application/json"
    if secret:
        headers[SIGNATURE_HEADER] = sign(secret, now_ms, body)
    return Outgoing(body, headers)


def retry_delay_s(attempts: int, rng: random.Random | None = None) -> float:
    """How long to wait after the ``attempts``-th failure: doubling from ``FIRST_RETRY_S`` up to
    ``LONGEST_RETRY_S``, with "equal jitter" (half fixed, half random) so that endpoints that
    failed together do not all come back in the same instant."""
    ceiling = min(LONGEST_RETRY_S, FIRST_RETRY_S * 2 ** max(0, attempts - 1))
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


def matches(event_types: tuple[str, ...], least_severity: str, event_type: str, severity: str) -> bool:
    """The outbox trigger's rule (0017_job_failed_kinds.sql), for showing and testing: a
    subscription to JOB_FAILED hears OOM and JOB_TIMEOUT too (``event_types.with_kinds``)."""
    return (("*" in event_types or event_type in with_kinds(event_types))
            and SEVERITY_RANK.get(severity, 0) >= SEVERITY_RANK.get(least_severity, 0))
