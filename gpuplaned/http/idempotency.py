"""``Idempotency-Key`` on POSTs: a retried request gets the first one's answer, not a second job.

The first request with a key reserves it (in a store write, so two racing requests cannot
both win) and its response, unless a 5xx, is kept for ``KEEP_MS``. A repeat with the same
body gets that response again, marked ``Idempotent-Replayed: true``; the same key with a
different body (or query) is 409, as is a repeat while the first is still being answered. Keys are
scoped to the caller (its token, or the local socket) and to the method and path.

A reply that carries a secret (a new token, a login link: ``secret_reply``) is never kept:
what is kept instead is a 409 naming what the first request made, so a repeat neither
replays the secret nor makes a second one. Requests to public routes (signing in) reserve
no key: they have no caller to scope it to.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from quart import Response, g, request
from quart_trio import QuartTrio

from gpuplaned.http.responses import error_response
from gpuplaned.http.scopes import is_public
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service import access
from gpuplaned.store import idempotency_rows
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext
    from gpuplaned.store.connection import Connection

HEADER = "Idempotency-Key"
KEEP_MS = 24 * 3_600_000
MAX_KEY = 255


def secret_reply(response: Response, made: str, if_lost: str, **details: Any) -> Response:
    """Mark ``response`` as carrying a secret: no cache keeps it (``Cache-Control: no-store``),
    nor does an ``Idempotency-Key``, whose repeat gets 409 naming ``made`` (what the first
    request created) and ``if_lost`` (what to do if its reply never arrived)."""
    response.headers["Cache-Control"] = "no-store"
    g.secret_reply = (made, if_lost, details)
    return response


def register(app: QuartTrio, shared: ServerContext) -> None:
    @app.before_request
    async def replay_or_reserve() -> Response | None:
        key = request.headers.get(HEADER)
        rule = request.url_rule.rule if request.url_rule is not None else None
        if key is None or request.method != "POST" or is_public(rule):
            return None
        body = await request.get_data()  # read even when refusing: keep-alive needs the body consumed
        if not 1 <= len(key) <= MAX_KEY or not key.isprintable():
            raise ApiError(ErrorCode.BAD_REQUEST, f"{HEADER}: 1 to {MAX_KEY} printable characters",
                           {"field": HEADER})
        scope = f"{getattr(g, 'token_id', None) or 'local'} POST {request.path}"
        # The query is part of the request: a dry run (?dry_run=true) and the real submit are two
        # requests, so one key for both is a 409, never the plan replayed as if it were the job.
        body_hash = hashlib.sha256(request.query_string + b"\n" + body).hexdigest()
        stored = await write(access.store_port(shared, "Idempotency-Key records"),
                             lambda conn, now=shared.wall_ms(): _reserve(conn, scope, key, body_hash, now))
        if stored is None:
            g.idempotency = (scope, key)
            return None
        status, body = stored
        response = Response(body, status=status, content_type="application/json")
        response.headers["Idempotent-Replayed"] = "true"
        return response

    @app.after_request
    async def remember(response: Response) -> Response:
        reserved = getattr(g, "idempotency", None)
        if reserved is None:
            return response
        scope, key = reserved
        status, body = response.status_code, None
        if status < 500:
            if "no-store" in response.headers.get("Cache-Control", ""):
                status, body = await _not_replayable(key)
            else:
                body = await response.get_data()
        # The actor's own port: the answer has happened, so its record waits for a store that
        # stopped just now rather than being lost.
        await write(shared.supervisor.ports["store"], lambda conn: _settle(conn, scope, key, status, body))
        return response


async def _not_replayable(key: str) -> tuple[int, bytes]:
    """What a repeat of a request whose reply carried a secret gets instead of that reply."""
    made, if_lost, details = getattr(g, "secret_reply", ("what it answered", "", {}))
    error = ApiError(ErrorCode.CONFLICT,
                     f"the first request with {HEADER} {key!r} made {made}; its reply carried a secret, which is "
                     f"shown only once and never kept, so it cannot be sent again. {if_lost}To make another, "
                     f"send a new {HEADER}.", {"field": HEADER, "made": made, **details})
    return error.code.http_status, await error_response(error).get_data()


def _reserve(conn: Connection, scope: str, key: str, body_hash: str, now: int) -> tuple[int, Any] | None:
    """None: reserved for this request. Else the stored (status, body) to replay.

    Raises:
        ApiError: conflict for a different body, or for a first request still in flight.
    """
    idempotency_rows.drop_before(conn, now - KEEP_MS)
    kept = idempotency_rows.find(conn, scope, key)
    if kept is None:
        idempotency_rows.reserve(conn, scope, key, body_hash, now)
        return None
    if kept.body_hash != body_hash:
        raise ApiError(ErrorCode.CONFLICT, f"{HEADER} {key!r} was used with a different request (body or query)",
                       {"field": HEADER})
    if kept.status is None:
        raise ApiError(ErrorCode.CONFLICT, f"the first request with {HEADER} {key!r} is still being answered; "
                       "retry shortly", {"field": HEADER})
    return kept.status, kept.response


def _settle(conn: Connection, scope: str, key: str, status: int, body: bytes | None) -> None:
    if body is None:  # a server error is not an answer to keep: a retry may do better
        idempotency_rows.forget(conn, scope, key)
    else:
        idempotency_rows.keep_answer(conn, scope, key, status, body)
