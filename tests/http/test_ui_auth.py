"""Signing a browser in to the web UI: a real daemon, its HTTP front on loopback TCP, real cookies.

The browser is an ``httpx.Client`` with its cookie jar; the daemon's control socket stands in
for ``gpuplanectl`` (trusted: tokens and login links are made there).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import sqlite3
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import httpx
import pytest
from quart import Response
from trio_websocket import open_websocket_url

from gpuplaned.config import ConfigError, load_config
from gpuplaned.http.app import create_app
from gpuplaned.http.auth_routes import set_session_cookie
from gpuplaned.protocol.errors import ApiError, ErrorCode

pytestmark = pytest.mark.e2e

COOKIE = "gpuplane_session"
CSRF = {"X-GPUPlane-CSRF": "1"}
WEEK_S = 7 * 86_400


class Front:
    """The daemon's HTTP front, and a fresh browser (cookie jar) for it on demand."""

    def __init__(self, daemon) -> None:
        self.daemon = daemon
        self.url = daemon.client().get("/api/v1/daemon")["endpoints"]["http"]
        parts = urlsplit(self.url)
        self.host, self.port = parts.hostname, parts.port

    def browser(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, follow_redirects=False, timeout=10)

    def token(self, name: str, scopes: list[str], **extra) -> str:
        return self.daemon.client().post("/api/v1/tokens", {"name": name, "scopes": scopes, **extra})["secret"]

    def login(self, browser: httpx.Client, token: str) -> httpx.Response:
        return browser.post("/api/v1/auth/login", json={"token": token})

    def link(self, **body) -> dict:
        return self.daemon.client().post("/api/v1/auth/login-links", body)

    def db_rows(self) -> list[tuple]:
        with sqlite3.connect(self.daemon.home / "gpuplane.db") as conn:
            return conn.execute("SELECT id_hash, origin, token_id, scopes, expires_at FROM ui_sessions").fetchall()


@pytest.fixture
def front(daemon_factory) -> Front:
    return start_front(daemon_factory)


def start_front(daemon_factory, config: Path | None = None, ui_settings: str = "") -> Front:
    """A READY daemon with one fake GPU; ``ui_settings`` go in its config's [ui] table."""
    args = ["--gpus=fake:1"]
    if config is not None:
        config.write_text(f"[ui]\n{ui_settings}\n")
        args += ["--config", str(config)]
    daemon = daemon_factory(*args).start()
    daemon.wait_ready()
    return Front(daemon)


def set_cookie_header(response: httpx.Response) -> str:
    found = [v for v in response.headers.get_list("set-cookie") if v.startswith(f"{COOKIE}=")]
    assert len(found) == 1, response.headers
    return found[0]


def attributes(header: str) -> dict[str, str]:
    parts = [p.strip() for p in header.split(";")]
    return {k.lower(): v for k, _, v in (p.partition("=") for p in parts[1:])}


def error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    return body["error"]


def test_login_with_a_token_sets_a_strict_http_only_cookie_that_authenticates(front, tmp_path):
    secret = front.token("laptop", ["read", "write"])
    with front.browser() as browser:
        before = int(time.time() * 1000)
        response = front.login(browser, secret)
        assert response.status_code == 200, response.text
        session = response.json()["session"]
        assert session["scopes"] == ["read", "write"] and session["via"] == "cookie"
        assert before + WEEK_S * 1000 <= session["expires_at"] <= int(time.time() * 1000) + WEEK_S * 1000
        header = set_cookie_header(response)
        flags = attributes(header)
        assert "httponly" in flags and flags["samesite"] == "Strict" and flags["path"] == "/"
        assert WEEK_S - 5 <= int(flags["max-age"]) <= WEEK_S
        assert "secure" not in flags  # plain HTTP here; see test_the_cookie_is_secure_over_tls
        assert response.headers["Cache-Control"] == "no-store"
        cookie = browser.cookies[COOKIE]
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", cookie)

        # The cookie alone authenticates: reads, and writes with the CSRF header.
        assert browser.get("/api/v1/jobs").status_code == 200
        who = browser.get("/api/v1/auth/session").json()["session"]
        assert who == {"expires_at": session["expires_at"], "scopes": ["read", "write"], "via": "cookie"}
        job = {"command": ["true"], "cwd": str(tmp_path), "gpu": 0}
        refused = error(browser.post("/api/v1/jobs", json=job), 403)
        assert refused["details"]["reason"] == "csrf" and "X-GPUPlane-CSRF: 1" in refused["message"]
        assert error(browser.post("/api/v1/jobs", json=job, headers={"X-GPUPlane-CSRF": "yes"}), 403)
        assert browser.post("/api/v1/jobs", json=job, headers=CSRF).status_code == 201
        # ...but only within the token's scopes.
        denied = error(browser.post("/api/v1/tokens", json={"name": "x", "scopes": ["read"]}, headers=CSRF), 403)
        assert denied["details"] == {"needed": "admin", "scopes": ["read", "write"]}
        assert "browser session" in denied["message"]

        # Only the cookie's hash is stored, and the cookie is never logged.
        rows = front.db_rows()
        assert [r[:4] for r in rows] == [(hashlib.sha256(cookie.encode()).hexdigest(), "token",
                                          "tok_" + secret.split("_")[1], '["read", "write"]')]
        assert rows[0][4] == session["expires_at"]
        for path in front.daemon.home.iterdir():
            if path.is_file():
                assert cookie.encode() not in path.read_bytes(), path
        assert cookie not in front.daemon.log() and secret not in front.daemon.log()

        # Signing out needs the CSRF header too, deletes the session and clears the cookie.
        assert error(browser.post("/api/v1/auth/logout"), 403)["details"]["reason"] == "csrf"
        response = browser.post("/api/v1/auth/logout", headers=CSRF)
        assert response.status_code == 200 and response.json() == {"logged_out": True}
        cleared = attributes(set_cookie_header(response))
        assert cleared["max-age"] == "0" and "httponly" in cleared and cleared["samesite"] == "Strict"
        assert front.db_rows() == []
        assert COOKIE not in browser.cookies
    with front.browser() as replay:  # the old cookie, kept by someone, is dead too
        replay.cookies.set(COOKIE, cookie)
        assert "sign in again" in error(replay.get("/api/v1/jobs"), 401)["message"]
        assert error(replay.get("/api/v1/auth/session"), 401)


def test_wrong_tokens_get_no_session(front):
    """An expired token's sign-in: tests/http/test_expiry.py."""
    agent = front.token("agent", ["agent"])
    with front.browser() as browser:
        wrong = "gpp_01ABCDEFGHJKMNPQRSTVWXYZ01_" + "x" * 43
        for token in (wrong, "nonsense"):
            response = front.login(browser, token)
            assert error(response, 401)["code"] == "unauthorized"
            assert "set-cookie" not in response.headers
        forbidden = error(front.login(browser, agent), 403)
        assert forbidden["details"]["needed"] == "read" and "set-cookie" not in front.login(browser, agent).headers
        for body in ({}, {"token": ""}, {"token": "   "}, {"token": 5}, {"token": "x", "extra": 1}, []):
            assert error(browser.post("/api/v1/auth/login", json=body), 400)["code"] == "bad_request"
        assert error(browser.post("/api/v1/auth/login", content=b"not json",
                                  headers={"Content-Type": "application/json"}), 400)
        assert error(browser.get("/api/v1/auth/session"), 401)["code"] == "unauthorized"
        browser.cookies.set(COOKIE, "x" * 43)  # a cookie no session has
        assert error(browser.get("/api/v1/jobs"), 401)
        browser.cookies.set(COOKIE, "../../etc")
        assert error(browser.get("/api/v1/jobs"), 401)
        assert front.db_rows() == []


def test_bearer_and_session_report_how_the_caller_came_and_the_bearer_wins(front):
    admin = front.token("admin", ["admin"])
    with front.browser() as browser:
        assert front.login(browser, admin).status_code == 200
        by_token = browser.get("/api/v1/auth/session", headers={"Authorization": f"Bearer {admin}"}).json()
        assert by_token["session"] == {"expires_at": None, "scopes": ["admin"], "via": "token"}
        # A bearer token that fails is not rescued by a good cookie alongside it.
        bad = {"Authorization": "Bearer gpp_01ABCDEFGHJKMNPQRSTVWXYZ01_" + "x" * 43}
        assert error(browser.get("/api/v1/jobs", headers=bad), 401)
        # With the bearer token, no CSRF header is needed (no browser sends it on its own).
        assert browser.post("/api/v1/tokens", json={"name": "made", "scopes": ["read"]},
                            headers={"Authorization": f"Bearer {admin}"}).status_code == 201
        # The admin token's session may administer (with the CSRF header).
        assert browser.post("/api/v1/tokens", json={"name": "made2", "scopes": ["read"]},
                            headers=CSRF).status_code == 201
    # On the control socket nobody signs in: the caller is trusted as admin.
    assert front.daemon.client().get("/api/v1/auth/session")["session"] == {
        "expires_at": None, "scopes": ["admin"], "via": "local"}


def test_revoking_the_token_ends_its_sessions_at_once(front):
    secret = front.token("shared", ["read"])
    other = front.token("other", ["read"])
    with front.browser() as browser, front.browser() as second, front.browser() as third:
        for b, token in ((browser, secret), (second, secret), (third, other)):
            assert front.login(b, token).status_code == 200
            assert b.get("/api/v1/nodes").status_code == 200  # now cached
        assert len(front.db_rows()) == 3
        front.daemon.client().post("/api/v1/tokens/shared/revoke")
        for b in (browser, second):
            assert "revoked" in error(b.get("/api/v1/nodes"), 401)["message"]
        assert third.get("/api/v1/nodes").status_code == 200
        assert [r[2] for r in front.db_rows()] == ["tok_" + other.split("_")[1]]


def test_the_session_ttl_comes_from_the_config(daemon_factory, tmp_path):
    """When sessions end (their TTL, their token's expiry): tests/http/test_expiry.py."""
    front = start_front(daemon_factory, tmp_path / "gpuplaned.toml", "session_ttl_s = 120")
    with front.browser() as browser:
        response = front.login(browser, front.token("ci", ["read"]))
        assert 115 <= int(attributes(set_cookie_header(response))["max-age"]) <= 120


def test_a_login_link_works_once_and_lands_where_it_said(front):
    link = front.link(next="/runs/run_1?tab=metrics")
    assert set(link) == {"code", "url", "expires_at"}
    assert link["url"] == f"{front.url}/login?code={link['code']}"
    assert 110_000 <= link["expires_at"] - time.time() * 1000 <= 120_000
    with front.browser() as browser:
        peek = browser.head(link["url"])  # a link preview: it must not use the code up
        assert peek.status_code == 200 and "set-cookie" not in peek.headers
        response = browser.get(link["url"])
        assert response.status_code == 303 and response.headers["Location"] == "/runs/run_1?tab=metrics"
        assert response.headers["Cache-Control"] == "no-store"
        assert response.headers["Referrer-Policy"] == "no-referrer"
        flags = attributes(set_cookie_header(response))
        assert "httponly" in flags and flags["samesite"] == "Strict" and flags["path"] == "/"
        who = browser.get("/api/v1/auth/session").json()["session"]
        assert who["scopes"] == ["read", "write"] and who["via"] == "cookie"  # never admin from a link
        assert front.db_rows()[0][1:4] == ("link", None, '["read", "write"]')
        assert browser.get("/api/v1/jobs").status_code == 200
        assert error(browser.post("/api/v1/daemon/shutdown", headers=CSRF), 403)["details"]["needed"] == "admin"
        assert error(browser.post("/api/v1/auth/login-links", json={}, headers=CSRF), 403)

    with front.browser() as late:
        again = late.get(link["url"])  # used: a page saying so, and no cookie
        assert again.status_code == 401 and again.headers["Content-Type"].startswith("text/html")
        assert "used or expired" in again.text and "gpuplanectl ui" in again.text
        assert "set-cookie" not in again.headers and link["code"] not in again.text
        for code in ("x" * 43, "", "../../x", "a" * 5000):
            assert late.get("/login", params={"code": code}).status_code == 401
        assert late.get("/login").status_code == 303  # no code: to the app, which asks for a token
        assert COOKIE not in late.cookies

    # Without next, the link lands on /.
    with front.browser() as browser:
        assert browser.get(front.link()["url"]).headers["Location"] == "/"


def test_a_login_link_refuses_to_land_elsewhere(front):
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example", "jobs", "/a b", "/x\n",
                   "javascript:alert(1)", "/" + "a" * 2048, 5, ""):
        with pytest.raises(ApiError) as caught:
            front.link(next=target)
        assert caught.value.code is ErrorCode.BAD_REQUEST and caught.value.details["field"] == "next", target


def test_login_links_need_admin_over_tcp(front):
    read, admin = front.token("r", ["read", "write"]), front.token("a", ["admin"])
    with front.browser() as browser:
        denied = browser.post("/api/v1/auth/login-links", json={}, headers={"Authorization": f"Bearer {read}"})
        assert error(denied, 403)["details"]["needed"] == "admin"
        made = browser.post("/api/v1/auth/login-links", headers={"Authorization": f"Bearer {admin}"})
        assert made.status_code == 201 and made.json()["url"].startswith(front.url + "/login?code=")
        assert error(browser.post("/api/v1/auth/login-links", content=b"[1]",
                                  headers={"Authorization": f"Bearer {admin}"}), 400)


def test_no_login_link_without_an_http_front(daemon_factory):
    daemon = daemon_factory("--no-http").start()
    daemon.wait_ready()
    with pytest.raises(ApiError) as caught:
        daemon.client().post("/api/v1/auth/login-links", {})
    assert caught.value.code is ErrorCode.UNAVAILABLE and "HTTP front" in caught.value.message
    assert caught.value.details["reason"] == "no_http_front"


def test_event_streams_take_the_cookie(front):
    """EventSource sends no headers of its own: the cookie must do on a GET stream."""
    with front.browser() as browser:
        assert front.login(browser, front.token("ro", ["read"])).status_code == 200
        cookie = browser.cookies[COOKIE]
    conn = http.client.HTTPConnection(front.host, front.port, timeout=10)
    try:
        conn.request("GET", "/api/v1/events/stream", headers={"Cookie": f"{COOKIE}={cookie}",
                                                               "Accept": "text/event-stream"})
        response = conn.getresponse()
        assert response.status == 200 and response.getheader("Content-Type").startswith("text/event-stream")
    finally:
        conn.close()


def _handshake(front: Front, headers: dict[str, str]) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(front.host, front.port, timeout=10)
    try:
        conn.request("GET", "/api/v1/agent/ws", headers={
            "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", **headers})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


async def test_websockets_take_the_cookie_from_this_origin_only(front):
    with front.browser() as browser:
        assert front.login(browser, front.token("adm", ["admin"])).status_code == 200
        admin_cookie = browser.cookies[COOKIE]
    with front.browser() as browser:
        assert browser.get(front.link()["url"]).status_code == 303
        link_cookie = browser.cookies[COOKIE]
    here = f"{front.host}:{front.port}"
    status, body = _handshake(front, {"Cookie": f"{COOKIE}={admin_cookie}", "Origin": "http://evil.example"})
    assert status == 403 and body["error"]["details"]["reason"] == "origin"
    status, body = _handshake(front, {"Cookie": f"{COOKIE}={link_cookie}", "Origin": f"http://{here}"})
    assert status == 403 and body["error"]["details"]["needed"] == "agent"
    url = front.url.replace("http://", "ws://") + "/api/v1/agent/ws"
    headers = [("Cookie", f"{COOKIE}={admin_cookie}"), ("Origin", f"http://{here}")]
    async with open_websocket_url(url, extra_headers=headers) as ws:
        await ws.send_message(json.dumps({"type": "ping"}))
        assert json.loads(await ws.get_message())["type"] == "pong"


async def test_the_cookie_is_secure_over_tls():
    app, _ = create_app(SimpleNamespace())
    for scheme, secure in (("https", True), ("http", False)):
        async with app.test_request_context("/api/v1/auth/login", method="POST", scheme=scheme):
            response = Response("{}")
            set_session_cookie(response, "c" * 43, 1_800_000_060_000, 1_800_000_000_000)
            assert attributes(response.headers["Set-Cookie"])["max-age"] == "60"
            flags = attributes(response.headers["Set-Cookie"])
            assert ("secure" in flags) is secure and "httponly" in flags and flags["samesite"] == "Strict"


def test_a_refused_request_leaves_the_kept_alive_connection_usable(front):
    """A browser reuses its connection: a POST refused before its body was read (no CSRF
    header, an ended session, a missing scope) must not stall the next request on it."""
    read = front.token("reader", ["read"])
    with front.browser() as browser:
        assert front.login(browser, read).status_code == 200
        big = {"next": "/" + "x" * 30_000}
        for _ in range(10):
            assert browser.post("/api/v1/auth/login-links", json=big).status_code == 403  # no CSRF header
            assert browser.post("/api/v1/auth/login-links", json=big, headers=CSRF).status_code == 403  # scope
            assert browser.get("/api/v1/auth/session").status_code == 200


def test_ui_settings_come_from_the_config_and_the_environment(tmp_path):
    config = tmp_path / "gpuplaned.toml"
    config.write_text(f"[ui]\nweb_dir = \"{tmp_path / 'build'}\"\nsession_ttl_s = 3600\nlogin_link_ttl_s = 30\n")
    cfg = load_config({"config": str(config)}, env={})
    assert (cfg.ui.web_dir, cfg.ui.session_ttl_s, cfg.ui.login_link_ttl_s) == (tmp_path / "build", 3600, 30)
    assert load_config({"config": str(config)}, env={"GPUPLANE_WEB_DIR": "/srv/ui"}).ui.web_dir == Path("/srv/ui")
    defaults = load_config({}, env={"XDG_CONFIG_HOME": str(tmp_path / "none")}).ui
    assert (defaults.web_dir, defaults.session_ttl_s, defaults.login_link_ttl_s) == (None, WEEK_S, 120)
    for bad in ("session_ttl_s = 0", "session_ttl_s = true", "login_link_ttl_s = 86400", "web_dir = 5", "cookie = 1"):
        config.write_text(f"[ui]\n{bad}\n")
        with pytest.raises(ConfigError, match=r"ui\."):
            load_config({"config": str(config)}, env={})


def test_a_read_only_session_can_compare_runs_but_not_write(front, tmp_path):
    """``POST /runs/metrics:query`` only reads (its run list is in a body): read scope is
    enough, for a token and for a browser session; a cookie POST still needs the CSRF header."""
    api = front.daemon.client()
    opened = api.post("/api/v1/sessions", {"name": "compared"})
    api.post(f"/api/v1/sessions/{opened['session_id']}/batches",
             {"seq": 0, "metrics": {"loss": {"step": [0, 1], "ts": [1, 2], "value": [0.5, 0.25]}}})
    query = {"run_ids": [opened["run_id"]], "names": "loss"}
    secret = front.token("viewer", ["read"])
    with front.browser() as bearer:
        reply = bearer.post("/api/v1/runs/metrics:query", json=query, headers={"Authorization": f"Bearer {secret}"})
        assert reply.status_code == 200, reply.text
        assert reply.json()["runs"][0]["series"]["loss"]["last"] == [0.5, 0.25]
    with front.browser() as browser:
        assert front.login(browser, secret).status_code == 200
        assert error(browser.post("/api/v1/runs/metrics:query", json=query), 403)["details"]["reason"] == "csrf"
        reply = browser.post("/api/v1/runs/metrics:query", json=query, headers=CSRF)
        assert reply.status_code == 200, reply.text
        job = {"command": ["true"], "cwd": str(tmp_path), "gpu": 0}
        assert error(browser.post("/api/v1/jobs", json=job, headers=CSRF), 403)["details"]["needed"] == "write"
