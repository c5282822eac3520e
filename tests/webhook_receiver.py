"""A real HTTP receiver on loopback for webhook tests: records every request it takes."""

from __future__ import annotations

import hashlib
import hmac
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver:
    """``start()`` listens on ``port`` (a free one by default); ``received`` is (headers, body)."""

    def __init__(self, port: int | None = None, status: int = 200) -> None:
        self.port = port or free_port()
        self.status = status
        self.received: list[tuple[dict[str, str], bytes]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook/secret-path"

    def start(self) -> Receiver:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.received.append(({k: v for k, v in self.headers.items()}, body))
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def signature_ok(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """What a receiver checks: HMAC-SHA256 over "<timestamp>." + body."""
    expected = "sha256=" + hmac.new(secret.encode(), f"{headers['X-GPUPlane-Timestamp']}.".encode() + body,
                                    hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, headers.get("X-GPUPlane-Signature", ""))
