"""The agent's dial (``gpuplaned.uplink.dial``) against real TCP listeners, and a real agent daemon
that redials on its backoff when a proxy in front of the server has no backend (issue 28).

A server that accepts and then closes or resets before it answers the WebSocket upgrade (what a
TCP proxy or a load balancer with a dead backend does) fails the dial at once with the reason;
trio-websocket alone waited its whole connect timeout (10 s) for it.
"""

from __future__ import annotations

import functools
import json
import re
import socket
import struct
import threading
import time

import pytest
import trio
from helpers import DaemonProcess, wait_for
from trio_websocket import ConnectionRejected, ConnectionTimeout, HandshakeError, serve_websocket

from gpuplaned.actors.uplink import CONNECT_TIMEOUT_S
from gpuplaned.uplink.dial import HungUp, open_agent_ws

HEADERS = [(b"Authorization", b"Bearer gpp_test")]


def dial(port: int, path: str = "/api/v1/agent/ws"):
    return open_agent_ws(f"ws://127.0.0.1:{port}{path}", headers=HEADERS, max_message_size=1 << 20,
                         connect_timeout=CONNECT_TIMEOUT_S, disconnect_timeout=2.0)


async def serve(nursery: trio.Nursery, handler) -> int:
    listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    return listeners[0].socket.getsockname()[1]


async def close_at_once(stream: trio.SocketStream) -> None:
    await stream.aclose()


async def reset_at_once(stream: trio.SocketStream) -> None:
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


@pytest.mark.parametrize("hang_up", [close_at_once, reset_at_once])
async def test_a_server_that_hangs_up_before_the_upgrade_fails_the_dial_at_once(nursery, hang_up):
    port = await serve(nursery, hang_up)
    began = trio.current_time()
    with pytest.raises(HungUp) as raised:
        async with dial(port):
            pytest.fail("no WebSocket can have been opened")
    took = trio.current_time() - began
    assert took < 2.0, f"the dial took {took:.2f} s"  # it waited CONNECT_TIMEOUT_S (10 s) before
    # A FIN, or a reset when the request reached a socket already closed: either way at once.
    assert str(raised.value) in ("the server closed the connection before it answered the WebSocket upgrade",
                                 "the server reset the connection before it answered the WebSocket upgrade")


async def test_a_server_that_does_not_speak_tls_fails_a_wss_dial_at_once(nursery):
    async def plain_http(stream: trio.SocketStream) -> None:
        async with stream:
            await stream.send_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            await trio.sleep_forever()

    port = await serve(nursery, plain_http)
    began = trio.current_time()
    with pytest.raises(HungUp, match=r"^the TLS handshake with the server failed \(.+\) before it answered"):
        async with open_agent_ws(f"wss://127.0.0.1:{port}/api/v1/agent/ws", headers=HEADERS, max_message_size=1 << 20,
                                 connect_timeout=CONNECT_TIMEOUT_S, disconnect_timeout=2.0):
            pytest.fail("no WebSocket can have been opened")
    assert trio.current_time() - began < 2.0


async def test_a_server_that_says_nothing_still_times_out(nursery, mock_clock):
    mock_clock.autojump_threshold = 0.1  # real time idle before the clock jumps: the connect itself is real

    async def silent(stream: trio.SocketStream) -> None:
        async with stream:
            await trio.sleep_forever()

    port = await serve(nursery, silent)
    began = trio.current_time()
    with pytest.raises(ConnectionTimeout, match=r"^no answer to the WebSocket upgrade within 10 s$"):
        async with dial(port):
            pytest.fail("no WebSocket can have been opened")
    assert trio.current_time() - began == pytest.approx(CONNECT_TIMEOUT_S, abs=0.5)


async def test_nothing_listening_fails_with_the_connect_error(nursery):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(HandshakeError) as raised:
            async with dial(port):
                pytest.fail("no WebSocket can have been opened")
    assert str(raised.value) == f"cannot connect to 127.0.0.1:{port}: connection refused"
    assert isinstance(raised.value.__cause__, OSError)


async def test_an_http_refusal_is_raised_as_itself_with_its_status(nursery):
    body = json.dumps({"error": {"code": "forbidden", "message": "token lacks the agent scope"}}).encode()

    async def refuse(stream: trio.SocketStream) -> None:
        async with stream:
            request = b""
            while b"\r\n\r\n" not in request:
                request += await stream.receive_some(4096)
            await stream.send_all(b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n"
                                   b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            await trio.sleep_forever()

    port = await serve(nursery, refuse)
    with pytest.raises(ConnectionRejected) as raised:
        async with dial(port):
            pytest.fail("no WebSocket can have been opened")
    assert raised.value.status_code == 403 and raised.value.body == body


async def test_a_websocket_opens_and_the_callers_error_comes_out_as_itself(nursery):
    seen: list[tuple[str, str]] = []

    async def echo(request) -> None:
        seen.append((request.path, dict(request.headers).get(b"authorization", b"").decode()))
        ws = await request.accept()
        try:
            while True:
                await ws.send_message(await ws.get_message())
        except Exception:  # noqa: BLE001 - the client went away
            return

    server = await nursery.start(serve_websocket, echo, "127.0.0.1", 0, None)
    port = server.port

    class Stop(Exception):
        pass

    with pytest.raises(Stop):
        async with dial(port) as ws:
            await ws.send_message("hello")
            assert await ws.get_message() == "hello"
            raise Stop
    assert seen == [("/api/v1/agent/ws", "Bearer gpp_test")]


class HangUpAtOnce:
    """A real TCP listener, on a thread, that accepts each connection and closes it at once (FIN):
    a load balancer whose backend is down. The connect always succeeds; nothing answers."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(5)


@pytest.mark.e2e
def test_an_agent_behind_a_balancer_with_no_backend_redials_on_its_backoff(tmp_path):
    balancer = HangUpAtOnce()
    config = tmp_path / "gpuplaned.toml"
    config.write_text("[uplink]\nreconnect_max_s = 0.5\n")
    agent = DaemonProcess(tmp_path / "agent", "--role", "agent", "--server", balancer.url, "--gpus", "fake:1",
                          "--config", str(config), env={"GPUPLANE_TOKEN": "gpp_not_checked_here"})
    try:
        agent.start()  # not READY without its server: the runner waits for the hello's answer
        wait_for(lambda: balancer.accepted >= 1, 20, interval=0.05, what="the agent's first dial")
        began, dials = time.monotonic(), balancer.accepted
        wait_for(lambda: balancer.accepted >= dials + 4, 6, interval=0.05, what="four more dials")
        took = time.monotonic() - began
        # Each dial fails at once and the next comes within reconnect_max_s (0.5 s), so four take
        # about 2 s at most; waiting CONNECT_TIMEOUT_S (10 s) a dial, they took 40 s.
        assert took < 5.0, f"four redials took {took:.1f} s"
        downs = [line for line in agent.log().splitlines() if "dialling again in" in line]
        assert len(downs) >= 4
        # Closed (FIN), or reset when the request reached a socket already closed.
        odd = [line for line in downs if not re.search(r"the server (closed|reset) the connection before it answered "
                                                       r"the WebSocket upgrade\); dialling again", line)]
        assert not odd
    finally:
        agent.kill()
        balancer.close()
