"""Who is calling the HTTP front, and the web UI's browser sessions and one-time login links.

A request on the HTTP front is authenticated by ``Authorization: Bearer <API token>`` (which
wins when both are sent) or by the ``gpuplane_session`` cookie of a signed-in browser.
Browsers cannot put headers on an ``EventSource`` or a WebSocket, so the cookie works on
every route, streams included.

Sessions. The cookie value is ``secrets.token_urlsafe(32)``; the store keeps only its hex
SHA-256 (``gpuplaned.store.ui_session_rows``). A session lasts ``[ui] session_ttl_s`` (7 days by
default) and never outlives the token it was made from; signing out deletes it, and revoking
that token deletes it in the same transaction (a trigger), so it stops working at once.

- Signed in with an API token (``login_with_token``): the session holds that token's scopes.
  The token must hold ``read`` (an ``agent`` or ``sdk`` token has no business in a browser).
- Signed in with a login link (``redeem_login_code``): ``LINK_SCOPES``, read and write, never
  admin. The link is a bearer credential that passes through a terminal, maybe a clipboard
  and the browser's history; whoever holds it should be able to watch and run jobs, not mint
  tokens or stop the daemon. An admin session comes only from signing in with an admin token.

Cross-site requests. The cookie is ``SameSite=Strict`` and ``HttpOnly``. Cookies are not
bound to a port, though, so a page served from another port of the same host is same-site;
as a second line, a cookie-authenticated request that changes something must carry
``X-GPUPlane-CSRF: 1``, a header no other origin can add without a CORS preflight, which
the daemon never grants; a cookie-authenticated WebSocket handshake (no preflight there) must
come from a page of this origin (``Origin`` sent, and matching ``Host``).

Login links. ``mint_login_code`` (admin, or the trusted Unix socket) makes a one-time code,
valid ``[ui] login_link_ttl_s`` (120 s). The codes live in memory only, by hash: a restart
forgets them, which only means running ``gpuplanectl ui`` again. At most ``MAX_CODES`` wait
at once; past that the oldest goes.

Sessions read are cached for ``CACHE_TTL_S`` like tokens (a dashboard's burst of requests
does not hit SQLite each time); signing out drops the entry, and any token revocation (the
token cache's generation moves) drops them all. Expiry is checked on every request.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import attrs
import trio

from gpuplaned.protocol.auth_replies import UiSession
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.fields import doc, field, say
from gpuplaned.protocol.token_limits import TokenLimits
from gpuplaned.service import access
from gpuplaned.service.api import tokens
from gpuplaned.service.context_state import PerContext
from gpuplaned.store import ui_session_rows
from gpuplaned.store.ui_session_rows import UiSessionRow
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.ui")

COOKIE = "gpuplane_session"
CSRF_HEADER = "X-GPUPlane-CSRF"
LINK_SCOPES = ("read", "write")
CACHE_TTL_S = 5.0
MAX_CACHED = 1024
MAX_CODES = 256
MAX_NEXT = 2048

_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SECRET = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)
# A path on this origin: one leading "/", never "//" or "/\" (a browser reads both as another
# host), printable ASCII without spaces or backslashes (nothing a browser would strip or
# reinterpret). The same pattern goes into the OpenAPI document.
NEXT_PATTERN = r"/([!-.0-\[\]-~][!-\[\]-~]*)?"
_NEXT = re.compile(NEXT_PATTERN)


@attrs.frozen
class Caller:
    """Who a request on the HTTP front comes from, once authenticated."""

    via: str  # "token" or "cookie"
    scopes: tuple[str, ...]
    expires_at: int | None  # wall-clock ms; None: never
    key: str  # who, for per-caller state such as Idempotency-Key scopes
    name: str  # for messages: "token 'ci'", "this browser session"
    session_hash: str | None = None
    token_id: str | None = None  # the api_tokens id of a token caller, else None
    limits: TokenLimits | None = None  # a token's limits (gpuplaned.protocol.token_limits); None: none
    job_id: str | None = None  # a job's own credential: it writes to that job's runs (confined_callers)
    node_id: str | None = None  # an agent's host: its processes write to that node's jobs' runs

    @classmethod
    def of_token(cls, token: Any) -> Caller:
        """The caller an API token is (``tokens.TokenInfo`` or ``token_rows.TokenRow``: its id,
        name, scopes, expiry and limits; a job's SDK token also its job, to whose runs it is held)."""
        return cls("token", token.scopes, token.expires_at, token.id, f"token {token.name!r}", token_id=token.id,
                   limits=token.limits, job_id=getattr(token, "job_id", None))


@attrs.frozen
class LoginLink:
    code: str = doc("works once", pattern="^[A-Za-z0-9_-]{43}$")
    url: str = doc("the HTTP front's /login with the code: open it in a browser",
                   pattern="^https?://[^/]+/login[?]code=[A-Za-z0-9_-]{43}$")
    expires_at: int = doc("when the link stops working")


@attrs.frozen
class _Code:
    deadline: float  # trio's clock
    next_path: str


class _UiState:
    """One daemon's pending login codes (by hash) and recently read sessions."""

    def __init__(self) -> None:
        self.codes: dict[str, _Code] = {}
        self.rows: dict[str, tuple[UiSessionRow, float]] = {}
        self.generation = 0  # bumped by every sign-out: a read begun before must not be cached
        self.token_generation = 0

    def sync(self, token_generation: int) -> None:
        """Drop every cached session when a token was revoked since they were read."""
        if token_generation != self.token_generation:
            self.rows.clear()
            self.token_generation = token_generation
            self.generation += 1

    def get(self, id_hash: str, now: float) -> UiSessionRow | None:
        found = self.rows.get(id_hash)
        if found is None or now - found[1] >= CACHE_TTL_S:
            return None
        return found[0]

    def put(self, row: UiSessionRow, now: float, generation: int) -> None:
        if generation != self.generation:
            return
        if len(self.rows) >= MAX_CACHED:
            self.rows = {k: v for k, v in self.rows.items() if now - v[1] < CACHE_TTL_S}
        self.rows[row.id_hash] = (row, now)

    def forget(self, id_hash: str) -> None:
        self.rows.pop(id_hash, None)
        self.generation += 1


_states: PerContext[_UiState] = PerContext(_UiState)


def _state_of(shared: ServerContext) -> _UiState:
    return _states.of(shared)


def _unauthorized(message: str) -> ApiError:
    return ApiError(ErrorCode.UNAUTHORIZED, message)


def _bad(field: str, message: str) -> ApiError:
    return ApiError(ErrorCode.BAD_REQUEST, f"{field}: {message}", {"field": field})


# --- authenticating a request -------------------------------------------------------------


async def authenticate(shared: ServerContext, *, authorization: str | None, cookie: str | None, method: str,
                       csrf: str | None = None, websocket: bool = False, origin: str | None = None,
                       host: str | None = None) -> Caller:
    """The caller of one request on the HTTP front.

    Args:
        authorization: the ``Authorization`` header; it wins over the cookie when both come.
        cookie: the ``gpuplane_session`` cookie's value.
        csrf: the ``X-GPUPlane-CSRF`` header, which a cookie-authenticated request other
            than GET/HEAD/OPTIONS must send as ``1``.
        websocket: a WebSocket handshake: with a cookie, ``origin`` must be sent and name ``host``.

    Raises:
        ApiError: ``unauthorized`` for no credentials, a bad token, or an unknown or expired
            session; ``forbidden`` for a cookie without the CSRF header, or from another origin.
    """
    if authorization is not None or not cookie:
        return Caller.of_token(await tokens.authenticate(shared, authorization))
    row = await _session_row(shared, cookie)
    if websocket:
        # A browser always sends Origin on a WebSocket handshake; one without it is not a page
        # of ours, so the cookie it carries vouches for nothing.
        if origin is None or host is None or urlsplit(origin).netloc.lower() != host.lower():
            raise ApiError(ErrorCode.FORBIDDEN, "a WebSocket signed in by cookie must come from a page this daemon "
                                                f"served (its Origin is {'missing' if origin is None else 'another'}; "
                                                "agents sign in with Authorization: Bearer)", {"reason": "origin"})
    elif method.upper() not in _READ_METHODS and csrf != "1":
        raise ApiError(ErrorCode.FORBIDDEN, f"a request signed in by the session cookie that changes something "
                                            f"must send the header {CSRF_HEADER}: 1",
                       {"reason": "csrf", "header": CSRF_HEADER})
    return Caller("cookie", row.scopes, row.expires_at, f"uis_{row.id_hash[:16]}", "this browser session",
                  row.id_hash)


def require_scope(caller: Caller, needed: str) -> None:
    """Raises:
        ApiError: ``forbidden`` naming the scope when ``caller`` lacks it.
    """
    if not tokens.grants(caller.scopes, needed):
        raise ApiError(ErrorCode.FORBIDDEN, f"{caller.name} lacks the {needed!r} scope this needs",
                       {"needed": needed, "scopes": list(caller.scopes)})


def session_of(caller: Caller | None) -> UiSession:
    """What ``GET /api/v1/auth/session`` shows; ``caller`` None: the trusted control endpoint."""
    if caller is None:
        return UiSession(None, ("admin",), "local")
    return UiSession(caller.expires_at, caller.scopes, caller.via)


async def _session_row(shared: ServerContext, cookie: str) -> UiSessionRow:
    expired = _unauthorized("the web UI session has ended (signed out, expired, or its token was revoked); "
                            "sign in again")
    if not _SECRET.fullmatch(cookie):
        raise expired
    id_hash = tokens.hash_secret(cookie)
    state = _state_of(shared)
    state.sync(tokens.cache_of(shared).generation)
    row = state.get(id_hash, trio.current_time())
    if row is None:
        generation = state.generation
        row = await _readers(shared).run(lambda conn: ui_session_rows.get_session(conn, id_hash))
        state.sync(tokens.cache_of(shared).generation)
        if row is not None:
            state.put(row, trio.current_time(), generation)
    if row is None or row.expires_at <= shared.wall_ms():
        raise expired
    return row


# --- signing in and out ---------------------------------------------------------------------


def _readers(shared: ServerContext) -> Any:
    return access.readers(shared, "web UI sessions")


def _store(shared: ServerContext) -> Any:
    return access.store_port(shared, "web UI sessions")


_TOKEN_RULE = "is required: an API token (gpp_...), as `gpuplanectl token create` prints it"
_NEXT_RULE = (f"must be a path on this server such as /jobs/job_123 (starting with one '/', no spaces or "
              f"backslashes, at most {MAX_NEXT} characters); got {{value!r}}")


@attrs.frozen(kw_only=True)
class LoginRequest:
    token: str = field(min_length=1, pattern="[^ \\t\\n\\r]", message=_TOKEN_RULE,
                       description="an API token (gpp_...) holding at least read")


@attrs.frozen(kw_only=True)
class LoginLinkCreate:
    next: str = field(default="/", max_length=MAX_NEXT, pattern=f"^{NEXT_PATTERN}$", message=_NEXT_RULE,
                      description="a path on this server to land on, such as /jobs/job_123; default /")


def parse_login(body: LoginRequest) -> str:
    """The token of a ``POST /api/v1/auth/login`` body ``{"token": "gpp_..."}``."""
    return body.token.strip()


async def _new_session(shared: ServerContext, origin: str, token_id: str | None, scopes: Iterable[str],
                       cap_ms: int | None) -> tuple[UiSession, str]:
    cookie = secrets.token_urlsafe(32)
    created = shared.wall_ms()
    expires = created + shared.config.ui.session_ttl_s * 1000
    if cap_ms is not None:
        expires = min(expires, cap_ms)
    row = UiSessionRow(tokens.hash_secret(cookie), origin, token_id, tuple(scopes), created, expires)
    await write(_store(shared), lambda conn: ui_session_rows.insert_session(conn, row))
    log.info("a browser signed in to the web UI (%s%s; scopes %s)", origin,
             f" {token_id}" if token_id else "", ",".join(row.scopes))
    return UiSession(row.expires_at, row.scopes, "cookie"), cookie


async def login_with_token(shared: ServerContext, token_text: str) -> tuple[UiSession, str]:
    """Check an API token as the ``Authorization`` header would be, and open a session with its
    scopes.

    Returns:
        The session, and the cookie value: the only time it is seen.

    Raises:
        ApiError: ``unauthorized`` for a malformed, unknown, revoked or expired token;
            ``forbidden`` when it lacks ``read``, or has limits (``TokenLimits``).
    """
    token = await tokens.authenticate(shared, f"Bearer {token_text}")
    if not tokens.grants(token.scopes, "read"):
        raise ApiError(ErrorCode.FORBIDDEN, f"token {token.name!r} cannot sign in to the web UI: it needs the "
                                            "'read' scope (or write, or admin)",
                       {"needed": "read", "scopes": list(token.scopes)})
    if token.limits is not None:  # a session would carry its scopes but not its limits
        raise ApiError(ErrorCode.FORBIDDEN, f"token {token.name!r} has limits (an agent's capability token): it "
                                            "cannot sign in to the web UI", {"reason": "limited_token"})
    return await _new_session(shared, "token", token.id, token.scopes, token.expires_at)


async def logout(shared: ServerContext, cookie: str | None) -> bool:
    """End the session ``cookie`` names; whether there was one."""
    if not cookie or not _SECRET.fullmatch(cookie):
        return False
    id_hash = tokens.hash_secret(cookie)
    ended = await write(_store(shared), lambda conn: ui_session_rows.delete_session(conn, id_hash))
    _state_of(shared).forget(id_hash)
    if ended:
        log.info("a browser signed out of the web UI")
    return ended


# --- login links ------------------------------------------------------------------------------


def check_next(value: Any) -> str:
    """A path on this origin to land on after a login link; anything else is refused.

    Raises:
        ApiError: ``bad_request`` for an absolute or protocol-relative URL, a backslash,
            spaces or control characters, or more than ``MAX_NEXT`` characters.
    """
    if value is None:
        return "/"
    if not isinstance(value, str) or len(value) > MAX_NEXT or not _NEXT.fullmatch(value):
        raise _bad("next", say(_NEXT_RULE, value))
    return value


def _front_url(shared: ServerContext) -> str:
    try:
        handle = shared.supervisor.handle("http")
    except KeyError:
        handle = None
    url = handle.url if handle is not None else None
    if url is None:
        raise ApiError(ErrorCode.UNAVAILABLE, "the web UI is served on the HTTP front, which is off (--no-http, "
                                              "or http = \"off\") or not listening (see `gpuplanectl status`)",
                       {"reason": "no_http_front"})
    return browser_url(url)


def browser_url(front_url: str) -> str:
    """``http://HOST:PORT`` as a browser on this machine reaches it: a front listening on every
    address (0.0.0.0, ::) is reached on loopback."""
    parts = urlsplit(front_url)
    host = parts.hostname or "127.0.0.1"
    if host == "0.0.0.0":
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    shown = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{shown}:{parts.port}"


def mint_login_code(shared: ServerContext, next_path: str = "/") -> LoginLink:
    """A one-time login link to the web UI, for ``gpuplanectl ui``.

    Raises:
        ApiError: ``unavailable`` when the HTTP front is off or not listening.
    """
    base = _front_url(shared)
    state = _state_of(shared)
    now = trio.current_time()
    state.codes = {h: c for h, c in state.codes.items() if c.deadline > now}
    while len(state.codes) >= MAX_CODES:
        del state.codes[next(iter(state.codes))]
    code = secrets.token_urlsafe(32)
    ttl = shared.config.ui.login_link_ttl_s
    state.codes[tokens.hash_secret(code)] = _Code(now + ttl, check_next(next_path))
    log.info("made a web UI login link (valid %d s, once)", ttl)
    return LoginLink(code, f"{base}/login?code={code}", shared.wall_ms() + ttl * 1000)


async def redeem_login_code(shared: ServerContext, code: str | None) -> tuple[UiSession, str, str] | None:
    """Use a login link's code (once): the new session, its cookie value, and where to land.
    None when the code is unknown, used or expired."""
    if not code or not _SECRET.fullmatch(code):
        return None
    state = _state_of(shared)
    found = state.codes.pop(tokens.hash_secret(code), None)  # gone before any await: used once
    if found is None or found.deadline <= trio.current_time():
        return None
    session, cookie = await _new_session(shared, "link", None, LINK_SCOPES, None)
    return session, cookie, found.next_path
