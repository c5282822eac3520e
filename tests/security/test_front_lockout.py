"""The TCP front cannot be locked out without credentials (issue 29, item 8), on a real daemon
over real loopback sockets; each attack runs while an authenticated client is served.

- sockets that reconnect as they are closed, sending nothing, never keep a signed-in client out
  (a newcomer closes the oldest connection not yet authenticated);
- a request without credentials is answered 401 at its headers, its slow body never awaited,
  and its connection closed;
- one token's streams hold only its share of the slots;
- MCP needs the ``read`` scope, and one token holds only ``[http] mcp_sessions_per_token`` sessions.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest
from helpers import DaemonProcess, kill_processes_with_env, wait_for

from gpuplaned.http.connections import ConnectionCap

pytestmark = pytest.mark.e2e

CAP = 16
PER_TOKEN = 4
MCP_SESSIONS = 3
CONFIG = f"""
[http]
keep_alive_timeout_s = 5.0
body_timeout_s = 30.0
max_connections = {CAP}
max_connections_per_token = {PER_TOKEN}
agent_connections_reserved = 2
mcp_sessions_per_token = {MCP_SESSIONS}
"""


class Front:
    def __init__(self, daemon: DaemonProcess) -> None:
        self.daemon = daemon
        url = urlsplit(daemon.client().get("/api/v1/daemon")["endpoints"]["http"])
        self.address = (url.hostname, url.port)
        self.made = 0

    def token(self, *scopes: str) -> str:
        self.made += 1  # the module's tests share the daemon: names are unique
        body = {"name": f"t{self.made}", "scopes": list(scopes)}
        return self.daemon.client().post("/api/v1/tokens", body)["secret"]

    def get(self, path: str, token: str, timeout: float = 5.0) -> int:
        """One request on a fresh connection, as a client does after its connection was closed."""
        conn = http.client.HTTPConnection(*self.address, timeout=timeout)
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
            response = conn.getresponse()
            response.read()
            return response.status
        finally:
            conn.close()

    def stats(self) -> dict:
        return self.daemon.client().get("/api/v1/actors/http")["actor"]["stats"]


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    root = tmp_path_factory.mktemp("lockout")
    (root / "gpuplaned.toml").write_text(CONFIG)
    daemon = DaemonProcess(root / "d", "--gpus=fake:1", "--node-name=n1", "--config", str(root / "gpuplaned.toml"))
    daemon.start()
    try:
        daemon.wait_ready()
        yield Front(daemon)
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


def _raw(address: tuple[str, int], timeout: float = 5.0) -> socket.socket:
    sock = socket.create_connection(address, timeout=timeout)
    return sock


class Reconnecting(threading.Thread):
    """``sockets`` connections that send nothing; each one the server closes is opened again."""

    def __init__(self, address: tuple[str, int], sockets: int, limit_s: float = 20.0) -> None:
        super().__init__(daemon=True)
        self.address, self.sockets, self.limit_s = address, sockets, limit_s
        self.stop = threading.Event()
        self.reconnects = 0

    def run(self) -> None:
        open_ = [_raw(self.address) for _ in range(self.sockets)]
        for sock in open_:
            sock.setblocking(False)
        deadline = time.monotonic() + self.limit_s
        try:
            while not self.stop.is_set() and time.monotonic() < deadline:
                for i, sock in enumerate(open_):
                    try:
                        gone = sock.recv(4096) == b""
                    except BlockingIOError:
                        continue
                    except OSError:
                        gone = True
                    if gone:
                        sock.close()
                        open_[i] = _raw(self.address)
                        open_[i].setblocking(False)
                        self.reconnects += 1
                time.sleep(0.005)
        finally:
            for sock in open_:
                sock.close()


def test_reconnecting_sockets_never_keep_a_signed_in_client_out(front):
    """The issue's 300 sockets, scaled to the cap: on the old front 0 of 47 requests got through."""
    token = front.token("read")
    attack = Reconnecting(front.address, CAP * 3)
    attack.start()
    try:
        wait_for(lambda: front.stats()["connections"] >= CAP - 1, what="the attack to fill the front")
        statuses = [front.get("/api/v1/daemon", token) for _ in range(20)]
        assert statuses == [200] * 20
        assert front.stats()["evicted_connections"] > 0 and attack.reconnects > 0
    finally:
        attack.stop.set()
        attack.join(10)


def test_a_request_without_credentials_is_answered_at_its_headers(front):
    """A slow 100 kB body held its slot for body_timeout_s (30 s), waiting to be read for a 401."""
    for authorization in ({}, {"Authorization": "Bearer gpp_wrong"}):
        sock = _raw(front.address)
        try:
            lines = ["POST /api/v1/jobs HTTP/1.1", "Host: localhost", "Content-Type: application/json",
                     "Content-Length: 100000", *(f"{k}: {v}" for k, v in authorization.items())]
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + b'{"comm')  # and no more of the body
            started = time.monotonic()
            received = b""
            while chunk := sock.recv(65536):  # until the server closes
                received += chunk
            took = time.monotonic() - started
        finally:
            sock.close()
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 401"), head
        assert b"connection: close" in head.lower()
        assert json.loads(body)["error"]["code"] == "unauthorized"
        assert took < 3.0  # at once, not after the body's 30 s


def test_one_token_s_streams_hold_only_its_share(front):
    """One read token with 240 SSE streams kept everyone else out."""
    hog = front.token("read")
    streams = []
    try:
        for _ in range(CAP):
            sock = _raw(front.address)
            sock.sendall(f"GET /api/v1/events/stream HTTP/1.1\r\nHost: localhost\r\n"
                         f"Authorization: Bearer {hog}\r\n\r\n".encode())
            streams.append(sock)
        for sock in streams[:PER_TOKEN]:
            assert sock.recv(12).startswith(b"HTTP/1.1 200")
        wait_for(lambda: front.stats()["connections"] >= CAP - 1, what="the streams to fill the front")
        other = front.token("read")
        assert [front.get("/api/v1/daemon", other) for _ in range(5)] == [200] * 5
    finally:
        for sock in streams:
            sock.close()


def _mcp_initialize(front: Front, token: str) -> tuple[int, str | None]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "lockout-test", "version": "1"}}})
    conn = http.client.HTTPConnection(*front.address, timeout=30)
    try:
        conn.request("POST", "/mcp", body, {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                                            "Accept": "application/json, text/event-stream"})
        response = conn.getresponse()
        response.read()
        return response.status, response.getheader("Mcp-Session-Id")
    finally:
        conn.close()


def test_mcp_needs_read_and_one_token_holds_only_its_share_of_sessions(front):
    """An sdk token opened 972 MCP sessions in 23 s, and a write token's initialize then got 503."""
    assert _mcp_initialize(front, front.token("sdk"))[0] == 403
    hog = front.token("read")
    opened = [_mcp_initialize(front, hog) for _ in range(MCP_SESSIONS)]
    assert all(status == 200 and session for status, session in opened)
    assert _mcp_initialize(front, hog)[0] == 503
    status, session = _mcp_initialize(front, front.token("write"))
    assert status == 200 and session


# --- the slots, one ConnectionCap -----------------------------------------------------------------------


async def test_an_address_holds_its_share_and_agents_keep_theirs():  # CancelScope reads trio's clock
    cap = ConnectionCap(limit=6, per_address=3, per_token=2, agent_reserve=2)
    a = [cap.admit(("10.0.0.1", port)) for port in range(1, 4)]
    for port in (1, 2, 3):
        cap.vouch(("10.0.0.1", port), "t1" if port < 3 else "t2")
    assert [slot.holder for slot in a] == ["t1", "t1", "t2"]
    assert cap.admit(("10.0.0.1", 4)) is None  # its share, all held
    b = [cap.admit(("10.0.0.2", port)) for port in range(1, 4)]
    assert all(b) and cap.open == 6
    cap.vouch(("10.0.0.2", 1), "t3")  # 4 held by non-agents: the rest is the agents'
    cap.vouch(("10.0.0.2", 2), "t4")
    assert b[1].holder is None
    cap.vouch(("10.0.0.2", 2), "agent1", agent=True)
    assert b[1].holder == "agent1"
    newcomer = cap.admit(("10.0.0.3", 1))  # full: the one not authenticated gives way
    assert newcomer is not None and b[2].scope.cancel_called and cap.evicted == 1
    cap.vouch(("10.0.0.3", 1), "agent2", agent=True)
    assert cap.admit(("10.0.0.3", 2)) is None and cap.refused == 2


async def test_a_quiet_connection_gives_way_before_one_that_asked():
    """A client's fresh connection is anonymous while its request is authenticated: sockets that
    say nothing, however many arrive meanwhile, are closed before it."""
    cap = ConnectionCap(limit=3)
    working = cap.admit(("127.0.0.1", 1))
    cap.asked(("127.0.0.1", 1))
    quiet = [cap.admit(("127.0.0.1", port)) for port in (2, 3)]
    for port in range(4, 10):
        assert cap.admit(("127.0.0.1", port)) is not None
    assert not working.scope.cancel_called and all(slot.scope.cancel_called for slot in quiet)
    assert cap.evicted == 6 and ("127.0.0.1", 1) in cap.slots
