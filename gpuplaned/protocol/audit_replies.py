"""The audit log as the API shows it: who called what, through which door, and how it ended."""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.protocol.fields import doc

# public: a sign-in, before any credentials; job: a job's own process on the control socket
# (its token_name is "job:<id>"); node: a process on an agent's host (gpuplaned.service.api.confined_callers).
CALLER_KINDS = ("token", "cookie", "local", "public", "job", "node")
VIAS = ("rest", "mcp")


@attrs.frozen
class AuditRow:
    id: int = doc("the row's number, in the order recorded")
    ts: int = doc("ms since the epoch, when the call was answered")
    caller_kind: str = doc("how the caller was authenticated", enum=CALLER_KINDS)
    token_id: str | None = doc("the API token's id (token callers, and browser sessions made from one)")
    token_name: str | None = doc("the API token's name, or 'local' for the control socket")
    via: str = doc(enum=VIAS)
    action: str = doc("REST: the route, as 'METHOD /rule'; MCP: the tool's name, or tasks/cancel")
    arguments: dict[str, Any] = doc("path and query parameters and the body (REST) or the tool's arguments, "
                                    "secrets redacted")
    outcome: str = doc("ok, or the error code")
    detail: str | None = doc("the error's message, when it failed")


@attrs.frozen(kw_only=True)
class AuditList:
    entries: list[AuditRow] = doc("newest first")
    next_cursor: str | None = doc("pass as cursor for the next page; null: no more")
