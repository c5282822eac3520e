"""``requests`` over the daemon's Unix socket: mount ``UnixAdapter`` on ``BASE_URL``."""

from __future__ import annotations

import socket
from typing import Any

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection

BASE_URL = "http://gpuplaned"


class _UnixConnection(HTTPConnection):
    def __init__(self, *args: Any, socket_path: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._socket_path = socket_path

    def _new_conn(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(30)
        try:
            sock.connect(self._socket_path)
        except OSError:
            sock.close()
            raise
        return sock


class _UnixPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _UnixConnection


class UnixAdapter(HTTPAdapter):
    """Every request this adapter sends goes to ``socket_path``, whatever the URL's host."""

    def __init__(self, socket_path: str) -> None:
        super().__init__()
        self._pool = _UnixPool("localhost", socket_path=socket_path)

    def get_connection_with_tls_context(self, request: Any, verify: Any, proxies: Any = None,
                                        cert: Any = None) -> urllib3.HTTPConnectionPool:
        return self._pool

    def close(self) -> None:
        self._pool.close()
        super().close()


def unix_session(socket_path: str) -> requests.Session:
    """A session whose requests to ``BASE_URL`` go to ``socket_path``."""
    session = requests.Session()
    session.mount(BASE_URL, UnixAdapter(socket_path))
    return session
