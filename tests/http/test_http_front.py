"""The HTTP front: a real daemon on loopback TCP, bearer tokens with scopes on every route.

The auth matrix is generated from the app's own route table, so a new route is covered
(and must pass) without anyone remembering to add it here.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
from urllib.parse import urlsplit

import pytest
import trio
from helpers import wait_for
from trio_websocket import ConnectionClosed

from gpuplaned.http.app import create_app
from gpuplaned.http.scopes import is_public, required_scope
from gpuplaned.uplink.dial import open_agent_ws

pytestmark = pytest.mark.e2e

# Harmless values for path parameters: the right token must get past the gate, and what
# the route then does must not stop or disturb the daemon under test.
PARAMS = {"name": "nope", "verb": "nope", "job_id": "job_nope", "key": "nope"}
SKIP_RIGHT_SCOPE = {("POST", "/api/v1/daemon/shutdown")}  # it would work: tested on its own


def routes() -> list[tuple[str, str, bool]]:
    """(method, rule, websocket) for every route under /api/v1."""
    app, _ = create_app(None)  # handlers close over the context; building the table needs none
    out = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/v1/"):
            continue
        methods = sorted((rule.methods or set()) - {"HEAD", "OPTIONS"})
        for method in methods:
            out.append((method, rule.rule, bool(getattr(rule, "websocket", False))))
    return out


def concrete(rule: str) -> str:
    return re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", lambda m: PARAMS.get(m.group(1), "x"), rule)


class Front:
    def __init__(self, daemon) -> None:
        self.daemon = daemon
        info = daemon.client().get("/api/v1/daemon")
        self.url = info["endpoints"]["http"]
        parts = urlsplit(self.url)
        self.host, self.port = parts.hostname, parts.port

    def request(self, method: str, path: str, token: str | None = None, body=None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        data = json.dumps(body) if body is not None else ("{}" if method == "POST" else None)
        try:
            conn.request(method, path, data, headers)
            response = conn.getresponse()
            if response.getheader("Content-Type", "").startswith("text/event-stream"):
                return response.status, {}  # a live stream: its head is the answer
            raw = response.read()
            return response.status, json.loads(raw) if raw else {}
        finally:
            conn.close()

    def token(self, name: str, scopes: list[str], **extra) -> str:
        reply = self.daemon.client().post("/api/v1/tokens", {"name": name, "scopes": scopes, **extra})
        return reply["secret"]


@pytest.fixture
def front(daemon_factory):
    daemon = daemon_factory("--gpus=fake:1").start()
    daemon.wait_ready()
    return Front(daemon)


@pytest.fixture
def tokens(front):
    return {scope: front.token(f"t-{scope}", [scope]) for scope in ("read", "write", "admin", "agent", "sdk")}


def test_the_front_listens_on_loopback_and_says_where(front):
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", front.url)
    actor = front.daemon.client().get("/api/v1/actors/http")["actor"]
    assert actor["stats"]["url"] == front.url


def test_auth_matrix_over_every_route(front, tokens):
    """An expired token on every route: tests/http/test_expiry.py."""
    table = [r for r in routes() if not r[2]]
    assert len(table) >= 15, table
    wrong = "gpp_01ABCDEFGHJKMNPQRSTVWXYZ01_" + "x" * 43
    for method, rule, _ in table:
        if is_public(rule):
            continue  # signing in needs no credentials: tests/http/test_ui_auth.py
        path = concrete(rule)
        needed = required_scope(rule, method)
        for label, token in (("no token", None), ("wrong token", wrong)):
            status, body = front.request(method, path, token)
            assert status == 401, (label, method, rule, status, body)
            assert body["error"]["code"] == "unauthorized"
        lacking = "agent" if needed == "read" else "read"
        status, body = front.request(method, path, tokens[lacking])
        assert status == 403, (method, rule, lacking, status, body)
        assert body["error"]["details"]["needed"] == needed
        if (method, rule) in SKIP_RIGHT_SCOPE:
            continue
        status, body = front.request(method, path, tokens[needed])
        assert status not in (401, 403), (method, rule, needed, status, body)
        assert status < 500, (method, rule, status, body)


def test_a_secret_never_reaches_the_log(front, tokens):
    front.request("GET", "/api/v1/jobs", tokens["read"])
    front.request("GET", "/api/v1/jobs", "gpp_bogus_" + "y" * 40)
    log = front.daemon.log()
    for secret in tokens.values():
        assert secret not in log and secret.split("_", 2)[2] not in log
    assert "y" * 40 not in log


def test_a_token_in_the_url_is_refused(front, tokens):
    status, body = front.request("GET", f"/api/v1/jobs?token={tokens['read']}", tokens["read"])
    assert status == 400 and "Authorization header" in body["error"]["message"]
    assert tokens["read"] not in json.dumps(body) and tokens["read"] not in front.daemon.log()


def test_revoked_tokens_stop_working_at_once(front, tokens):
    assert front.request("GET", "/api/v1/nodes", tokens["read"])[0] == 200
    front.daemon.client().post("/api/v1/tokens/t-read/revoke")
    status, body = front.request("GET", "/api/v1/nodes", tokens["read"])
    assert status == 401 and "revoked" in body["error"]["message"]


def test_the_unix_socket_needs_no_token(front):
    assert front.daemon.client().get("/api/v1/tokens")["tokens"] == []


def test_shutdown_over_tcp_needs_admin_and_then_works(front, tokens):
    assert front.request("POST", "/api/v1/daemon/shutdown", tokens["write"])[0] == 403
    status, _ = front.request("POST", "/api/v1/daemon/shutdown", tokens["admin"])
    assert status == 202
    assert front.daemon.wait_exit() == 0


def test_no_http_front_when_turned_off(daemon_factory):
    daemon = daemon_factory("--no-http").start()
    info = daemon.wait_ready()
    assert info["endpoints"]["http"] is None
    assert "http" not in [a["name"] for a in daemon.client().get("/api/v1/actors")["actors"]]


def test_a_busy_port_fails_the_start_before_ready(daemon_factory):
    """Another program holds the port: gpuplaned exits 1 and says so, and never claims READY
    without the front it was told to serve."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        daemon = daemon_factory(f"--http=127.0.0.1:{port}").start()
        assert daemon.wait_exit() == 1
    log = daemon.log()
    assert (f"gpuplaned: cannot listen on 127.0.0.1:{port}: address already in use (another program holds it; "
            "set another address with --http HOST:PORT (or [http] listen in the config), or --no-http)") in log
    assert " ready (pid" not in log
    assert not daemon.portfile.exists()


async def test_agent_websocket_needs_an_agent_token_and_answers_hello(front, tokens):
    url = front.url.replace("http://", "ws://") + "/api/v1/agent/ws"
    for token, status in ((None, 401), (tokens["read"], 403)):
        # A plain handshake (trio-websocket leaves its socket open when it is rejected).
        conn = http.client.HTTPConnection(front.host, front.port, timeout=10)
        headers = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                   "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            conn.request("GET", "/api/v1/agent/ws", headers=headers)
            response = conn.getresponse()
            assert response.status == status
            assert json.loads(response.read())["error"]["code"] in ("unauthorized", "forbidden")
        finally:
            conn.close()
    # The agent's own dial, which closes its socket whichever side closes first (trio-websocket's
    # open_websocket_url leaves it open when the server closes first, as it does after hello_err).
    def agent_ws():
        return open_agent_ws(url, headers=[(b"Authorization", f"Bearer {tokens['agent']}".encode())],
                             max_message_size=1 << 20, connect_timeout=10, disconnect_timeout=5)

    async with agent_ws() as ws:
        await ws.send_message(json.dumps({"type": "ping"}))
        assert json.loads(await ws.get_message())["type"] == "pong"
        await ws.send_message(json.dumps({"type": "hello", "node_name": "remote-1", "agent_version": "0.1.0",
                                          "gpus": [{"index": 0, "model": "H100", "memory_mb": 81559}]}))
        ok = json.loads(await ws.get_message())
        assert ok["type"] == "hello_ok" and ok["node_id"].startswith("nd_")
        await ws.send_message(json.dumps({"type": "hello", "node_name": 5}))  # one hello a connection
        assert json.loads(await ws.get_message())["type"] == "error"
        await ws.send_message("not json")
        assert json.loads(await ws.get_message())["type"] == "error"
    local = front.daemon.client().get("/api/v1/nodes")["nodes"]
    async with agent_ws() as ws:  # the server's own node is never an agent's
        await ws.send_message(json.dumps({"type": "hello", "node_name": [n["name"] for n in local
                                                                         if n["connected"]][0],
                                          "agent_version": "x", "gpus": []}))
        refused = json.loads(await ws.get_message())
        assert refused["type"] == "hello_err" and "the server's own node" in refused["message"], refused
        with trio.fail_after(10), pytest.raises(ConnectionClosed):  # and the server closes
            await ws.get_message()
    with trio.fail_after(5):
        nodes = front.daemon.client().get("/api/v1/nodes")["nodes"]
    remote = [n for n in nodes if n["name"] == "remote-1"][0]
    assert remote["status"] == "OFFLINE" and remote["gpus"][0]["model"] == "H100"


def test_listening_beyond_loopback_warns_about_tls(daemon_factory):
    daemon = daemon_factory("--http=0.0.0.0:0", "--no-http", name="wide").start()
    daemon.wait_ready()  # --no-http wins over --http: the flag says no front at all
    assert daemon.client().get("/api/v1/daemon")["endpoints"]["http"] is None
    wide = daemon_factory("--http=0.0.0.0:0", name="wide2").start()
    info = wide.wait_ready()
    assert info["endpoints"]["http"].startswith("http://0.0.0.0:")
    wait_for(lambda: "without TLS" in wide.log(), what="the TLS warning")
    assert "put TLS in front" in wide.log()
