"""Tokens, browser sessions and login links expire on time, with no test waiting for it.

In process: the real store on a SQLite file and the real HTTP front on loopback TCP, with the
daemon context's wall clock (``wall_ms``: tokens' and sessions' ends) and trio's clock (login
links' deadlines, the caches' lifetimes) both moved by the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import httpx
import pytest
from inprocess import WallClock, daemon_context
from test_http_front import concrete, routes

from gpuplaned.actors import specs_for_role
from gpuplaned.config import HttpFront, UiConfig
from gpuplaned.daemon import DaemonContext
from gpuplaned.http.scopes import is_public
from gpuplaned.service.api import tokens
from gpuplaned.service.api.ui_sessions import COOKIE

SESSION_TTL_S = 120
LINK_TTL_S = 1


@attrs.frozen
class Front:
    ctx: DaemonContext
    wall: WallClock
    url: str

    @asynccontextmanager
    async def browser(self) -> AsyncIterator[httpx.AsyncClient]:
        """A fresh cookie jar."""
        async with httpx.AsyncClient(base_url=self.url, follow_redirects=False) as client:
            yield client

    async def token(self, name: str, scopes: list[str], expires_in_s: float | None = None) -> str:
        expires_in_ms = None if expires_in_s is None else round(expires_in_s * 1000)
        return (await tokens.create_token(self.ctx, name, scopes, expires_in_ms)).secret


@pytest.fixture
async def front(tmp_path, nursery) -> AsyncIterator[Front]:
    """Each test takes ``mock_clock`` too (pytest-trio runs a test under a clock only when the
    test itself asks for it): it stands still unless the test jumps it. The sockets are real,
    so an autojump would move it while a request is on its way."""
    specs = [spec for spec in specs_for_role("server") if spec.name in ("store", "http")]
    async with daemon_context(tmp_path, nursery, specs, readers=True, http=HttpFront("127.0.0.1", 0),
                              ui=UiConfig(session_ttl_s=SESSION_TTL_S, login_link_ttl_s=LINK_TTL_S)) as ctx:
        ctx.wall_ms = wall = WallClock()
        ctx.lifecycle.ready()
        yield Front(ctx, wall, ctx.supervisor.handle("http").url)


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def refusal(response: httpx.Response) -> str:
    """The message of a 401."""
    assert response.status_code == 401, response.text
    return response.json()["error"]["message"]


def max_age(response: httpx.Response) -> int:
    found = [v for v in response.headers.get_list("set-cookie") if v.startswith(f"{COOKIE}=")]
    assert len(found) == 1, response.headers
    attributes = dict(part.strip().partition("=")[::2] for part in found[0].split(";")[1:])
    return int(attributes["Max-Age"])


async def test_an_expired_token_is_refused_on_every_route_and_at_sign_in(front, mock_clock):
    secret = await front.token("brief", ["admin"], expires_in_s=1)
    async with front.browser() as client:
        assert (await client.get("/api/v1/nodes", headers=bearer(secret))).status_code == 200  # now cached
        front.wall.advance(0.999)
        assert (await client.get("/api/v1/nodes", headers=bearer(secret))).status_code == 200
        front.wall.advance(0.001)  # its last millisecond: the cached row is judged again
        checked = 0
        for method, rule, websocket in routes():
            if websocket or is_public(rule):
                continue
            response = await client.request(method, concrete(rule), headers=bearer(secret),
                                            json={} if method == "POST" else None)
            assert refusal(response).startswith("API token 'brief' has expired"), (method, rule)
            checked += 1
        assert checked >= 15
        signed_in = await client.post("/api/v1/auth/login", json={"token": secret})
        assert "has expired" in refusal(signed_in) and "set-cookie" not in signed_in.headers


async def test_a_session_ends_with_its_ttl_or_its_token_whichever_is_first(front, mock_clock):
    lasting, brief = await front.token("ci", ["read"]), await front.token("brief", ["read"], expires_in_s=2)
    async with front.browser() as long_lived, front.browser() as short_lived:
        response = await long_lived.post("/api/v1/auth/login", json={"token": lasting})
        assert max_age(response) == SESSION_TTL_S
        assert response.json()["session"]["expires_at"] == front.wall.now_ms + SESSION_TTL_S * 1000
        response = await short_lived.post("/api/v1/auth/login", json={"token": brief})
        assert max_age(response) == 2
        assert response.json()["session"]["expires_at"] == front.wall.now_ms + 2000  # the token's end

        front.wall.advance(1.999)
        for browser in (long_lived, short_lived):
            assert (await browser.get("/api/v1/nodes")).status_code == 200  # the rows are cached now
        front.wall.advance(0.001)
        assert "sign in again" in refusal(await short_lived.get("/api/v1/nodes"))
        assert (await long_lived.get("/api/v1/nodes")).status_code == 200

        front.wall.advance(SESSION_TTL_S - 2 - 0.001)
        assert (await long_lived.get("/api/v1/auth/session")).status_code == 200
        front.wall.advance(0.001)
        assert "sign in again" in refusal(await long_lived.get("/api/v1/auth/session"))


async def test_a_login_link_works_until_its_deadline(front, mock_clock):
    admin = bearer(await front.token("admin", ["admin"]))
    async with front.browser() as client:
        first = (await client.post("/api/v1/auth/login-links", headers=admin, json={})).json()
        second = (await client.post("/api/v1/auth/login-links", headers=admin, json={})).json()
    assert first["expires_at"] == second["expires_at"] == front.wall.now_ms + LINK_TTL_S * 1000

    mock_clock.jump(LINK_TTL_S - 0.01)
    async with front.browser() as browser:
        response = await browser.get(first["url"])
        assert response.status_code == 303 and browser.cookies[COOKIE]
    mock_clock.jump(0.02)  # just past the deadline (trio's clock is a float: never exactly on it)
    async with front.browser() as browser:
        response = await browser.get(second["url"])
        assert response.status_code == 401 and "used or expired" in response.text
        assert COOKIE not in browser.cookies
