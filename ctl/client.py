"""A small synchronous client for the control API: HTTP/1.1 over the Unix socket (or loopback TCP).

stdlib only (``http.client``): the CLI starts in a fraction of the time httpx would need.
``DaemonClient.events`` reads a Server-Sent Events stream line by line as it arrives, decoded
by ``SseDecoder`` (pure: lines in, events out).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any, NamedTuple

from gpuplaned.protocol.discovery import (
    SECRET_NAME,
    PortFile,
    PortFileError,
    default_runtime_dir,
    pid_alive,
    read_portfile,
)
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.version import API_VERSION_HEADER, api_mismatch


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
        self._warned = False

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

    def _headers(self, accept: str) -> dict[str, str]:
        headers = {"Accept": accept}
        if self.secret:
            headers["Authorization"] = f"Bearer {self.secret}"
        return headers

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request; returns the decoded JSON body of a 2xx answer.

        Raises:
            ApiError: the daemon answered with an error body.
            DaemonUnreachable: nothing answered at the endpoint.
        """
        headers = self._headers("application/json")
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn = self._connection()
        try:
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            self._check_version(response.getheader(API_VERSION_HEADER))
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
        raise _api_error(response.status, data)

    def _check_version(self, announced: str | None) -> None:
        warning = api_mismatch(announced)
        if warning is not None and not self._warned:
            self._warned = True
            print(warning, file=sys.stderr)

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body)

    def events(self, path: str, *, last_event_id: str | None = None,
               read_timeout: float = 45.0) -> Generator[SseEvent, None, None]:
        """Open ``GET path`` as a Server-Sent Events stream; returns its events as they arrive.

        Connects and reads the response head before returning, so a daemon that is not
        there or answers with an error raises here, and a returned generator means the
        stream is open. The generator ends when the server closes the stream; closing it
        (``contextlib.closing``) closes the connection.

        Args:
            last_event_id: sent as ``Last-Event-ID``, so the server resumes after that event.
            read_timeout: the longest silence before the stream counts as broken; the
                daemon sends a keep-alive comment every 15 s.

        Raises:
            ApiError: the daemon answered with an error instead of a stream.
            DaemonUnreachable: the connection failed; from the generator, it broke or went
                silent (resume with the last event's ``id``).
        """
        headers = self._headers("text/event-stream")
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        conn = self._connection()
        conn.timeout = read_timeout
        try:
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            if not 200 <= response.status < 300:
                raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise DaemonUnreachable(f"gpuplaned at {self.portfile.endpoint} does not answer: {exc}") from None
        if not 200 <= response.status < 300:
            conn.close()
            try:
                data = json.loads(raw) if raw else None
            except ValueError:
                data = None
            raise _api_error(response.status, data)
        return self._read_events(conn, response)

    @staticmethod
    def _read_events(conn: http.client.HTTPConnection,
                     response: http.client.HTTPResponse) -> Generator[SseEvent, None, None]:
        decoder = SseDecoder()
        try:
            while True:
                try:
                    raw_line = response.readline()
                except (OSError, http.client.HTTPException) as exc:
                    raise DaemonUnreachable(f"the stream from gpuplaned broke: {exc}") from None
                if not raw_line:
                    return
                event = decoder.feed(raw_line.decode("utf-8", "replace").rstrip("\r\n"))
                if event is not None:
                    yield event
        finally:
            conn.close()


class SseEvent(NamedTuple):
    event: str  # "message" when the server named none
    data: str
    id: str | None  # the last event id the stream has set, as a client resumes from


class SseDecoder:
    """The WHATWG event-stream grammar, line by line. Pure: no I/O.

    ``feed`` takes one line without its line ending and returns the event that a blank
    line completes, else None. Comments (``: keep-alive``) and ``retry:`` are skipped.
    """

    def __init__(self) -> None:
        self.last_id: str | None = None
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> SseEvent | None:
        if not line:
            if not self._data:
                self._event = ""
                return None
            event = SseEvent(self._event or "message", "\n".join(self._data), self.last_id)
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id" and "\0" not in value:
            self.last_id = value
        return None


def _api_error(status: int, body: Any) -> ApiError:
    error = ApiError.from_body(body)
    if error is None:
        error = ApiError(ErrorCode.INTERNAL, f"HTTP {status} with no error body")
    return error


def runtime_dir_from(value: str | None) -> Path:
    return Path(value).expanduser().absolute() if value else default_runtime_dir(os.environ)
