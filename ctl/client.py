"""A small synchronous client for the control API: HTTP/1.1 over the Unix socket (or loopback TCP).

stdlib only (``http.client``): the CLI starts in a fraction of the time httpx would need.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from pathlib import Path
from typing import Any

from gpuplaned.protocol.discovery import (
    SECRET_NAME,
    PortFile,
    PortFileError,
    default_runtime_dir,
    pid_alive,
    read_portfile,
)
from gpuplaned.protocol.errors import ApiError, ErrorCode


class NoDaemon(Exception):
    """No daemon is published in the runtime dir (or the one published is gone)."""


class DaemonUnreachable(Exception):
    """The port-file names an endpoint that does not answer."""


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class DaemonClient:
    def __init__(self, portfile: PortFile, *, secret: str | None = None, timeout: float = 30.0) -> None:
        self.portfile = portfile
        self.secret = secret
        self.timeout = timeout

    @classmethod
    def discover(cls, runtime_dir: Path | None = None, *, timeout: float = 30.0) -> DaemonClient:
        """Find the daemon through the port-file in ``runtime_dir``.

        Raises:
            NoDaemon: no port-file, a malformed one, or one whose daemon has died.
        """
        runtime_dir = runtime_dir or default_runtime_dir()
        try:
            portfile = read_portfile(runtime_dir)
        except FileNotFoundError:
            raise NoDaemon(f"no gpuplaned is running (no port-file in {runtime_dir})") from None
        except PortFileError as exc:
            raise NoDaemon(f"cannot use the port-file in {runtime_dir}: {exc}") from None
        except OSError as exc:
            raise NoDaemon(f"cannot read the port-file in {runtime_dir}: {exc.strerror}") from None
        if not pid_alive(portfile.pid):
            raise NoDaemon(f"no gpuplaned is running (the port-file in {runtime_dir} names pid "
                           f"{portfile.pid}, which has exited)")
        secret = None
        if portfile.tcp_port is not None:
            try:
                secret = (runtime_dir / SECRET_NAME).read_text().strip()
            except OSError:
                secret = None
        return cls(portfile, secret=secret, timeout=timeout)

    def _connection(self) -> http.client.HTTPConnection:
        if self.portfile.unix is not None:
            return _UnixHTTPConnection(self.portfile.unix, self.timeout)
        return http.client.HTTPConnection("127.0.0.1", self.portfile.tcp_port, timeout=self.timeout)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request; returns the decoded JSON body of a 2xx answer.

        Raises:
            ApiError: the daemon answered with an error body.
            DaemonUnreachable: nothing answered at the endpoint.
        """
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.secret:
            headers["Authorization"] = f"Bearer {self.secret}"
        conn = self._connection()
        try:
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise DaemonUnreachable(f"gpuplaned at {self.portfile.endpoint} does not answer: {exc}") from None
        finally:
            conn.close()
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = None
        if 200 <= response.status < 300:
            return data
        error = ApiError.from_body(data)
        if error is None:
            error = ApiError(ErrorCode.INTERNAL, f"HTTP {response.status} with no error body")
        raise error

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body)


def runtime_dir_from(value: str | None) -> Path:
    return Path(value).expanduser().absolute() if value else default_runtime_dir(os.environ)
