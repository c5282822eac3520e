"""The audit log: every REST write (either front) and every MCP tool call, once answered.

``record`` is what the REST hook (``gpuplaned.http.app``) and the MCP server call. It redacts
the arguments (``redact``), queues the row on the store's writer without waiting for the
commit, and never raises: an audit that cannot be written is logged, and the reply goes on.
Only when the store's inbox is full does it wait, at most ``QUEUE_WAIT_S``.

Redacted, wherever they are in the arguments: the values of keys that name a secret
(``SECRET_KEY``: token, key, secret, password, authorization), webhook and other URLs (only
their scheme and host are kept: a Slack or Discord hook's path is its secret), every value of a
job's ``env`` and ``secret_env`` (names are kept: an env value may be a secret whatever its
name), a URL's password anywhere in a string (``--db=postgres://u:***@h``), and any string
that looks like an API token. Arguments past ``MAX_ARGUMENTS_CHARS`` keep their
shape's first level only (a metric batch is not worth keeping whole).

Rows older than ``[tokens] audit_keep_days`` are dropped by ``prune`` (the policies actor's
pass), so the table cannot grow forever.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import attrs
import trio

from gpuplaned.domain.secret_values import mask_url_passwords
from gpuplaned.protocol import cursors
from gpuplaned.protocol.audit_replies import AuditList, AuditRow
from gpuplaned.protocol.errors import ApiError
from gpuplaned.runtime.call import Reply
from gpuplaned.service import access
from gpuplaned.service.link.registry import now_ms
from gpuplaned.store import audit_rows
from gpuplaned.store.writer import Write, write

if TYPE_CHECKING:
    from gpuplaned.service.api.ui_sessions import Caller
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.audit")

REDACTED = "[redacted]"
SECRET_KEY = re.compile("TOKEN|KEY|SECRET|PASSWORD|AUTHORIZATION", re.IGNORECASE)
_API_TOKEN = re.compile(r"gpp_[0-9A-Za-z]{26}_[A-Za-z0-9_-]{43}")
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
ENV_KEYS = ("env", "secret_env")  # a job's variables: every value goes, the names stay
MAX_ARGUMENTS_CHARS = 8192
MAX_DETAIL_CHARS = 1000
QUEUE_WAIT_S = 1.0


def redact(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``arguments`` with every secret replaced by ``REDACTED`` (see the module doc)."""
    return {str(k): _value(str(k), v) for k, v in arguments.items()}


def _value(key: str, value: Any) -> Any:
    if key.lower() in ENV_KEYS and isinstance(value, Mapping):
        return {str(name): REDACTED for name in value}
    if SECRET_KEY.search(key):
        return REDACTED if value is not None else None
    if isinstance(value, Mapping):
        return redact(value)
    if isinstance(value, (list, tuple)):
        return [_value(key, item) for item in value]
    if isinstance(value, str):
        return _text(value)
    return value


def _text(value: str) -> str:
    value = mask_url_passwords(_API_TOKEN.sub(REDACTED, value))
    if _URL.match(value):
        parts = urlsplit(value)
        host = parts.hostname or ""
        return f"{parts.scheme}://{host}/{REDACTED}" if (parts.path not in ("", "/") or parts.query
                                                        or parts.username or parts.password) else value
    return value


def _bounded(arguments: dict[str, Any]) -> dict[str, Any]:
    if len(json.dumps(arguments, default=str)) <= MAX_ARGUMENTS_CHARS:
        return arguments
    return {k: v if not isinstance(v, (Mapping, list, tuple)) or len(json.dumps(v, default=str)) < 512
            else f"[{type(v).__name__} of {len(v)} omitted]" for k, v in arguments.items()}


def _who(caller: Caller | None) -> tuple[str, str | None, str | None]:
    """(caller kind, token id, token name) of a caller; None is the trusted local socket."""
    if caller is None:
        return "local", None, "local"
    if caller.via == "public":
        return "public", None, None
    if caller.via == "token":
        return "token", caller.token_id or caller.key, caller.name.removeprefix("token ").strip("'")
    if caller.token_id is None:  # a job's process ("job:<id>"), or an agent's host ("node:<id>")
        return caller.via, None, caller.key
    return caller.via, caller.token_id, None


async def record(shared: ServerContext, *, caller: Caller | None, via: str, action: str,
                 arguments: Mapping[str, Any], outcome: str, detail: str | None = None) -> None:
    """Record one answered call. Never raises into the caller's path; waits only while the
    store's inbox is full (at most ``QUEUE_WAIT_S``).

    Args:
        via: "rest" or "mcp".
        action: the route's "METHOD /rule", or the MCP tool's name.
        arguments: as received; redacted here.
        outcome: "ok" or the error code.
    """
    try:
        audit_row = row(caller=caller, via=via, action=action, arguments=arguments, outcome=outcome, detail=detail)
    except Exception:  # noqa: BLE001 - an audit failure must never fail the call it records
        log.exception("audit log: could not record %s %s", via, action)
        return
    await queue(shared, audit_row)


def row(*, caller: Caller | None, via: str, action: str, arguments: Mapping[str, Any], outcome: str,
        detail: str | None = None) -> AuditRow:
    """The row that records one call (arguments redacted and bounded); see ``record``."""
    kind, token_id, token_name = _who(caller)
    return AuditRow(0, now_ms(), kind, token_id, token_name, via, action, _bounded(redact(arguments)), outcome,
                    _detail(detail))


def answered(audit_row: AuditRow, outcome: str, detail: str | None) -> AuditRow:
    """``audit_row`` as its call was answered: now, with ``outcome`` and ``detail``."""
    return attrs.evolve(audit_row, ts=now_ms(), outcome=outcome, detail=_detail(detail))


def _detail(detail: str | None) -> str | None:
    return detail[:MAX_DETAIL_CHARS] if detail else None


def inserter(audit_row: AuditRow) -> Callable[[Any], None]:
    """``audit_row``'s insert, for a write to run in its own transaction (``store.writer.Rider``)."""
    return lambda conn: audit_rows.insert(conn, audit_row)


async def queue(shared: ServerContext, audit_row: AuditRow) -> None:
    """Queue ``audit_row`` on the store's writer without waiting for the commit; never raises."""
    via, action = audit_row.via, audit_row.action
    try:
        port = access.store_port(shared, "the audit log")
        message = Write(inserter(audit_row), Reply(), small=True)
        try:
            port.send_nowait(message)
        except trio.WouldBlock:
            with trio.move_on_after(QUEUE_WAIT_S) as waited:
                await port.port.send(message)
            if waited.cancelled_caught:
                log.warning("audit log: store busy, dropped the record of %s %s", via, action)
    except (ApiError, trio.ClosedResourceError, trio.BrokenResourceError) as error:
        log.warning("audit log: could not record %s %s: %s", via, action, error)
    except Exception:  # noqa: BLE001 - an audit failure must never fail the call it records
        log.exception("audit log: could not record %s %s", via, action)


async def list_audit(shared: ServerContext, *, token_name: str | None, limit: int,
                     cursor: str | None) -> AuditList:
    """A page of the log, newest first, and the next page's cursor (None: no more)."""
    before = cursors.decode("audit", cursor, (int,))
    rows = await access.readers(shared, "the audit log").run(
        lambda conn: audit_rows.page(conn, token_name=token_name, limit=limit + 1,
                                     before_id=before[0] if before else None))
    entries, next_cursor = cursors.split_page("audit", rows, limit, key=lambda r: (r.id,))
    return AuditList(entries=entries, next_cursor=next_cursor)


async def prune(shared: ServerContext) -> int:
    """Drop the rows older than ``[tokens] audit_keep_days``; how many went."""
    cutoff = now_ms() - int(shared.config.tokens.audit_keep_days * 86_400_000)
    return await write(access.store_port(shared, "the audit log"), lambda conn: audit_rows.drop_before(conn, cutoff))
