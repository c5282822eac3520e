"""API tokens: create, list, revoke, and ``authenticate`` an ``Authorization`` header.

A token reads ``gpp_<ULID>_<secret>``. The ULID is the row's id without its ``tok_`` prefix,
so a presented token finds its row by key; the secret is ``secrets.token_urlsafe(32)`` and
only its hex SHA-256 is stored, compared with ``hmac.compare_digest``. The plaintext exists
only in ``create_token``'s return value: it is never stored, logged, or put in a message.

Scopes are ``read, write, agent, sdk, admin``; ``grants`` is the one place that says what a
set of scopes allows (``admin`` everything, ``write`` also ``read``).

An agent's token may carry ``TokenLimits`` (``gpuplaned.protocol.token_limits``): stored on its
row, carried by its cached row onto the ``Caller``, enforced on submit (``gpuplaned.service.api.budgets``);
listing a budgeted token shows its used and remaining GPU-hours.

Verified rows are cached in memory for ``CACHE_TTL_S`` so a burst of requests does not hit
SQLite each time; ``revoke_token`` drops them at once. The cache lives in a module-level
table weakly keyed by the daemon context, so it goes with its daemon (and a test's context)
without the context having to know about tokens. ``last_used_at`` is written at
most once per ``TOUCH_EVERY_S`` per token, without waiting for the store. A token's expiry is
a wall-clock date, judged by the context's ``wall_ms`` (which tests move by hand).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from gpuplaned.domain import gpu_budget
from gpuplaned.protocol import cursors
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.fields import field, say
from gpuplaned.protocol.ids import new_id
from gpuplaned.protocol.token_limits import TokenLimits
from gpuplaned.protocol.token_replies import SCOPES, TokenCreated, TokenInfo, TokenList, TokenReply
from gpuplaned.runtime.call import Reply
from gpuplaned.service import access
from gpuplaned.service.context_state import PerContext
from gpuplaned.store import budget_rows, token_rows
from gpuplaned.store.token_rows import TokenRow
from gpuplaned.store.writer import Write, write

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.tokens")

TOKEN_PREFIX = "gpp_"
ID_PREFIX = "tok_"
CACHE_TTL_S = 5.0
TOUCH_EVERY_S = 60.0
MAX_EXPIRES_IN_S = 10 * 366 * 86_400
MAX_CACHED = 1024

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_TOKEN = re.compile(r"gpp_([0-9A-HJKMNP-TV-Z]{26})_([A-Za-z0-9_-]{43})")
# Compared against when no row matches, so an unknown id costs what a wrong secret costs.
_NO_HASH = "0" * 64
_NAME_RULE = "must be 1-63 characters: letters, digits, '.', '_' or '-', starting with a letter or digit; got {value!r}"


def _info(row: TokenRow) -> TokenInfo:
    return TokenInfo(row.id, row.name, row.scopes, row.created_at, row.expires_at, row.last_used_at, row.revoked_at,
                     row.limits, job_id=row.job_id)


# --- scopes and validation ---------------------------------------------------------


def grants(scopes: Iterable[str], needed: str) -> bool:
    """Whether a token with ``scopes`` may do what needs ``needed``: ``admin`` implies every
    scope, ``write`` implies ``read``.

    Raises:
        ValueError: ``needed`` is not one of ``SCOPES`` (a caller's mistake).
    """
    if needed not in SCOPES:
        raise ValueError(f"unknown scope {needed!r}")
    held = set(scopes)
    return needed in held or "admin" in held or (needed == "read" and "write" in held)


def require_scope(token: TokenInfo, needed: str) -> None:
    """Raises:
        ApiError: ``forbidden`` naming the scope when ``token`` lacks it.
    """
    if not grants(token.scopes, needed):
        raise ApiError(ErrorCode.FORBIDDEN, f"token {token.name!r} lacks the {needed!r} scope this needs",
                       {"needed": needed, "scopes": list(token.scopes)})


def _bad(field: str, message: str, **details: Any) -> ApiError:
    return ApiError(ErrorCode.BAD_REQUEST, f"{field}: {message}", {"field": field, **details})


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _bad("name", say(_NAME_RULE, name))
    return name


def check_scopes(scopes: Any) -> tuple[str, ...]:
    """A non-empty list of scopes, returned without repeats in ``SCOPES`` order."""
    allowed = ", ".join(SCOPES)
    if isinstance(scopes, str) or not isinstance(scopes, (list, tuple)) or not scopes:
        raise _bad("scopes", f"must be a non-empty list of scopes ({allowed})", allowed=list(SCOPES))
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        shown = ", ".join(repr(s) if not isinstance(s, str) else s for s in unknown)
        raise _bad("scopes", f"unknown scope(s) {shown}; allowed: {allowed}", allowed=list(SCOPES))
    return tuple(s for s in SCOPES if s in scopes)


def _unknown_scopes(scopes: list[str]) -> str | None:
    unknown = [s for s in scopes if s not in SCOPES]
    return f"unknown scope(s) {', '.join(unknown)}; allowed: {', '.join(SCOPES)}" if unknown else None


@attrs.frozen(kw_only=True)
class TokenCreate:
    name: str = field(pattern=f"^{_NAME.pattern}$", message=_NAME_RULE)
    scopes: list[str] = field(min_items=1, check=_unknown_scopes, schema={"items": {"enum": list(SCOPES)}},
                              message=f"must be a non-empty list of scopes ({', '.join(SCOPES)})",
                              description="admin grants everything, write also grants read")
    expires_in_s: int | None = field(default=None, minimum=1, maximum=MAX_EXPIRES_IN_S,
                                     description="seconds from now; absent or null: never expires",
                                     message=f"must be a whole number of seconds from 1 to {MAX_EXPIRES_IN_S}, "
                                             "or null for a token that never expires; got {value!r}")
    limits: TokenLimits | None = field(default=None, description="an agent token's limits (GPUs, nodes, directories, "
                                                                 "queued jobs, GPU-hour budget); absent: none")


def parse_create(made: TokenCreate) -> tuple[str, tuple[str, ...], int | None]:
    """A ``POST /api/v1/tokens`` body as ``(name, scopes in SCOPES order, expires_in_ms)``; its
    ``limits`` are already checked by their class."""
    expires = made.expires_in_s
    return made.name, check_scopes(made.scopes), None if expires is None else expires * 1000


# --- the cache ------------------------------------------------------------------


class TokenCache:
    """Rows recently read, by id (with their secret's hash: never a secret), and when each
    token's use was last recorded. Times are trio's clock."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[TokenRow, float]] = {}
        self.touched: dict[str, float] = {}
        # Bumped by every revoke: a read that began before it must not cache what it read.
        self.generation = 0

    def get(self, token_id: str, now: float) -> TokenRow | None:
        found = self.rows.get(token_id)
        if found is None or now - found[1] >= CACHE_TTL_S:
            return None
        return found[0]

    def put(self, row: TokenRow, now: float, generation: int) -> None:
        if generation != self.generation:
            return
        if len(self.rows) >= MAX_CACHED:
            self.rows = {k: v for k, v in self.rows.items() if now - v[1] < CACHE_TTL_S}
        self.rows[row.id] = (row, now)

    def forget(self, token_id: str) -> None:
        self.rows.pop(token_id, None)
        self.generation += 1


_caches: PerContext[TokenCache] = PerContext(TokenCache)


def cache_of(shared: ServerContext) -> TokenCache:
    """The token cache of this daemon context (made on first use, gone with the context)."""
    return _caches.of(shared)


# --- the store ------------------------------------------------------------------


def _store(shared: ServerContext) -> Any:
    return access.store_port(shared, "API tokens")


def _readers(shared: ServerContext) -> Any:
    return access.readers(shared, "API tokens")


def hash_secret(secret: str) -> str:
    """The hex SHA-256 stored for a token's secret part."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret(token_id: str) -> tuple[str, str]:
    """A fresh secret for the token ``token_id``: ``(its plaintext gpp_<ULID>_<secret>, the hash
    to store)``."""
    secret = secrets.token_urlsafe(32)
    return f"{TOKEN_PREFIX}{token_id.removeprefix(ID_PREFIX)}_{secret}", hash_secret(secret)


async def create_token(shared: ServerContext, name: str, scopes: Iterable[str],
                       expires_in_ms: int | None = None, *,
                       limits: TokenLimits | None = None) -> TokenCreated:
    """Create a token.

    Args:
        name: 1-63 characters, unique among tokens not revoked.
        scopes: a non-empty subset of ``SCOPES``.
        expires_in_ms: how long from now until it stops working; None: never.
        limits: what its jobs may do beyond its scopes (``TokenLimits``); None: nothing more.

    Returns:
        The token, and its plaintext ``gpp_<ULID>_<secret>`` (``secret``): the only time it is seen.

    Raises:
        ApiError: ``bad_request`` naming the field; ``conflict`` when the name is taken.
    """
    name = check_name(name)
    scopes = check_scopes(list(scopes))
    if expires_in_ms is not None and (isinstance(expires_in_ms, bool) or not isinstance(expires_in_ms, int)
                                      or expires_in_ms <= 0):
        raise _bad("expires_in_s", f"must be a positive duration; got {expires_in_ms!r} ms")
    token_id = new_id("tok")
    plaintext, secret_hash = new_secret(token_id)
    created = shared.wall_ms()
    if limits is not None and limits == TokenLimits():
        limits = None  # every limit absent: none, so the token reads as unlimited everywhere
    row = TokenRow(token_id, name, secret_hash, scopes, created,
                   None if expires_in_ms is None else created + expires_in_ms, None, None, limits)
    await write(_store(shared), lambda conn: token_rows.insert_token(conn, row))
    log.info("created API token %s (%s) with scopes %s", token_id, name, ",".join(scopes))
    return TokenCreated(token=_info(row), secret=plaintext)


async def list_tokens(shared: ServerContext, limit: int = 100,
                      cursor: str | None = None) -> TokenList:
    """A page of tokens, revoked and expired ones included, newest first, and the next page's cursor."""
    before = cursors.decode("tokens", cursor, (str,))
    rows = await _readers(shared).run(
        lambda conn: token_rows.list_tokens(conn, limit + 1, before[0] if before else None))
    page, next_cursor = cursors.split_page("tokens", rows, limit, key=lambda r: (r.id,))
    infos = [_info(r) for r in page]
    budgeted = [i for i in infos if i.limits is not None and i.limits.gpu_hours is not None]
    if budgeted:
        now = shared.wall_ms()
        usages = await _readers(shared).run(
            lambda conn: {i.id: gpu_budget.usage(budget_rows.token_jobs(conn, i.id), i.limits, now) for i in budgeted})
        infos = [_with_usage(i, usages[i.id]) if i.id in usages else i for i in infos]
    return TokenList(tokens=infos, next_cursor=next_cursor)


def _with_usage(info: TokenInfo, used: gpu_budget.Usage) -> TokenInfo:
    assert info.limits is not None and info.limits.gpu_hours is not None
    return attrs.evolve(info, used_gpu_hours=round(used.used_gpu_hours, 6),
                        remaining_gpu_hours=round(max(0.0, info.limits.gpu_hours - used.committed_gpu_hours), 6))


async def revoke_token(shared: ServerContext, id_or_name: str) -> TokenReply:
    """Revoke a token by id, or by name (the one not revoked of that name). Revoking a revoked
    token changes nothing and returns it.

    Raises:
        ApiError: ``not_found`` when no token has this id or name.
    """
    now = shared.wall_ms()
    row = await write(_store(shared), lambda conn: token_rows.revoke_token(conn, id_or_name, now))
    if row is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no token {id_or_name!r}", {"token": id_or_name})
    cache_of(shared).forget(row.id)
    log.info("revoked API token %s (%s)", row.id, row.name)
    return TokenReply(token=_info(row))


# --- authentication --------------------------------------------------------------


def _unauthorized(message: str) -> ApiError:
    return ApiError(ErrorCode.UNAUTHORIZED, message)


def _bearer(header: str | None) -> str:
    if header is None or not header.strip():
        raise _unauthorized("missing Authorization header: send 'Authorization: Bearer <token>'")
    scheme, _, credentials = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise _unauthorized("the Authorization header must be 'Bearer <token>'")
    credentials = credentials.strip()
    if not credentials:
        raise _unauthorized("the Authorization header has no token after 'Bearer'")
    return credentials


async def authenticate(shared: ServerContext, authorization_header: str | None) -> TokenInfo:
    """The token an ``Authorization: Bearer gpp_...`` header presents, once verified.

    Messages never contain what was presented.

    Raises:
        ApiError: ``unauthorized`` when the header is missing or not a Bearer token, the token
            is malformed, unknown, revoked, or expired; ``unavailable`` when this daemon's role
            keeps no tokens.
    """
    match = _TOKEN.fullmatch(_bearer(authorization_header))
    if match is None:
        raise _unauthorized("malformed API token (expected gpp_<id>_<secret>, as `gpuplanectl token create` "
                            "prints it)")
    token_id, secret = ID_PREFIX + match[1], match[2]
    cache = cache_of(shared)
    row = cache.get(token_id, trio.current_time())
    if row is None:
        generation = cache.generation
        row = await _readers(shared).run(lambda conn: token_rows.get_token(conn, token_id))
        # A job's token is revoked by the store's transaction that ends its attempt, which no
        # cache hears of: it is read every time, so it stops working at once.
        if row is not None and row.job_id is None:
            cache.put(row, trio.current_time(), generation)
    matches = hmac.compare_digest(hash_secret(secret), row.secret_hash if row is not None else _NO_HASH)
    if row is None or not matches or row.revoked_at is not None:
        raise _unauthorized("unknown or revoked API token")
    if row.expires_at is not None and row.expires_at <= shared.wall_ms():
        raise _unauthorized(f"API token {row.name!r} has expired; create a new one with `gpuplanectl token create`")
    _touch(shared, cache, row.id)
    return _info(row)


def _touch(shared: ServerContext, cache: TokenCache, token_id: str) -> None:
    """Record the use, at most once per ``TOUCH_EVERY_S``, without waiting for the write: a
    full or closed store inbox skips it (the next use tries again)."""
    now = trio.current_time()
    last = cache.touched.get(token_id)
    if last is not None and now - last < TOUCH_EVERY_S:
        return
    used_at = shared.wall_ms()
    try:
        # Nobody waits on the reply: a failed write only loses this timestamp.
        _store(shared).send_nowait(Write(lambda conn: token_rows.touch_token(conn, token_id, used_at), Reply()))
    except (ApiError, trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
        return
    cache.touched[token_id] = now
