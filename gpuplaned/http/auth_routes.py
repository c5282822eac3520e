"""Routes for signing a browser in and out of the web UI (``gpuplaned.service.api.ui_sessions``).

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

from gpuplaned.http.idempotency import secret_reply
from gpuplaned.http.responses import ok
from gpuplaned.http.routes import Reply, Routes
from gpuplaned.protocol.auth_replies import LogoutReply, UiSessionReply
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service.api import ui_sessions
from gpuplaned.service.api.ui_sessions import COOKIE, CSRF_HEADER, LINK_SCOPES, LoginLink, LoginLinkCreate, LoginRequest

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


def set_session_cookie(response: Response, cookie: str, expires_at: int, now_ms: int) -> None:
    """``gpuplane_session``: HttpOnly, SameSite=Strict, Path=/, for as long as the session lasts
    (``now_ms``: the daemon's wall clock, ``ServerContext.wall_ms``)."""
    response.set_cookie(COOKIE, cookie, max_age=max(0, (expires_at - now_ms) // 1000), path="/",
                        secure=request.scheme == "https", httponly=True, samesite="Strict")
    response.headers["Cache-Control"] = "no-store"


def clear_session_cookie(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/", secure=request.scheme == "https", httponly=True, samesite="Strict")
    response.headers["Cache-Control"] = "no-store"


api = Routes("auth")
_COOKIE = (f"`{COOKIE}` (HttpOnly, SameSite=Strict, Path=/, Max-Age: the session's life; Secure over TLS). A request "
           f"it authenticates that is not GET/HEAD must carry `{CSRF_HEADER}: 1` (else 403).")

LOGIN = api.post("/api/v1/auth/login", "authLogin", "Sign a browser in with an API token: sets the session cookie",
                 Reply(200, UiSessionReply, "Signed in; the cookie is set.",
                       {"Set-Cookie": {"required": True, "schema": {"type": "string"},
                                       "description": f"the session cookie: {COOKIE}=..."}}),
                 errors=(400, 413, 415), body=LoginRequest,
                 description=f"The token is checked as the Authorization header would be (401 when it fails) and "
                             f"must hold read (403); the session gets its scopes and never outlives it. Only an "
                             f"application/json body is read (415 otherwise). The cookie: {_COOKIE}")
SESSION = api.get("/api/v1/auth/session", "getAuthSession", "Who is calling: the web UI's 'am I signed in?'",
                  Reply(200, UiSessionReply, "The caller's session or token."),
                  description="401 when neither a token nor a live session cookie comes with the request.")
LOGOUT = api.post("/api/v1/auth/logout", "authLogout", "Sign out: end the cookie's session and clear the cookie",
                  Reply(200, LogoutReply, "Signed out (a request without a session changes nothing)."), errors=(413,))
LINK = api.post("/api/v1/auth/login-links", "createLoginLink", "A one-time link that signs a browser in (gpuplanectl "
                                                               "ui)",
                Reply(201, LoginLink, "The link."), errors=(400, 413), body=LoginLinkCreate, body_required=False,
                description=f"Valid once, for [ui] login_link_ttl_s (120 s): GET /login?code=... sets the session "
                            f"cookie and redirects (303) to `next`. Such a session holds {' and '.join(LINK_SCOPES)}, "
                            f"never admin. 503 when the daemon has no HTTP front.")


async def require_json_login() -> None:
    """A sign-in's body must be JSON: what a cross-site form or ``text/plain`` post cannot be
    without a CORS preflight, which the daemon never grants.

    Raises:
        ApiError: unsupported_media_type (415) naming the Content-Type sent.
    """
    if request.method != LOGIN.method or request.url_rule is None or request.url_rule.rule != LOGIN.rule:
        return
    if request.mimetype != "application/json":
        await request.get_data()  # read, so the kept-alive connection stays usable
        sent = request.headers.get("Content-Type") or "none"
        raise ApiError(ErrorCode.UNSUPPORTED_MEDIA_TYPE, f"sign in with a JSON body (Content-Type: application/json); "
                                                         f"got Content-Type: {sent}",
                       {"content_type": sent, "expected": "application/json"})


def register(app: QuartTrio, shared: ServerContext) -> None:
    app.before_request(require_json_login)

    @LOGIN.on(app)
    async def auth_login(body: LoginRequest) -> Response:
        session, cookie = await ui_sessions.login_with_token(shared, ui_sessions.parse_login(body))
        response = ok(UiSessionReply(session=session))
        assert session.expires_at is not None  # a new browser session always ends
        set_session_cookie(response, cookie, session.expires_at, shared.wall_ms())
        return response

    @SESSION.on(app)
    async def auth_session() -> Response:
        return ok(UiSessionReply(session=ui_sessions.session_of(getattr(g, "caller", None))))

    @LOGOUT.on(app)
    async def auth_logout() -> Response:
        ended = await ui_sessions.logout(shared, request.cookies.get(COOKIE))
        response = ok(LogoutReply(logged_out=ended))
        clear_session_cookie(response)
        return response

    @LINK.on(app)
    async def auth_login_link(body: LoginLinkCreate) -> Response:
        link = ui_sessions.mint_login_code(shared, body.next)
        return secret_reply(ok(link, 201), "a one-time login link",
                            "If that reply was lost, the link expires unused by itself. ", expires_at=link.expires_at)
