"""Routes for API tokens (issue: API tokens). Over TCP they need the ``admin`` scope.

- ``POST /api/v1/tokens`` with ``{"name": str, "scopes": [str, ...], "expires_in_s": int | null}``
  (``expires_in_s`` optional: seconds from now, 1 to ~10 years; absent or null: never expires)
  -> 201 ``{"token": TokenInfo, "secret": "gpp_<id>_<secret>"}``. The secret is shown only here
  (``Cache-Control: no-store``; a repeat with the same ``Idempotency-Key`` is 409 naming the token).
- ``GET /api/v1/tokens`` -> ``{"tokens": [TokenInfo, ...]}``, oldest first, revoked ones included.
- ``POST /api/v1/tokens/{id_or_name}/revoke`` -> ``{"token": TokenInfo}``; 404 when unknown,
  and revoking a revoked token answers it unchanged.

A TokenInfo is ``{"id", "name", "scopes", "created_at", "expires_at", "last_used_at",
"revoked_at"}``, times in wall-clock ms (null: never / not yet).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response, request
from quart_trio import QuartTrio

from gpuplaned.http.bodies import int_arg, json_body
from gpuplaned.http.idempotency import secret_reply
from gpuplaned.http.responses import ok
from gpuplaned.service import tokens

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext


def register(app: QuartTrio, shared: DaemonContext) -> None:
    @app.post("/api/v1/tokens")
    async def create_token() -> Response:
        name, scopes, expires_in_ms = tokens.parse_create(await json_body())
        info, secret = await tokens.create_token(shared, name, scopes, expires_in_ms)
        return secret_reply(ok({"token": info, "secret": secret}, 201), f"token {info.id} ({info.name!r})",
                            f"If that reply was lost, revoke the token (`gpuplanectl token revoke {info.id}`). ",
                            token_id=info.id)

    @app.get("/api/v1/tokens")
    async def list_tokens() -> Response:
        page, next_cursor = await tokens.list_tokens(shared, int_arg("limit", 100, 1, 10_000),
                                                     request.args.get("cursor"))
        return ok({"tokens": page, "next_cursor": next_cursor})

    @app.post("/api/v1/tokens/<id_or_name>/revoke")
    async def revoke_token(id_or_name: str) -> Response:
        return ok({"token": await tokens.revoke_token(shared, id_or_name)})
