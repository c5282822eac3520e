"""tests/netproxy.py with plain sockets: forwarding both ways with byte counts, half-close,
cut (existing connections reset, new ones refused until restore), stall (nothing moves either
way, the connection stays open, everything arrives in order after restore) and retarget."""

from __future__ import annotations

import socket
import threading

import pytest
from helpers import wait_for
from netproxy import TcpProxy


class EchoServer:
    """Echoes every connection's bytes back; on EOF it half-closes after echoing."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(65536):
                    conn.sendall(data)
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() thread
        except OSError:
            pass
        self.listener.close()


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def proxy(echo):
    with TcpProxy(echo.address) as p:
        yield p


def dial(proxy: TcpProxy, timeout: float = 5.0) -> socket.socket:
    sock = socket.create_connection(proxy.address, timeout=timeout)
    return sock


def is_refused(address: tuple[str, int]) -> bool:
    """Dial, write, read: True when the connection is reset or closed at any of these steps
    (on loopback the proxy's RST can even beat ``connect()``'s return)."""
    try:
        with socket.create_connection(address, timeout=5) as sock:
            sock.sendall(b"x")
            return sock.recv(10) == b""
    except OSError:
        return True


def is_reset(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(10) == b""
    except OSError:
        return True


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise AssertionError(f"EOF after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def test_forwards_both_ways_and_counts(proxy):
    payload = bytes(range(256)) * 8192  # 2 MiB: more than the proxy buffers at once
    with dial(proxy) as sock:
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        assert recv_exactly(sock, len(payload)) == payload
        sender.join()
    assert proxy.bytes_up == len(payload)
    wait_for(lambda: proxy.bytes_down == len(payload), what="the echo counted downstream")
    assert proxy.accepted == 1


def test_half_close_passes_through(proxy):
    with dial(proxy) as sock:
        sock.sendall(b"last words")
        sock.shutdown(socket.SHUT_WR)
        assert recv_exactly(sock, 10) == b"last words"
        assert sock.recv(10) == b""  # the server's FIN, passed on once drained
    wait_for(lambda: proxy.active == 0, what="the finished pair to be closed")


def test_cut_resets_and_refuses_until_restore(proxy, echo):
    with dial(proxy) as sock:
        sock.sendall(b"ping")
        assert recv_exactly(sock, 4) == b"ping"
        proxy.cut()
        assert proxy.active == 0
        assert is_reset(sock)
    before = echo.connections
    assert is_refused(proxy.address)
    assert proxy.refused >= 1 and echo.connections == before  # never reached the target

    proxy.restore()
    with dial(proxy) as sock:
        sock.sendall(b"again")
        assert recv_exactly(sock, 5) == b"again"


def test_stall_holds_bytes_then_delivers_in_order(proxy):
    with dial(proxy) as sock:
        sock.sendall(b"a")
        assert recv_exactly(sock, 1) == b"a"
        up_before = proxy.bytes_up
        proxy.stall()
        sock.sendall(b"bcd")
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(10)
        assert proxy.bytes_up == up_before  # not even read: a black hole
        assert proxy.active == 1            # and the connection is still open

        # A peer that keeps writing into the hole ends up blocked by TCP flow control.
        sock.setblocking(False)
        stuck = 0
        with pytest.raises(BlockingIOError):
            for _ in range(100_000):
                stuck += sock.send(b"e" * 65536)
        sock.settimeout(5)

        proxy.restore()
        assert recv_exactly(sock, 3 + stuck) == b"bcd" + b"e" * stuck
    assert proxy.bytes_up == 1 + 3 + stuck


def test_stall_holds_new_connections_too(proxy):
    proxy.stall()
    with dial(proxy) as sock:
        sock.sendall(b"held")
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(10)
        proxy.restore()
        sock.settimeout(5)
        assert recv_exactly(sock, 4) == b"held"


def test_retarget_moves_new_connections(proxy, echo):
    other = EchoServer()
    try:
        with dial(proxy) as old:
            old.sendall(b"1")
            assert recv_exactly(old, 1) == b"1"
            proxy.retarget(other.address)
            assert is_reset(old)
        with dial(proxy) as new:
            new.sendall(b"2")
            assert recv_exactly(new, 1) == b"2"
        assert other.connections == 1 and echo.connections == 1
    finally:
        other.close()


def test_target_down_resets_the_client():
    unused = socket.socket()
    unused.bind(("127.0.0.1", 0))  # bound, never listening: connecting to it is refused
    try:
        with TcpProxy(unused.getsockname()[:2]) as p:
            assert is_refused(p.address)
            assert p.refused == 1
    finally:
        unused.close()
