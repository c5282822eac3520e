"""Browser hardening of the HTTP front (issue 29, item 10), raw requests against real daemons:

- a WebSocket signed in by the session cookie must send an ``Origin`` naming this front;
- ``/api/v1/auth/login`` reads only an ``application/json`` body (a cross-site form cannot sign
  a browser in);
- every answer says ``X-Content-Type-Options: nosniff``;
- a loopback front answers only loopback ``Host`` names and ``[http] allowed_hosts`` (DNS rebinding).
"""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from helpers import DaemonProcess, kill_processes_with_env, wait_for
from trio_websocket import open_websocket_url

pytestmark = pytest.mark.e2e

COOKIE = "gpuplane_session"
WS_HANDSHAKE = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


class Front:
    def __init__(self, daemon: DaemonProcess) -> None:
        self.daemon = daemon
        self.url = daemon.client().get("/api/v1/daemon")["endpoints"]["http"]
        self.port = urlsplit(self.url).port
        self.here = f"127.0.0.1:{self.port}"
        self.made = 0

    def token(self, name: str, scopes: list[str]) -> str:
        self.made += 1  # names are unique, and the module's tests share the daemon
        body = {"name": f"{name}-{self.made}", "scopes": scopes}
        return self.daemon.client().post("/api/v1/tokens", body)["secret"]

    def request(self, method: str, path: str, headers: dict[str, str] | None = None, body: bytes | None = None,
                host: str | None = None) -> tuple[int, dict[str, str], bytes]:
        """One raw request to 127.0.0.1 on the front's port, naming ``host`` (default: that address)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", host or self.here)
            for name, value in (headers or {}).items():
                conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()

    def login(self, token: str) -> str:
        status, headers, body = self.request("POST", "/api/v1/auth/login", {"Content-Type": "application/json"},
                                             json.dumps({"token": token}).encode())
        assert status == 200, body
        return headers["set-cookie"].split(";")[0].split("=", 1)[1]

    def sessions(self) -> int:
        """Browser sessions the store holds (none is ever made by a refused sign-in)."""
        import sqlite3
        with sqlite3.connect(self.daemon.home / "gpuplane.db") as conn:
            return conn.execute("SELECT count(*) FROM ui_sessions").fetchone()[0]


def start(root: Path, *args: str, config: str = "", web: Path | None = None) -> DaemonProcess:
    (root / "gpuplaned.toml").write_text(config)
    env = {"GPUPLANE_WEB_DIR": str(web)} if web else None
    daemon = DaemonProcess(root / "d", "--gpus", "fake:1", "--config", str(root / "gpuplaned.toml"), *args,
                           env=env).start()
    daemon.wait_ready()
    wait_for(lambda: daemon.client().get("/api/v1/daemon")["endpoints"].get("http"), what="the front")
    return daemon


@pytest.fixture(scope="module")
def front(tmp_path_factory) -> Front:
    root = tmp_path_factory.mktemp("hardening")
    web = root / "dist"
    (web / "assets").mkdir(parents=True)
    (web / "index.html").write_text("<!doctype html><title>GPUPlane</title><div id=root></div>")
    (web / "assets" / "app-1a2b3c.js").write_text("console.log('gpuplane');\n")
    daemon = start(root, "--http", "127.0.0.1:0", config='[http]\nallowed_hosts = ["gpubox.lan"]\n', web=web)
    try:
        yield Front(daemon)
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


def error_of(status: int, body: bytes, expected: int) -> dict:
    assert status == expected, body
    return json.loads(body)["error"]


# --- WebSocket: the cookie counts only with this front's Origin ---------------------------------------------


async def test_a_cookie_websocket_without_origin_is_refused(front):
    cookie = front.login(front.token("adm-ws", ["admin"]))  # admin holds agent: the agent WebSocket is its to open
    status, _, body = front.request("GET", "/api/v1/agent/ws", {**WS_HANDSHAKE, "Cookie": f"{COOKIE}={cookie}"})
    refused = error_of(status, body, 403)
    assert refused["details"]["reason"] == "origin" and "Origin is missing" in refused["message"]
    status, _, body = front.request("GET", "/api/v1/agent/ws", {**WS_HANDSHAKE, "Cookie": f"{COOKIE}={cookie}",
                                                                 "Origin": "http://evil.example"})
    assert error_of(status, body, 403)["details"]["reason"] == "origin"

    url = front.url.replace("http://", "ws://") + "/api/v1/agent/ws"
    headers = [("Cookie", f"{COOKIE}={cookie}"), ("Origin", f"http://{front.here}")]
    async with open_websocket_url(url, extra_headers=headers) as ws:  # a page this front served
        await ws.send_message(json.dumps({"type": "ping"}))
        assert json.loads(await ws.get_message())["type"] == "pong"
    # An agent sends its token, and no Origin: that is no browser, and goes on working.
    agent = [("Authorization", f"Bearer {front.token('agent-ws', ['agent'])}")]
    async with open_websocket_url(url, extra_headers=agent) as ws:
        await ws.send_message(json.dumps({"type": "ping"}))
        assert json.loads(await ws.get_message())["type"] == "pong"


# --- sign-in takes JSON only ----------------------------------------------------------------------------------


@pytest.mark.parametrize("content_type, body", [
    ("application/x-www-form-urlencoded", b"token={token}"),
    ("text/plain", b'{{"token": "{token}"}}'),
    ("multipart/form-data; boundary=x", b'--x\r\nContent-Disposition: form-data; name="token"\r\n\r\n{token}\r\n--x--'),
    (None, b'{{"token": "{token}"}}'),
])
def test_sign_in_refuses_what_a_form_can_send(front, content_type, body):
    token = front.token("reader", ["read"])
    before = front.sessions()
    headers = {"Content-Type": content_type} if content_type else {}
    status, answer_headers, answer = front.request("POST", "/api/v1/auth/login", headers,
                                                   body.decode().format(token=token).encode())
    refused = error_of(status, answer, 415)
    assert refused["code"] == "unsupported_media_type" and "application/json" in refused["message"]
    assert refused["details"]["content_type"] == (content_type or "none")
    assert "set-cookie" not in answer_headers and front.sessions() == before


def test_sign_in_takes_json_with_a_charset(front):
    status, headers, _ = front.request("POST", "/api/v1/auth/login",
                                       {"Content-Type": "application/json; charset=utf-8"},
                                       json.dumps({"token": front.token("charset", ["read"])}).encode())
    assert status == 200 and headers["set-cookie"].startswith(f"{COOKIE}=")


# --- nosniff on every answer ----------------------------------------------------------------------------------


def test_every_answer_says_nosniff(front):
    bearer = {"Authorization": f"Bearer {front.token('sniff', ['read'])}"}
    answers = {
        "json": front.request("GET", "/api/v1/jobs", bearer),
        "401": front.request("GET", "/api/v1/jobs"),
        "404": front.request("GET", "/api/v1/nowhere", bearer),
        "403": front.request("POST", "/api/v1/jobs", bearer, b"{}"),  # read scope, a write
        "page": front.request("GET", "/", {"Accept": "text/html"}),
        "asset": front.request("GET", "/assets/app-1a2b3c.js"),
        "mcp": front.request("POST", "/mcp", {"Content-Type": "application/json"}, b"{}"),
        "host refused": front.request("GET", "/api/v1/jobs", bearer, host="evil.example"),
    }
    statuses = {what: status for what, (status, _, _) in answers.items()}
    assert statuses == {"json": 200, "401": 401, "404": 404, "403": 403, "page": 200, "asset": 200, "mcp": 401,
                        "host refused": 400}
    for what, (_, headers, _) in answers.items():
        assert headers.get("x-content-type-options") == "nosniff", what


# --- Host: DNS rebinding cannot reach a loopback front -----------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example",
                                  "localhost.evil.example:{port}", "[::2]:{port}", "10.0.0.7"])
def test_a_loopback_front_refuses_other_host_names(front, host):
    host = host.format(port=front.port)
    status, _, body = front.request("GET", "/api/v1/auth/session", host=host)
    refused = error_of(status, body, 400)
    assert refused["details"] == {"reason": "host", "host": host, "setting": "[http] allowed_hosts"}
    assert host in refused["message"] and "[http] allowed_hosts" in refused["message"]
    # Everything behind the front: the MCP mount, the UI, the WebSocket.
    assert front.request("POST", "/mcp", {"Content-Type": "application/json"}, b"{}", host=host)[0] == 400
    assert front.request("GET", "/", host=host)[0] == 400
    assert front.request("GET", "/api/v1/agent/ws", WS_HANDSHAKE, host=host)[0] == 400


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "[::1]:{port}", "localhost",
                                  "LOCALHOST:{port}", "gpubox.lan", "gpubox.lan:{port}", "GPUBox.LAN:443"])
def test_a_loopback_front_answers_loopback_and_configured_names(front, host):
    status, _, body = front.request("GET", "/api/v1/auth/session", host=host.format(port=front.port))
    assert status == 401 and json.loads(body)["error"]["code"] == "unauthorized"  # reached the route


def _wide_port(root: Path, config: str) -> tuple[DaemonProcess, Front]:
    daemon = start(root, "--http", "0.0.0.0:0", config=config)
    return daemon, Front(daemon)


def test_a_front_beyond_loopback_checks_host_only_when_told(tmp_path):
    if socket.gethostbyname("localhost") != "127.0.0.1":
        pytest.skip("localhost does not resolve to 127.0.0.1 here")
    fronts = {}
    try:
        for name, config in (("open", ""), ("told", '[http]\nallowed_hosts = ["gpubox.lan"]\n')):
            (tmp_path / name).mkdir()
            fronts[name] = _wide_port(tmp_path / name, config)[1]
        # As before: a LAN front is reached by names the daemon cannot know.
        assert fronts["open"].request("GET", "/api/v1/auth/session", host="gpubox.example:1")[0] == 401
        told = fronts["told"]
        status, _, body = told.request("GET", "/api/v1/auth/session", host="evil.example")
        assert error_of(status, body, 400)["details"]["setting"] == "[http] allowed_hosts"
        for host in ("gpubox.lan:8765", f"localhost:{told.port}", f"0.0.0.0:{told.port}"):
            assert told.request("GET", "/api/v1/auth/session", host=host)[0] == 401, host
    finally:
        for front in fronts.values():
            front.daemon.kill()
