"""API tokens in process: a real store actor and SQLite file, the service, and the routes
through the quart-trio test client."""

from __future__ import annotations

import hashlib
import hmac
import time

import attrs
import pytest
import trio
from inprocess import daemon_context

from gpuplaned.actors import store

from gpuplaned.http.app import create_app
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.token_replies import TokenCreated, TokenList
from gpuplaned.runtime.spec import ActorSpec
from gpuplaned.service.api import tokens
from gpuplaned.service.api.tokens import SCOPES, TokenInfo, authenticate, create_token, grants, list_tokens, revoke_token


def _made(created: TokenCreated) -> tuple[TokenInfo, str]:
    return created.token, created.secret


@pytest.fixture
async def shared(tmp_path, nursery):
    spec = ActorSpec("store", store.run, frozenset({"all"}), graceful_stop=True, inbox_size=1024)
    async with daemon_context(tmp_path, nursery, [spec], readers=True) as ctx:
        yield ctx


async def unauthorized(shared, header) -> str:
    with pytest.raises(ApiError) as caught:
        await authenticate(shared, header)
    assert caught.value.code is ErrorCode.UNAUTHORIZED and caught.value.code.http_status == 401
    return caught.value.message


def bearer(secret: str) -> str:
    return f"Bearer {secret}"


# --- scopes -----------------------------------------------------------------------


@pytest.mark.parametrize(("held", "needed", "granted"), [
    (("read",), "read", True),
    (("read",), "write", False),
    (("write",), "read", True),
    (("write",), "write", True),
    (("write",), "agent", False),
    (("agent",), "read", False),
    (("sdk",), "sdk", True),
    (("sdk",), "read", False),
    (("admin",), "read", True),
    (("admin",), "write", True),
    (("admin",), "agent", True),
    (("admin",), "sdk", True),
    (("admin",), "admin", True),
    (("write", "agent", "sdk"), "admin", False),
    ((), "read", False),
])
def test_grants(held, needed, granted):
    assert grants(held, needed) is granted


def test_grants_refuses_an_unknown_needed_scope():
    with pytest.raises(ValueError, match="unknown scope"):
        grants(("admin",), "root")


def test_require_scope_is_403_naming_the_scope():
    info = TokenInfo("tok_X", "ci", ("read",), 0, None, None, None)
    tokens.require_scope(info, "read")
    with pytest.raises(ApiError) as caught:
        tokens.require_scope(info, "write")
    assert caught.value.code is ErrorCode.FORBIDDEN and caught.value.code.http_status == 403
    assert "'write'" in caught.value.message and caught.value.details["needed"] == "write"


def test_hash_is_hex_sha256_of_the_secret_part():
    assert tokens.hash_secret("abc") == hashlib.sha256(b"abc").hexdigest()


# --- create, verify, list, revoke ------------------------------------------------------


async def test_create_then_authenticate(shared):
    info, secret = _made(await create_token(shared, "ci", ["write", "read"], None))
    assert info.id.startswith("tok_") and info.name == "ci"
    assert info.scopes == ("read", "write")  # in SCOPES order, without repeats
    assert info.expires_at is None and info.revoked_at is None and info.last_used_at is None
    prefix, ulid, rest = secret.split("_", 2)
    assert (prefix, "tok_" + ulid) == ("gpp", info.id) and len(rest) == 43
    assert await authenticate(shared, bearer(secret)) == info
    assert await authenticate(shared, f"bearer   {secret}  ") == info  # the scheme is case-insensitive
    assert [t.id for t in (await list_tokens(shared)).tokens] == [info.id]


async def test_the_secret_is_never_stored(shared):
    info, secret = _made(await create_token(shared, "laptop", ["read"], None))
    secret_part = secret.split("_", 2)[2]
    await authenticate(shared, bearer(secret))
    await revoke_token(shared, info.id)
    db = shared.config.db_path
    for path in (db, db.with_name(db.name + "-wal")):
        if path.exists():
            data = path.read_bytes()
            assert secret_part.encode() not in data and secret.encode() not in data
    stored = await shared.readers.run(lambda c: c.execute("SELECT secret_hash FROM api_tokens").fetchone()[0])
    assert stored == hashlib.sha256(secret_part.encode()).hexdigest()
    listed = await list_tokens(shared)
    assert not any("hash" in f.name or "secret" in f.name for f in attrs.fields(TokenInfo))
    assert secret_part not in repr(listed)


async def test_a_wrong_secret_is_refused_through_compare_digest(shared, monkeypatch):
    info, secret = _made(await create_token(shared, "ci", ["read"], None))
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    wrong = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    message = await unauthorized(shared, bearer(wrong))
    assert message == "unknown or revoked API token"
    assert wrong not in message and wrong.split("_", 2)[2] not in message
    assert await authenticate(shared, bearer(secret)) == info
    assert len(calls) == 2  # every check, right or wrong, compares in constant time
    assert calls[1] == (tokens.hash_secret(secret.split("_", 2)[2]),) * 2


async def test_an_unknown_id_is_refused_after_a_compare_too(shared, monkeypatch):
    calls = []
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: calls.append(1) or False)
    token = "gpp_01JD0000000000000000000000_" + "x" * 43
    assert await unauthorized(shared, bearer(token)) == "unknown or revoked API token"
    assert calls == [1]


@pytest.mark.parametrize(("header", "says"), [
    (None, "missing Authorization header"),
    ("", "missing Authorization header"),
    ("   ", "missing Authorization header"),
    ("Basic dXNlcjpwYXNz", "must be 'Bearer <token>'"),
    ("Token gpp_x", "must be 'Bearer <token>'"),
    ("gpp_01JD0000000000000000000000_" + "x" * 43, "must be 'Bearer <token>'"),
    ("Bearer", "no token after 'Bearer'"),
    ("Bearer    ", "no token after 'Bearer'"),
    ("Bearer not-a-token", "malformed API token"),
    ("Bearer gpp_01JD0000000000000000000000", "malformed API token"),
    ("Bearer gpp_01JD0000000000000000000000_short", "malformed API token"),
    ("Bearer gpp_01jd0000000000000000000000_" + "x" * 43, "malformed API token"),  # lower-case ULID
    ("Bearer xyz_01JD0000000000000000000000_" + "x" * 43, "malformed API token"),
    ("Bearer gpp_01JD0000000000000000000000_" + "x" * 42 + "!", "malformed API token"),
    ("Bearer gpp_01JD0000000000000000000000_" + "x" * 43 + " extra", "malformed API token"),
])
async def test_malformed_headers(shared, header, says):
    message = await unauthorized(shared, header)
    assert says in message
    if header and len(header) > 10:
        assert header.split()[-1] not in message  # never what was presented


async def test_revoked_and_expired_tokens_are_refused(shared, autojump_clock):
    revoked, revoked_secret = _made(await create_token(shared, "old", ["admin"], None))
    await authenticate(shared, bearer(revoked_secret))  # now cached
    again = (await revoke_token(shared, "old")).token
    assert again.id == revoked.id and again.revoked_at is not None
    assert await unauthorized(shared, bearer(revoked_secret)) == "unknown or revoked API token"
    # Revoking twice is fine and keeps the first time.
    assert (await revoke_token(shared, revoked.id)).token.revoked_at == again.revoked_at
    assert (await revoke_token(shared, "old")).token.revoked_at == again.revoked_at

    short, short_secret = _made(await create_token(shared, "short", ["read"], 1000))
    assert short.expires_at == short.created_at + 1000
    assert await authenticate(shared, bearer(short_secret)) == short
    # Expiry is wall-clock data, checked on cached rows as well.
    shared.wall_ms = lambda: short.expires_at
    message = await unauthorized(shared, bearer(short_secret))
    assert message.startswith("API token 'short' has expired") and short_secret not in message


async def test_the_cache_spares_the_store_for_5_s(shared, autojump_clock, monkeypatch):
    info, secret = _made(await create_token(shared, "burst", ["read"], None))
    reads = []
    real_run = shared.readers.run

    async def counting(fn):
        reads.append(fn)
        return await real_run(fn)

    monkeypatch.setattr(shared.readers, "run", counting)
    for _ in range(20):
        assert await authenticate(shared, bearer(secret)) == info
    assert len(reads) == 1
    await trio.sleep(tokens.CACHE_TTL_S)
    await authenticate(shared, bearer(secret))
    assert len(reads) == 2


async def test_last_used_is_recorded_at_most_once_a_minute(shared, autojump_clock):
    info, secret = _made(await create_token(shared, "ci", ["read"], None))
    wall = [info.created_at + 5]
    shared.wall_ms = lambda: wall[0]
    port = shared.supervisor.ports["store"]

    async def last_used():
        # A write through the same store commits after the fire-and-forget touch before it.
        await tokens.write(port, lambda conn: None)
        return (await list_tokens(shared)).tokens[0].last_used_at

    await authenticate(shared, bearer(secret))
    first = await last_used()
    assert first == info.created_at + 5
    wall[0] += 30_000
    await trio.sleep(30)
    await authenticate(shared, bearer(secret))
    assert await last_used() == first
    wall[0] += 31_000
    await trio.sleep(31)
    await authenticate(shared, bearer(secret))
    assert await last_used() == first + 61_000


async def test_a_full_store_inbox_skips_the_touch_without_failing(shared, monkeypatch):
    info, secret = _made(await create_token(shared, "ci", ["read"], None))

    class Full:
        def send_nowait(self, message):
            raise trio.WouldBlock

    monkeypatch.setitem(shared.supervisor.ports, "store", Full())
    assert await authenticate(shared, bearer(secret)) == info
    assert info.id not in tokens.cache_of(shared).touched  # the next use tries again


async def test_validation_names_the_field(shared):
    for name in ("", "-lead", "a" * 64, "has space", "ünï", None, 7):
        with pytest.raises(ApiError) as caught:
            await create_token(shared, name, ["read"], None)
        assert caught.value.code is ErrorCode.BAD_REQUEST and caught.value.details["field"] == "name"
    await create_token(shared, "a" * 63, ["read"], None)
    await create_token(shared, "ok.name_1-x", ["read"], None)
    for scopes in ([], ["root"], ["read", "everything"], "read"):
        with pytest.raises(ApiError) as caught:
            await create_token(shared, "s", scopes, None)
        assert caught.value.details["field"] == "scopes"
        assert caught.value.details["allowed"] == list(SCOPES)
    with pytest.raises(ApiError) as caught:
        await create_token(shared, "e", ["read"], 0)
    assert caught.value.details["field"] == "expires_in_s"


async def test_names_are_unique_among_active_tokens(shared):
    first, _ = _made(await create_token(shared, "ci", ["read"], None))
    with pytest.raises(ApiError) as caught:
        await create_token(shared, "ci", ["write"], None)
    assert caught.value.code is ErrorCode.CONFLICT and caught.value.details["token_id"] == first.id
    await revoke_token(shared, "ci")
    second, _ = _made(await create_token(shared, "ci", ["write"], None))
    # By name, revoke finds the active one; the revoked one stays listed.
    assert (await revoke_token(shared, "ci")).token.id == second.id
    assert [(t.id, t.revoked_at is not None) for t in (await list_tokens(shared)).tokens] == [
        (second.id, True), (first.id, True)]  # newest first
    listed = await list_tokens(shared, limit=1)
    page, cursor = listed.tokens, listed.next_cursor
    assert [t.id for t in page] == [second.id]
    assert [t.id for t in (await list_tokens(shared, 1, cursor)).tokens] == [first.id]


async def test_revoking_an_unknown_token_is_404(shared):
    with pytest.raises(ApiError) as caught:
        await revoke_token(shared, "nope")
    assert caught.value.code is ErrorCode.NOT_FOUND and caught.value.code.http_status == 404


async def test_a_revoke_during_a_read_is_not_undone_by_the_cache(shared):
    info, secret = _made(await create_token(shared, "race", ["read"], None))
    real_run = shared.readers.run

    async def slow_read(fn):
        row = await real_run(fn)
        await revoke_token(shared, info.id)  # lands while the row read before it is in flight
        return row

    shared.readers.run = slow_read
    try:
        await authenticate(shared, bearer(secret))  # verified against the row it read
    finally:
        shared.readers.run = real_run
    assert await unauthorized(shared, bearer(secret)) == "unknown or revoked API token"


# --- the routes ---------------------------------------------------------------------


async def test_routes(shared):
    app, _ = create_app(shared)
    shared.lifecycle.ready()
    client = app.test_client()

    response = await client.post("/api/v1/tokens", json={"name": "ci", "scopes": ["read", "write"],
                                                          "expires_in_s": 3600})
    assert response.status_code == 201
    body = await response.get_json()
    assert set(body) == {"token", "secret"}
    token = body["token"]
    assert set(token) == {"id", "name", "scopes", "created_at", "expires_at", "last_used_at", "revoked_at",
                          "limits", "used_gpu_hours", "remaining_gpu_hours", "job_id"}
    assert token["limits"] is None and token["used_gpu_hours"] is None  # no limits: none shown
    assert token["job_id"] is None  # a user's token, not a job's (gpuplaned.service.api.job_tokens)
    assert token["scopes"] == ["read", "write"] and token["expires_at"] == token["created_at"] + 3_600_000
    assert (await authenticate(shared, bearer(body["secret"]))).id == token["id"]

    listed = await (await client.get("/api/v1/tokens")).get_json()
    assert [t["id"] for t in listed["tokens"]] == [token["id"]]
    assert body["secret"].split("_", 2)[2] not in str(listed)

    response = await client.post("/api/v1/tokens/ci/revoke")
    assert response.status_code == 200
    assert (await response.get_json())["token"]["revoked_at"] is not None

    response = await client.post("/api/v1/tokens/nope/revoke")
    assert response.status_code == 404
    assert (await response.get_json())["error"]["code"] == "not_found"


@pytest.mark.parametrize(("body", "field"), [
    ({"scopes": ["read"]}, "name"),
    ({"name": "x"}, "scopes"),
    ({"name": "x", "scopes": ["read"], "expires_in_s": 0}, "expires_in_s"),
    ({"name": "x", "scopes": ["read"], "expires_in_s": 1.5}, "expires_in_s"),
    ({"name": "x", "scopes": ["read"], "expires_in_s": True}, "expires_in_s"),
    ({"name": "x", "scopes": ["read"], "expires_in_s": "30d"}, "expires_in_s"),
    ({"name": "x", "scopes": ["sudo"]}, "scopes"),
    ({"name": "x y", "scopes": ["read"]}, "name"),
    ({"name": "x", "scopes": ["read"], "secret": "mine"}, "secret"),
])
async def test_bad_create_bodies_are_400_naming_the_field(shared, body, field):
    app, _ = create_app(shared)
    shared.lifecycle.ready()
    response = await app.test_client().post("/api/v1/tokens", json=body)
    assert response.status_code == 400
    error = (await response.get_json())["error"]
    assert error["code"] == "bad_request" and error["details"]["field"] == field
    assert await list_tokens(shared) == TokenList(tokens=[], next_cursor=None)


def test_the_cache_goes_with_its_context():
    import gc

    @attrs.define
    class Context:
        name: str

    ctx = Context("a")
    cache = tokens.cache_of(ctx)
    assert tokens.cache_of(ctx) is cache and tokens.cache_of(Context("a")) is not cache
    key = id(ctx)
    del ctx
    gc.collect()
    assert key not in tokens._caches._entries
