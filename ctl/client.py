"""A small synchronous client for the control API: HTTP/1.1 over the Unix socket (or loopback
TCP), or to a remote daemon's HTTP front (``DaemonClient.remote``).

stdlib only (``http.client``): the CLI starts in a fraction of the time httpx would need.
``DaemonClient.events`` reads a Server-Sent Events stream line by line as it arrives, decoded
by ``SseDecoder`` (pure: lines in, events out).

A client's requests share one kept-alive connection: locally a new connection costs the
daemon ~0.4 ms of CPU (its HTTP server's set-up and teardown, and telling a job's process from
the user's by its ancestors), a quarter of a submit; remotely a TLS handshake costs a round
trip or three. A kept connection is checked before reuse, and a GET retried once on a fresh
connection when the server had closed the old one; one idle for half what the server's
``Keep-Alive: timeout=N`` says it keeps one (locally ``KEPT_IDLE_S`` when it says nothing) is
not reused at all, so the server never closes it just as a request goes out.
A request from a second thread while one is under way gets a connection of its own. The token
goes in the ``Authorization`` header and nowhere else, and is cut out of any error text.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import select
import socket
import sys
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any, NamedTuple

from gpuplanectl.remote import Server

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
    """The port-file names an endpoint that does not answer (or the remote server does not)."""


# Errors that mean "the server had closed this kept-alive connection" when it is reused.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
_RETRIED = frozenset({"GET", "HEAD"})
# Locally, before the daemon has said its keep-alive: well inside its default (5 s).
KEPT_IDLE_S = 2.0
# A body-less error from a proxy in front of a remote daemon still says what went wrong.
_STATUS_CODES = {
    400: ErrorCode.BAD_REQUEST, 401: ErrorCode.UNAUTHORIZED, 403: ErrorCode.FORBIDDEN,
    404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED, 409: ErrorCode.CONFLICT,
    413: ErrorCode.PAYLOAD_TOO_LARGE, 502: ErrorCode.UNAVAILABLE, 503: ErrorCode.UNAVAILABLE,
    504: ErrorCode.UNAVAILABLE,
}


class OneWriteConnection(http.client.HTTPConnection):
    """An ``HTTPConnection`` that writes a request's head and the start of its body together.

    ``http.client`` sends the head and then the body, two writes (``send`` twice): the daemon
    woke for the head, started the request's handling and woke again for the body, which put
    ~0.5 ms on a submit's way to its job's start (``bench/jobs_bench.py``). Here the head is
    held back until the first write after it, and goes out with it, or alone when the request
    has no body.
    """

    _hold_next = False  # the next send is a request's head
    _head: bytes | None = None

    def request(self, method: str, url: str, body: Any = None, headers: Any = None, *,
                encode_chunked: bool = False) -> None:
        self._hold_next = True
        try:
            super().request(method, url, body, headers or {}, encode_chunked=encode_chunked)
        finally:
            self._hold_next = False
            head, self._head = self._head, None
        if head is not None:  # no body followed
            super().send(head)

    def send(self, data: Any) -> None:
        if self._hold_next:
            self._hold_next, self._head = False, bytes(data)
            return
        head, self._head = self._head, None
        super().send(data if head is None else head + bytes(data))


class OneWriteTlsConnection(OneWriteConnection, http.client.HTTPSConnection):
    """``OneWriteConnection`` over TLS (a remote daemon's HTTPS front)."""


class UnixHTTPConnection(OneWriteConnection):
    """HTTP/1.1 over a Unix socket (the daemon's control endpoint)."""

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
    def __init__(self, portfile: PortFile | None, *, secret: str | None = None, timeout: float = 30.0,
                 server: Server | None = None) -> None:
        """Talk to the daemon ``portfile`` names, or (``portfile`` None) to ``server`` with
        ``secret`` as its API token: use ``discover`` or ``remote``."""
        if (portfile is None) == (server is None):
            raise ValueError("a DaemonClient talks to a port-file's endpoint or to a server, one of them")
        self.portfile = portfile
        self.server = server
        self.secret = secret
        self.timeout = timeout
        self._warned = False
        self._kept: http.client.HTTPConnection | None = None  # the kept-alive connection
        self._kept_at = 0.0  # when its last answer came (monotonic)
        self._kept_idle_s = KEPT_IDLE_S if portfile is not None else None  # None: no bound
        self._kept_lock = threading.Lock()  # held by the thread whose request is on it

    @classmethod
    def remote(cls, server: Server, token: str, *, timeout: float = 30.0) -> DaemonClient:
        """A client of the HTTP front at ``server``, sending ``token`` as its bearer token."""
        return cls(None, secret=token, timeout=timeout, server=server)

    @property
    def endpoint(self) -> str:
        """Where requests go: ``unix:///...``, ``tcp://127.0.0.1:PORT`` or the server's URL."""
        if self.server is not None:
            return self.server.url
        assert self.portfile is not None
        return self.portfile.endpoint

    def close(self) -> None:
        """Close the kept-alive connection; the client reconnects if used again."""
        if self._kept is not None:
            self._kept.close()
            self._kept = None

    def __del__(self) -> None:
        # A client dropped without close() (a one-shot command's) closes its socket quietly.
        kept = getattr(self, "_kept", None)
        if kept is not None:
            kept.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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

    def new_connection(self, timeout: float | None = None) -> http.client.HTTPConnection:
        """A new, unconnected connection to the endpoint."""
        timeout = self.timeout if timeout is None else timeout
        if self.server is not None:
            if self.server.scheme == "https":
                import ssl  # only remote https needs it

                return OneWriteTlsConnection(self.server.host, self.server.port, timeout=timeout,
                                             context=ssl.create_default_context())
            return OneWriteConnection(self.server.host, self.server.port, timeout=timeout)
        assert self.portfile is not None
        if self.portfile.unix is not None:
            return UnixHTTPConnection(self.portfile.unix, timeout)
        return OneWriteConnection("127.0.0.1", self.portfile.tcp_port, timeout=timeout)

    def _ready(self, conn: http.client.HTTPConnection) -> None:
        """Connect ``conn`` now when it is to a remote server and not connected (``_open``); a
        local one connects with its request, whose failure says the daemon does not answer."""
        if self.server is not None and conn.sock is None:
            self._open(conn)

    def _target(self, path: str) -> str:
        """What goes on the request line: a remote server's base path before ``path``."""
        return path if self.server is None else self.server.base + path

    def _open(self, conn: http.client.HTTPConnection) -> None:
        """Connect ``conn`` to the remote server (TLS handshake included)."""
        try:
            conn.connect()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise DaemonUnreachable(f"cannot reach {self.endpoint}: {self._redact(_reason(exc))}") from None

    def _unreachable(self, exc: BaseException) -> DaemonUnreachable:
        if self.server is not None:
            return DaemonUnreachable(f"lost the connection to {self.endpoint}: {self._redact(_reason(exc))}")
        return DaemonUnreachable(f"gpuplaned at {self.endpoint} does not answer: {exc}")

    def request_headers(self, accept: str) -> dict[str, str]:
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
        headers = self.request_headers("application/json")
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self._kept_lock.acquire(blocking=False):
            try:
                status, raw = self._exchange_kept(method, path, payload, headers)
            finally:
                self._kept_lock.release()
        else:  # another thread's request is on the kept connection
            conn = self.new_connection()
            try:
                self._ready(conn)
                status, raw = self._exchange(conn, method, path, payload, headers)
            except (OSError, http.client.HTTPException) as exc:
                raise self._unreachable(exc) from None
            finally:
                conn.close()
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = None
        if 200 <= status < 300:
            return data
        raise self._error(status, data)

    def _exchange_kept(self, method: str, path: str, payload: bytes | None,
                       headers: dict[str, str]) -> tuple[int, bytes]:
        """One request on the kept-alive connection: its status and body."""
        while True:
            conn = self._kept
            idle_s = self._kept_idle_s
            if conn is not None and conn.sock is not None and (_dropped(conn.sock) or (
                    idle_s is not None and time.monotonic() - self._kept_at > idle_s)):
                conn.close()  # the server closed it while we were idle, or may be about to
            reused = conn is not None and conn.sock is not None
            if conn is None:
                conn = self._kept = self.new_connection()
            self._ready(conn)
            try:
                answer = self._exchange(conn, method, path, payload, headers)
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if reused and method in _RETRIED and isinstance(exc, _STALE):
                    continue  # closed under us between the check and the request: once more, afresh
                raise self._unreachable(exc) from None
            self._kept_at = time.monotonic()
            return answer

    def _exchange(self, conn: http.client.HTTPConnection, method: str, path: str, payload: bytes | None,
                  headers: dict[str, str]) -> tuple[int, bytes]:
        conn.request(method, self._target(path), body=payload, headers=headers)
        response = conn.getresponse()
        self._check_version(response.getheader(API_VERSION_HEADER))
        kept_s = _keep_alive_s(response.getheader("Keep-Alive"))
        if kept_s is not None:
            self._kept_idle_s = kept_s / 2
        return response.status, response.read()

    def _error(self, status: int, body: Any) -> ApiError:
        error = _api_error(status, body)
        if self.server is None:
            return error
        details = json.loads(self._redact(json.dumps(error.details)))
        message = self._redact(error.message)
        if error.code is ErrorCode.UNAUTHORIZED:
            message = f"the server refused the token: {message}"
        elif error.code is ErrorCode.FORBIDDEN:
            needed, held = details.get("needed"), details.get("scopes")
            if isinstance(needed, str):
                has = f" (it has: {', '.join(map(str, held)) or 'none'})" if isinstance(held, list) else ""
                message = f"the token lacks the {needed!r} scope this needs{has}"
        return ApiError(error.code, message, details)

    def _redact(self, text: str) -> str:
        return text.replace(self.secret, "[token]") if self.secret else text

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
        headers = self.request_headers("text/event-stream")
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        conn = self.new_connection(read_timeout)
        self._ready(conn)
        try:
            conn.request("GET", self._target(path), headers=headers)
            response = conn.getresponse()
            if not 200 <= response.status < 300:
                raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise self._unreachable(exc) from None
        if not 200 <= response.status < 300:
            conn.close()
            try:
                data = json.loads(raw) if raw else None
            except ValueError:
                data = None
            raise self._error(response.status, data)
        source = "gpuplaned" if self.server is None else self.endpoint
        return self._read_events(conn, response, source)

    def _read_events(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse,
                     source: str) -> Generator[SseEvent, None, None]:
        decoder = SseDecoder()
        try:
            while True:
                try:
                    raw_line = response.readline()
                except (OSError, http.client.HTTPException) as exc:
                    raise DaemonUnreachable(f"the stream from {source} broke: {self._redact(_reason(exc))}") from None
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
        error = ApiError(_STATUS_CODES.get(status, ErrorCode.INTERNAL), f"HTTP {status} with no error body")
    return error


def _keep_alive_s(header: str | None) -> float | None:
    """The ``timeout`` of a ``Keep-Alive`` header (``timeout=5, max=1000``): how long the server
    keeps an idle connection; None when it says nothing readable."""
    for part in (header or "").split(","):
        name, _, value = part.partition("=")
        if name.strip().lower() == "timeout":
            try:
                seconds = float(value.strip())
            except ValueError:
                return None
            return seconds if seconds >= 0 and math.isfinite(seconds) else None
    return None


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle kept-alive connection was closed by the server: it turned readable
    (EOF, or bytes nobody asked for) or is unusable."""
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _reason(exc: BaseException) -> str:
    """Why a connection failed, in words: ``Connection refused``, ``Name or service not known``."""
    verify = getattr(exc, "verify_message", None)  # ssl: what the certificate check found
    if verify:
        return f"TLS certificate verification failed: {verify}"
    if isinstance(exc, OSError) and exc.strerror and getattr(exc, "reason", None) is None:
        return exc.strerror
    return str(exc) or type(exc).__name__


def runtime_dir_from(value: str | None) -> Path:
    return Path(value).expanduser().absolute() if value else default_runtime_dir(os.environ)
