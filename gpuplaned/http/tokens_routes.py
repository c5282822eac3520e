"""Routes for API tokens (issue: API tokens). Over TCP they need the ``admin`` scope.

- ``POST /api/v1/tokens`` with ``{"name": str, "scopes": [str, ...], "expires_in_s": int | null}``
  (``expires_in_s`` optional: seconds from now, 1 to ~10 years; absent or null: never expires)
  -> 201 ``{"token": TokenInfo, "secret": "gpp_<id>_<secret>"}``. The secret is shown only here
  (``Cache-Control: no-store``; a repeat with the same ``Idempotency-Key`` is 409 naming the token).
- ``GET /api/v1/tokens`` -> ``{"tokens": [TokenInfo, ...]}``, oldest first, revoked ones included.
- ``POST /api/v1/tokens/{id_or_name}/revoke`` -> ``{"token": TokenInfo}``; 404 when unknown,
  and revoking a revoked token answers it unchanged.

A TokenInfo is ``{"id", "name", "scopes", "created_at", "expires_at", "last_used_at",
"revoked_at", "limits", "used_gpu_hours", "remaining_gpu_hours"}``, times in wall-clock ms
(null: never / not yet). ``limits`` (``TokenLimits``, optional in the create body) bound what an
agent's token may submit; a budgeted token's list entry shows its used and remaining GPU-hours.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response
from quart_trio import QuartTrio

from gpuplaned.http.idempotency import secret_reply
from gpuplaned.http.queries import Page
from gpuplaned.http.responses import ok
from gpuplaned.http.routes import Param, Reply, Routes
from gpuplaned.protocol.token_replies import TokenCreated, TokenList, TokenReply
from gpuplaned.service.api import tokens
from gpuplaned.service.api.tokens import TokenCreate

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


api = Routes("tokens")

CREATE = api.post("/api/v1/tokens", "createToken", "Create an API token for the HTTP front",
                  Reply(201, TokenCreated, "The token and its secret (shown only here)."), errors=(400, 409, 413),
                  body=TokenCreate)
LIST = api.get("/api/v1/tokens", "listTokens", "The tokens, newest first, revoked ones included",
               Reply(200, TokenList, "A page of tokens."), errors=(400,), query=Page)
REVOKE = api.post("/api/v1/tokens/<id_or_name>/revoke", "revokeToken", "Revoke a token (a revoked one is answered "
                                                                       "unchanged)",
                  Reply(200, TokenReply, "The revoked token."), errors=(404,),
                  params=(Param("id_or_name", "the token's id or name"),))


def register(app: QuartTrio, shared: ServerContext) -> None:
    @CREATE.on(app)
    async def create_token(body: TokenCreate) -> Response:
        name, scopes, expires_in_ms = tokens.parse_create(body)
        created = await tokens.create_token(shared, name, scopes, expires_in_ms, limits=body.limits)
        info = created.token
        return secret_reply(ok(created, 201), f"token {info.id} ({info.name!r})",
                            f"If that reply was lost, revoke the token (`gpuplanectl token revoke {info.id}`). ",
                            token_id=info.id)

    @LIST.on(app)
    async def list_tokens(query: Page) -> Response:
        return ok(await tokens.list_tokens(shared, query.limit, query.cursor or None))

    @REVOKE.on(app)
    async def revoke_token(id_or_name: str) -> Response:
        return ok(await tokens.revoke_token(shared, id_or_name))
