"""A TCP proxy for tests that break the network between two real processes.

``TcpProxy(target)`` listens on 127.0.0.1 (a free port) and forwards every connection to
``target``. One background thread runs a selector loop over non-blocking sockets, so it works
from plain synchronous pytest tests and costs nothing while idle.

- ``cut()``: every connection is reset (RST: SO_LINGER 0) and new ones are accepted and reset
  at once, until ``restore()``. The peers see "connection reset", as after a cable pull with
  a router that answers.
- ``stall()``: connections stay open but no byte moves either way (a black hole: nothing is
  read, so the peers' send buffers fill and their writes block), until ``restore()``. New
  connections are accepted and held the same way. A peer finds out only through its own
  timers (heartbeats), which is what a stall test checks.
- ``restore()``: back to forwarding; stalled bytes then flow in order.
- ``retarget(target)``: later connections go to a new address (a server restarted on another
  port); live ones are reset.

Counters (``bytes_up`` client -> target, ``bytes_down`` target -> client, ``accepted``,
``refused``, ``active``) let a test check that traffic did or did not pass. Every control call
runs inside the loop thread and returns once done: after ``cut()`` returns, no connection of
the proxy is open any more.
"""

from __future__ import annotations

import selectors
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

# Per direction: read no more from a side while this much waits to be written to the other.
BUFFER_LIMIT = 256 * 1024
RECV_SIZE = 64 * 1024


def _reset(sock: socket.socket) -> None:
    """Close with RST instead of FIN: the peer's next read or write fails at once."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class _Side:
    """One socket of a proxied pair and the bytes waiting to be written to it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pending = bytearray()
        self.read_eof = False     # its peer process sent FIN: nothing more to read from it
        self.write_shut = False   # we sent it FIN after its peer's EOF and the pending bytes


class _Pair:
    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = _Side(client)
        self.upstream = _Side(upstream)

    def other(self, side: _Side) -> _Side:
        return self.upstream if side is self.client else self.client

    def sides(self) -> tuple[_Side, _Side]:
        return self.client, self.upstream


class TcpProxy:
    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1") -> None:
        self.target = target
        self.bytes_up = 0
        self.bytes_down = 0
        self.accepted = 0
        self.refused = 0
        self.mode = "forward"  # "forward" | "stall" | "cut"
        self._listener = socket.create_server((host, 0), backlog=128)
        self._listener.setblocking(False)
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._pairs: dict[socket.socket, tuple[_Pair, _Side]] = {}
        self._registered: dict[socket.socket, int] = {}
        self._calls: list[tuple[Callable[[], Any], threading.Event, list]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=f"tcpproxy:{self.port}", daemon=True)
        self._thread.start()

    # -- the test's side --------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def url(self) -> str:
        return f"http://{self.address[0]}:{self.port}"

    @property
    def active(self) -> int:
        return self._call(lambda: len({id(pair) for pair, _ in self._pairs.values()}))

    def cut(self) -> None:
        self._call(self._cut)

    def stall(self) -> None:
        self._call(lambda: self._set_mode("stall"))

    def restore(self) -> None:
        self._call(lambda: self._set_mode("forward"))

    def retarget(self, target: tuple[str, int]) -> None:
        def move() -> None:
            self.target = target
            self._reset_all()
        self._call(move)

    def close(self) -> None:
        if self._closed:
            return
        self._call(self._shutdown)
        self._thread.join(5)
        self._wake_w.close()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` in the loop thread and wait for it: the loop owns every socket."""
        if threading.current_thread() is self._thread:
            return fn()
        done = threading.Event()
        result: list = []
        with self._lock:
            if self._closed:
                raise RuntimeError("the proxy is closed")
            self._calls.append((fn, done, result))
        self._wake_w.send(b"x")
        if not done.wait(10):
            raise RuntimeError("the proxy's loop did not answer within 10 s")
        if result and isinstance(result[0], BaseException):
            raise result[0]
        return result[0] if result else None

    # -- the loop thread ---------------------------------------------------------------

    def _loop(self) -> None:
        while not self._closed:
            for key, events in self._selector.select():
                sock = key.fileobj
                if sock is self._wake_r:
                    self._run_calls()
                elif sock is self._listener:
                    self._accept()
                elif sock in self._pairs:
                    pair, side = self._pairs[sock]  # type: ignore[index]
                    if events & selectors.EVENT_READ:
                        self._read(pair, side)
                    if events & selectors.EVENT_WRITE and sock in self._pairs:
                        self._write(pair, side)
                    if sock in self._pairs:
                        self._update(pair)
        self._selector.close()

    def _run_calls(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            calls, self._calls = self._calls, []
        for fn, done, result in calls:
            try:
                result.append(fn())
            except BaseException as exc:  # handed to the calling thread
                result.append(exc)
            done.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if self.mode == "cut":
                self.refused += 1
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                self.refused += 1
                _reset(client)
                continue
            self.accepted += 1
            for sock in (client, upstream):
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = _Pair(client, upstream)
            for side in pair.sides():
                self._pairs[side.sock] = (pair, side)
            self._update(pair)

    def _read(self, pair: _Pair, side: _Side) -> None:
        try:
            data = side.sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(pair)
            return
        if not data:
            side.read_eof = True
            self._maybe_shut(pair)
            return
        if side is pair.client:
            self.bytes_up += len(data)
        else:
            self.bytes_down += len(data)
        pair.other(side).pending += data
        self._write(pair, pair.other(side))

    def _write(self, pair: _Pair, side: _Side) -> None:
        if self.mode != "forward" or not side.pending or side.sock not in self._pairs:
            return
        try:
            sent = side.sock.send(side.pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(pair)
            return
        del side.pending[:sent]
        self._maybe_shut(pair)

    def _maybe_shut(self, pair: _Pair) -> None:
        """Pass a half-close on once its direction is drained; close when both are done."""
        if self.mode != "forward" or pair.client.sock not in self._pairs:
            return
        for side in pair.sides():
            to = pair.other(side)
            if side.read_eof and not to.pending and not to.write_shut:
                try:
                    to.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                to.write_shut = True
        if pair.client.write_shut and pair.upstream.write_shut:
            self._drop(pair, rst=False)

    def _update(self, pair: _Pair) -> None:
        """Register for what each side can usefully do now (nothing at all while stalled)."""
        if pair.client.sock not in self._pairs:
            return
        for side in pair.sides():
            events = 0
            if self.mode == "forward":
                if not side.read_eof and len(pair.other(side).pending) < BUFFER_LIMIT:
                    events |= selectors.EVENT_READ
                if side.pending:
                    events |= selectors.EVENT_WRITE
            self._watch(side.sock, events)

    def _watch(self, sock: socket.socket, events: int) -> None:
        # A selector cannot hold a socket with no events: such a socket is left unregistered.
        now = self._registered.get(sock, 0)
        if events == now:
            return
        if not events:
            self._selector.unregister(sock)
            del self._registered[sock]
        elif not now:
            self._selector.register(sock, events, None)
            self._registered[sock] = events
        else:
            self._selector.modify(sock, events, None)
            self._registered[sock] = events

    def _drop(self, pair: _Pair, rst: bool = True) -> None:
        for side in pair.sides():
            if self._pairs.pop(side.sock, None) is None:
                continue
            self._watch(side.sock, 0)
            if rst:
                _reset(side.sock)
            else:
                side.sock.close()

    def _pairs_list(self) -> list[_Pair]:
        seen: dict[int, _Pair] = {}
        for pair, _ in self._pairs.values():
            seen[id(pair)] = pair
        return list(seen.values())

    def _reset_all(self) -> None:
        for pair in self._pairs_list():
            self._drop(pair)

    def _cut(self) -> None:
        self.mode = "cut"
        self._reset_all()
        # Connections the kernel completed but we did not accept yet: reset them too.
        self._accept()

    def _set_mode(self, mode: str) -> None:
        self.mode = mode
        for pair in self._pairs_list():
            self._update(pair)
            if mode == "forward":
                for side in pair.sides():
                    self._write(pair, side)
                if pair.client.sock in self._pairs:
                    self._maybe_shut(pair)
                    self._update(pair)

    def _shutdown(self) -> None:
        self._reset_all()
        self._selector.unregister(self._listener)
        self._listener.close()
        self._selector.unregister(self._wake_r)
        self._wake_r.close()
        with self._lock:
            self._closed = True
