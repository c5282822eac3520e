"""Where the daemon listens, and one small HTTP/1.1 client to reach it (stdlib only).

Discovery order, tried afresh on every reconnect:

1. ``GPUPLANE_SERVER`` (``http[s]://host:port[/prefix]``) with ``GPUPLANE_TOKEN``: the
   daemon's HTTP front, with an ``sdk`` scope token as the bearer.
2. ``GPUPLANE_ENDPOINT``, which a dispatched job gets from its daemon: ``unix:///path`` or
   ``tcp://127.0.0.1:PORT`` (the TCP fallback's bearer secret is read from the runtime dir).
3. The port-file ``gpuplaned.port`` in ``GPUPLANE_RUNTIME_DIR``, else
   ``$XDG_RUNTIME_DIR/gpuplane``, else ``/tmp/gpuplane-<uid>``.

The port-file parsing is a copy of the few lines the SDK needs from
``gpuplaned.protocol.discovery``: the SDK installs into training environments alone and
imports nothing from the daemon.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
from typing import Any, Mapping, Optional, Tuple
from urllib.parse import urlsplit

PORTFILE_NAME = "gpuplaned.port"
SECRET_NAME = "gpuplaned.secret"
PORTFILE_PROTOCOL = "1"


class Endpoint:
    """One way to reach the daemon: a Unix socket path, or a TCP host and port."""

    __slots__ = ("unix", "host", "port", "https", "base", "token")

    def __init__(self, *, unix: Optional[str] = None, host: str = "127.0.0.1", port: int = 0,
                 https: bool = False, base: str = "", token: Optional[str] = None) -> None:
        self.unix = unix
        self.host = host
        self.port = port
        self.https = https
        self.base = base
        self.token = token

    def __repr__(self) -> str:  # never the token
        if self.unix is not None:
            return "Endpoint(unix://%s)" % self.unix
        return "Endpoint(%s://%s:%d%s)" % ("https" if self.https else "http", self.host, self.port, self.base)

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.unix is not None:
            return UnixHTTPConnection(self.unix, timeout)
        if self.https:
            import ssl

            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix stream socket."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def runtime_dir(env: Mapping[str, str]) -> str:
    if env.get("GPUPLANE_RUNTIME_DIR"):
        return os.path.abspath(os.path.expanduser(env["GPUPLANE_RUNTIME_DIR"]))
    if env.get("XDG_RUNTIME_DIR"):
        return os.path.join(env["XDG_RUNTIME_DIR"], "gpuplane")
    return "/tmp/gpuplane-%d" % os.getuid()


def parse_portfile(text: str) -> Optional[Tuple[Optional[str], Optional[int]]]:
    """``(unix_path, tcp_port)`` (one of them set) from a complete, valid port-file, else None."""
    lines = text.splitlines()
    if not lines or lines[-1] != "EOF":
        return None
    fields = {}  # type: Dict[str, str]
    for line in lines[:-1]:
        key, sep, value = line.partition("=")
        if not sep or key in fields:
            return None
        fields[key] = value
    if fields.get("protocol") != PORTFILE_PROTOCOL:
        return None
    unix = fields.get("unix")
    sock = fields.get("sock")
    if (unix is None) == (sock is None):
        return None
    if unix is not None:
        return (unix, None) if os.path.isabs(unix) else None
    assert sock is not None
    if not sock.isdigit() or not 0 < int(sock) <= 65535:
        return None
    return None, int(sock)


def _read_secret(rdir: str) -> Optional[str]:
    try:
        with open(os.path.join(rdir, SECRET_NAME), encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def discover(env: Optional[Mapping[str, str]] = None) -> Optional[Endpoint]:
    """The daemon's endpoint by the order above, or None when none is published."""
    env = os.environ if env is None else env
    server = env.get("GPUPLANE_SERVER")
    if server:
        parts = urlsplit(server.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return None
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return None
        return Endpoint(host=parts.hostname, port=port, https=parts.scheme == "https",
                        base=parts.path.rstrip("/"), token=env.get("GPUPLANE_TOKEN") or None)
    rdir = runtime_dir(env)
    named = env.get("GPUPLANE_ENDPOINT", "")
    if named.startswith("unix://") and os.path.isabs(named[len("unix://"):]):
        path = named[len("unix://"):]
        if os.path.exists(path):
            return Endpoint(unix=path)
    elif named.startswith("tcp://"):
        parts = urlsplit(named)
        try:
            if parts.hostname and parts.port:
                return Endpoint(host=parts.hostname, port=parts.port, token=_read_secret(rdir))
        except ValueError:
            pass
    try:
        with open(os.path.join(rdir, PORTFILE_NAME), encoding="utf-8") as f:
            parsed = parse_portfile(f.read())
    except (OSError, UnicodeDecodeError):
        return None
    if parsed is None:
        return None
    unix, port = parsed
    if unix is not None:
        return Endpoint(unix=unix)
    assert port is not None
    return Endpoint(port=port, token=_read_secret(rdir))


class HttpError(Exception):
    """The daemon answered with a non-2xx status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__("HTTP %d %s: %s" % (status, code, message))
        self.status = status
        self.code = code

    @property
    def retryable(self) -> bool:
        return self.status in (408, 425, 429) or self.status >= 500


class Client:
    """A kept-alive connection to one endpoint; any failure closes it, the next call reconnects."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._conn = None  # type: Optional[http.client.HTTPConnection]

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None

    def post(self, path: str, body: Any, timeout: float) -> Any:
        """POST ``body`` as JSON; the decoded JSON answer of a 2xx.

        Raises:
            HttpError: a non-2xx answer.
            OSError, http.client.HTTPException, ValueError: transport or decoding trouble.
        """
        return self.request("POST", path, json.dumps(body, separators=(",", ":"), allow_nan=True).encode("utf-8"),
                            timeout)

    def get(self, path: str, timeout: float) -> Any:
        """GET ``path``; the decoded JSON answer of a 2xx (raises as ``post`` does)."""
        return self.request("GET", path, None, timeout)

    def request(self, method: str, path: str, data: Optional[bytes], timeout: float) -> Any:
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.endpoint.token:
            headers["Authorization"] = "Bearer " + self.endpoint.token
        if self._conn is not None and self._conn.sock is not None and _dropped(self._conn.sock):
            self.close()  # the daemon closed it while idle (its keep-alive timeout): a fresh one
        if self._conn is None:
            self._conn = self.endpoint.connection(timeout)
        conn = self._conn
        try:
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            else:
                conn.timeout = timeout
            conn.request(method, self.endpoint.base + path, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except BaseException:
            self.close()
            raise
        if response.getheader("Connection", "").lower() == "close":
            self.close()
        try:
            answer = json.loads(raw.decode("utf-8")) if raw else None
        except ValueError:
            answer = None
        if 200 <= response.status < 300:
            return answer
        code, message = "http_%d" % response.status, ""
        if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
            code = str(answer["error"].get("code", code))
            message = str(answer["error"].get("message", ""))
        raise HttpError(response.status, code, message)


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle kept-alive connection was closed by the daemon: it turned readable (EOF,
    or bytes nobody asked for) or is unusable."""
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True
