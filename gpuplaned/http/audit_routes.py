"""The audit log's route, and the hook that records every REST write (issue 17).

- ``GET /api/v1/audit?token=NAME&limit=&cursor=`` (``admin`` on the HTTP front) ->
  ``{"entries": [AuditRow, ...], "next_cursor"}``, newest first. ``token`` filters by the token's
  name (``local`` for the control socket); it is a name, never a token's text (the app still
  refuses an API token's text in any URL).

``record_write`` runs after every answered request that is not a GET/HEAD/OPTIONS to a route
under ``/api/`` on either front (``/mcp`` is audited per tool call by the MCP server). It
records the route as ``METHOD /rule``, the path parameters, the query and the JSON body
(redacted by ``gpuplaned.service.api.audit``), and ``ok`` or the error code. A request refused
before anyone was authenticated (401) is not recorded: it did nothing, and a flood of them
must not fill the table. A request's first write carries its ``ok`` record into its own
transaction (``rider``), so no change is ever committed without its record; ``record_write``
then adds only what that record does not tell (a failure after the change, or a request that
wrote nothing).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import attrs
import trio
from quart import Response, g, request
from quart_trio import QuartTrio

from gpuplaned.http.bodies import DecodedBody
from gpuplaned.http.responses import ok
from gpuplaned.http.routes import Reply, Routes
from gpuplaned.http.scopes import is_public
from gpuplaned.protocol import bounded_json
from gpuplaned.protocol.audit_replies import AuditList, AuditRow
from gpuplaned.protocol.fields import UNSET, field
from gpuplaned.service.api import audit
from gpuplaned.service.api.ui_sessions import Caller
from gpuplaned.store.writer import Rider

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.audit")
api = Routes("audit")

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
AUDIT_RULE = "/api/v1/audit"
BODY_WAIT_S = 1.0
MAX_BODY_BYTES = 64 * 1024  # larger bodies are recorded by their size, not parsed


@attrs.frozen(kw_only=True)
class AuditQuery:
    token: str = field(default=UNSET, min_length=1, max_length=200, pattern="^(?!gpp_)",
                       description="only this token's calls, by name (local: the control socket's)",
                       message="must be a token's name (never its secret)")
    limit: int = field(default=100, minimum=1, maximum=1000, description="at most this many, newest first")
    cursor: str = field(default=UNSET, description="next_cursor of the previous page (opaque)")


LIST = api.get(AUDIT_RULE, "listAudit", "The audit log: every REST write and MCP tool call, newest first",
               Reply(200, AuditList, "A page of entries (arguments with secrets redacted)."), errors=(400,),
               query=AuditQuery)


def register(app: QuartTrio, shared: ServerContext) -> None:
    @LIST.on(app)
    async def list_audit(query: AuditQuery) -> Response:
        return ok(await audit.list_audit(shared, token_name=query.token or None, limit=query.limit,
                                         cursor=query.cursor or None))


# Who a request on the HTTP front to a public route (signing in) is: nobody yet.
PUBLIC_CALLER = Caller("public", (), None, "public", "no credentials")


async def record_write(shared: ServerContext, response: Response, *, http_front: bool) -> None:
    """Audit the request just answered with ``response`` when it is a REST write.

    ``http_front``: on the HTTP front a request without a caller was either to a public route
    (recorded as ``public``) or refused unauthenticated (not recorded); on the control socket
    the caller is the trusted local user (None).
    """
    try:
        await _record(shared, response, http_front)
    except Exception:  # noqa: BLE001 - the reply goes out whatever the audit does
        log.exception("audit log: could not record %s %s", request.method, request.path)


async def rider(*, http_front: bool) -> Rider | None:
    """The request's record for its first write to carry (``store.writer.Rider``): a change and
    the record of it commit together, and the reply waits for one transaction, not two. Made
    before the handler runs (the body is read by then); None for a read, or a request that is
    not recorded. ``record_write`` then records only what that record does not tell: a request
    that failed after its change was made, or one that changed nothing."""
    try:
        row = await _row(http_front, "ok", None)
    except Exception:  # noqa: BLE001 - the write goes on; record_write records the request then
        log.exception("audit log: could not prepare the record of %s %s", request.method, request.path)
        return None
    if row is None:
        return None
    g.audit_row = row  # record_write's, should no write carry it: the body is read and redacted once
    return Rider(audit.inserter(row))


async def _record(shared: ServerContext, response: Response, http_front: bool) -> None:
    carried = getattr(g, "store_rider", None)
    if carried is not None and carried.carried and response.status_code < 400:
        return  # recorded with its change, in that change's transaction
    outcome, detail = "ok", None
    if response.status_code >= 400:
        outcome, detail = await _error_of(response)
    prepared: AuditRow | None = getattr(g, "audit_row", None)
    row = (audit.answered(prepared, outcome, detail) if prepared is not None
           else await _row(http_front, outcome, detail))
    if row is not None:
        await audit.queue(shared, row)


async def _row(http_front: bool, outcome: str, detail: str | None) -> AuditRow | None:
    """The request's record (None: a read, or a request that is not recorded)."""
    rule = request.url_rule.rule if request.url_rule is not None else None
    if request.method in READ_METHODS or rule is None or not rule.startswith("/api/"):
        return None
    caller = getattr(g, "caller", None)
    if http_front and caller is None:
        if not is_public(rule):
            return None
        caller = PUBLIC_CALLER
    arguments: dict[str, Any] = {"path": dict(request.view_args or {}), "query": request.args.to_dict(flat=True)}
    body = await _json_body()
    if body is not None:
        # A sign-in's body is kept only as the object it must be (its token key is redacted).
        arguments["body"] = body if isinstance(body, dict) or not is_public(rule) else "[omitted]"
    return audit.row(caller=caller, via="rest", action=f"{request.method} {rule}", arguments=arguments,
                     outcome=outcome, detail=detail)


async def _json_body() -> Any:
    decoded: DecodedBody | None = getattr(g, "json_body", None)
    if decoded is not None:  # the route has read and decoded it already
        return f"[{decoded.size} bytes omitted]" if decoded.size > MAX_BODY_BYTES else decoded.value
    raw: bytes | str = b""
    try:
        with trio.move_on_after(BODY_WAIT_S):  # read already, unless the request was refused before its body
            raw = await request.get_data(cache=True)
    except Exception:  # noqa: BLE001 - too large, or cut off: the refusal is recorded without it
        return "[body not read]"
    if not raw:
        return None
    if len(raw) > MAX_BODY_BYTES:  # a metric batch or an import: its size says enough
        return f"[{len(raw)} bytes omitted]"
    try:
        return bounded_json.loads(raw)  # a hostile depth is "not JSON", never a RecursionError here
    except ValueError:  # UnicodeDecodeError and bounded_json.TooDeep too
        return f"[{len(raw)} bytes, not JSON]"


async def _error_of(response: Response) -> tuple[str, str | None]:
    try:
        error = json.loads(await response.get_data())["error"]
        return str(error["code"]), str(error.get("message") or "") or None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return f"http_{response.status_code}", None
