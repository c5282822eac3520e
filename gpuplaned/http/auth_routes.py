"""Routes for signing a browser in and out of the web UI (``gpuplaned.service.ui_sessions``).

- ``POST /api/v1/auth/login`` ``{"token": "gpp_..."}`` (no credentials needed) -> 200
  ``{"session": UiSession}`` and ``Set-Cookie: gpuplane_session=...; HttpOnly; SameSite=Strict;
  Path=/; Max-Age=...`` (plus ``Secure`` over TLS). A wrong token is 401; one without ``read`` 403.
- ``GET /api/v1/auth/session`` -> ``{"session": UiSession}`` for whoever is calling (401 when
  nobody: the UI's "am I signed in?").
- ``POST /api/v1/auth/logout`` (``read``) -> ``{"logged_out": bool}``: deletes the cookie's
  session and clears the cookie.
- ``POST /api/v1/auth/login-links`` ``{"next": "/path"}`` (optional; ``admin``, or the Unix
  socket) -> 201 ``{"code", "url", "expires_at"}``: a one-time link, ``url`` on the HTTP front's
  bound address; 503 when there is no HTTP front. ``GET /login?code=`` (``ui_routes``) uses it.
  Never kept for an ``Idempotency-Key``: a repeat is 409.

A UiSession is ``{"expires_at": ms | null, "scopes": [...], "via": "cookie" | "token" | "local"}``:
how this request was authenticated (local: the trusted control socket).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response, g, request
from quart_trio import QuartTrio

from gpuplaned.http.bodies import json_body
from gpuplaned.http.idempotency import secret_reply
from gpuplaned.http.responses import ok
from gpuplaned.service import ui_sessions
from gpuplaned.service.registry import now_ms
from gpuplaned.service.ui_sessions import COOKIE

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext


def set_session_cookie(response: Response, cookie: str, expires_at: int) -> None:
    """``gpuplane_session``: HttpOnly, SameSite=Strict, Path=/, for as long as the session lasts."""
    response.set_cookie(COOKIE, cookie, max_age=max(0, (expires_at - now_ms()) // 1000), path="/",
                        secure=request.scheme == "https", httponly=True, samesite="Strict")
    response.headers["Cache-Control"] = "no-store"


def clear_session_cookie(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/", secure=request.scheme == "https", httponly=True, samesite="Strict")
    response.headers["Cache-Control"] = "no-store"


def register(app: QuartTrio, shared: DaemonContext) -> None:
    @app.post("/api/v1/auth/login")
    async def auth_login() -> Response:
        token = ui_sessions.parse_login(await json_body())
        session, cookie = await ui_sessions.login_with_token(shared, token)
        response = ok({"session": session})
        assert session.expires_at is not None  # a new browser session always ends
        set_session_cookie(response, cookie, session.expires_at)
        return response

    @app.get("/api/v1/auth/session")
    async def auth_session() -> Response:
        return ok({"session": ui_sessions.session_of(getattr(g, "caller", None))})

    @app.post("/api/v1/auth/logout")
    async def auth_logout() -> Response:
        ended = await ui_sessions.logout(shared, request.cookies.get(COOKIE))
        response = ok({"logged_out": ended})
        clear_session_cookie(response)
        return response

    @app.post("/api/v1/auth/login-links")
    async def auth_login_link() -> Response:
        raw = await request.get_data()
        next_path = ui_sessions.parse_link(await json_body() if raw.strip() else None)
        link = ui_sessions.mint_login_code(shared, next_path)
        return secret_reply(ok(link, 201), "a one-time login link",
                            "If that reply was lost, the link expires unused by itself. ", expires_at=link.expires_at)
