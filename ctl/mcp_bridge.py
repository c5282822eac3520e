"""A pipe between an MCP client speaking stdio and gpuplaned's streamable-HTTP ``POST /mcp``.

``gpuplanectl mcp-stdio`` runs ``Bridge``: every line on stdin is one JSON-RPC message (or a
batch); each is POSTed to the daemon and whatever comes back is written to stdout, one
message a line, under a lock. stdlib only (``http.client``, threads), like the rest of the
CLI: the client never waits for ``mcp`` to import (about 2 s).

Requests run concurrently, a thread each, so a ``wait_for_events`` long poll does not hold up
a ``get_job``. An answer is ``application/json`` (one message or a batch, also on a 4xx,
where it is the JSON-RPC error) or ``text/event-stream`` (notifications such as progress,
then the result). A message without the request shape (a notification, or the answer to a
server's request) is POSTed in order from the reader thread, 202 expected.

HTTP carries routing headers that stdio does not, so the bridge derives them from each
message: a 2026-07-28 request names its protocol version in ``params._meta``, which becomes
``MCP-Protocol-Version`` with ``Mcp-Method`` (and ``Mcp-Name`` for tools/call, prompts/get and
resources/read), as the SDK's HTTP client sends them; a 2025-era client's version comes from
the ``initialize`` result and goes on every later message. ``Mcp-Session-Id`` and
``MCP-Protocol-Version`` set by the server are echoed; a 2025-11-25 ``initialize`` is answered
before the next line is read, so that what follows carries the session it opens. At 2026-07-28 a client cancels a
request by ``notifications/cancelled``; over HTTP that is closing the request's POST, which
the bridge does instead of posting the notification.

The bridge keeps no connection: each message finds the daemon afresh, so while it is down
every request gets a JSON-RPC error saying so, and the first one after it is back works.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO, NamedTuple

from gpuplanectl.client import SseDecoder

# JSON-RPC error codes (the MCP SDK's CONNECTION_CLOSED for "the server is not there").
CONNECTION_CLOSED = -32000
INVALID_REQUEST = -32600
INTERNAL_ERROR = -32603
PARSE_ERROR = -32700

PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
PROTOCOL_VERSION_HEADER = "MCP-Protocol-Version"
SESSION_HEADER = "Mcp-Session-Id"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"
# The methods whose target is mirrored in Mcp-Name, and the param that names it (the SDK's table).
NAME_BEARING_METHODS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
MAX_IN_FLIGHT = 64  # requests at once; the reader waits past that (backpressure on the client)
MAX_LINE = 16 * 1024 * 1024

_HEADER_SAFE = re.compile(r"[\x20-\x7E]*")
_B64_SENTINEL = re.compile(r"=\?base64\?.*\?=")


class Unavailable(Exception):
    """The daemon cannot be reached: ``message`` says why and what to do, ``data`` has details."""

    def __init__(self, message: str, data: dict[str, Any]) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class Endpoint(NamedTuple):
    """Where one message goes: an unconnected connection, the request target, extra headers."""

    connection: http.client.HTTPConnection
    target: str  # "/mcp", or a remote server's base path + "/mcp"
    headers: dict[str, str]  # Authorization where the endpoint needs a token
    where: str  # for messages: unix:///..., or the server's URL


# Raises Unavailable when no daemon is there to talk to.
OpenEndpoint = Callable[[], Endpoint]


def is_request(message: Any) -> bool:
    return isinstance(message, dict) and isinstance(message.get("method"), str) and message.get("id") is not None


def encode_header_value(value: str) -> str:
    """A header value as the SDK writes it: verbatim when printable ASCII without edge
    whitespace, else in the ``=?base64?...?=`` sentinel."""
    if _HEADER_SAFE.fullmatch(value) and value == value.strip() and not _B64_SENTINEL.fullmatch(value):
        return value
    return f"=?base64?{base64.b64encode(value.encode()).decode('ascii')}?="


def envelope_version(message: dict[str, Any]) -> str | None:
    """The protocol version a 2026-07-28 request carries in ``params._meta``, else None."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
    return version if isinstance(version, str) else None


def error_message(request_id: Any, code: int, message: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def _is_jsonrpc(body: Any) -> bool:
    if isinstance(body, list):
        return bool(body) and all(isinstance(m, dict) and m.get("jsonrpc") == "2.0" for m in body)
    return isinstance(body, dict) and body.get("jsonrpc") == "2.0"


def _answers(message: Any, request_id: Any) -> bool:
    return (isinstance(message, dict) and "method" not in message and message.get("id") == request_id
            and ("result" in message or "error" in message))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


class _InFlight:
    def __init__(self, modern: bool) -> None:
        self.modern = modern
        self.cancelled = False
        self.connection: http.client.HTTPConnection | None = None

    def abort(self) -> None:
        """Close the POST under its thread: at 2026-07-28 that is how a request is cancelled."""
        self.cancelled = True
        conn = self.connection
        sock = conn.sock if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Bridge:
    def __init__(self, open_endpoint: OpenEndpoint, out: BinaryIO, *, diagnostics: Any = None) -> None:
        self._open = open_endpoint
        self._out = out
        self._err = diagnostics if diagnostics is not None else sys.stderr
        self._write_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._session_id: str | None = None
        self._protocol_version: str | None = None  # from the initialize result or the server's header
        self._modern = False  # the client has sent a 2026-07-28 request
        self._in_flight: dict[Any, _InFlight] = {}  # by JSON-RPC id (as the client typed it)
        self._threads: set[threading.Thread] = set()
        self._slots = threading.BoundedSemaphore(MAX_IN_FLIGHT)
        self.stdout_closed = False

    # -- the reader side ---------------------------------------------------------------------

    def serve(self, lines: BinaryIO, *, drain_s: float) -> None:
        """Forward every line of ``lines`` until EOF (or stdout closed), then wait up to
        ``drain_s`` for the requests still in flight."""
        while not self.stdout_closed:
            line = lines.readline(MAX_LINE)
            if not line:
                break
            if line.strip():
                self.feed(line)
        self.drain(drain_s)

    def feed(self, line: bytes) -> None:
        """One line from the client: parse it and send it on (a request in its own thread)."""
        try:
            message = json.loads(line)
        except ValueError as exc:
            self._write(error_message(None, PARSE_ERROR, f"not a JSON-RPC message (invalid JSON: {exc})"))
            return
        if is_request(message):
            self._start_request(message)
        elif isinstance(message, list):
            self._spawn(self._forward_batch, message)
        elif isinstance(message, dict):
            self._forward_other(message)
        else:
            self._write(error_message(None, INVALID_REQUEST, "a JSON-RPC message is an object (or a batch array)"))

    def drain(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
        left = sum(t.is_alive() for t in list(self._threads))
        if left:
            self._note(f"mcp-stdio: stdin closed; {left} request(s) still in flight left unanswered")

    def _start_request(self, message: dict[str, Any]) -> None:
        modern = envelope_version(message) is not None
        with self._state_lock:
            if modern:
                self._modern = True
            if message["method"] == "initialize":  # a fresh handshake: forget the old one's settings
                self._session_id = self._protocol_version = None
            record = self._in_flight[message["id"]] = _InFlight(modern)
        if message["method"] == "initialize":
            # Answered before the next line is read: what follows goes in the session it opens
            # (a 2025-11-25 client may write its next messages without waiting).
            self._forward_request(message, record)
            return
        self._spawn(self._forward_request, message, record)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        self._slots.acquire()

        def run() -> None:
            try:
                target(*args)
            except Exception as exc:  # a bug here must not kill the bridge; the client gets an answer
                self._note(f"mcp-stdio: internal error: {exc!r}")
                if args and is_request(args[0]):
                    self._write(error_message(args[0]["id"], INTERNAL_ERROR, f"gpuplanectl mcp-stdio failed: {exc}"))
            finally:
                self._threads.discard(threading.current_thread())
                self._slots.release()

        thread = threading.Thread(target=run, name="mcp-stdio-request", daemon=True)
        self._threads.add(thread)
        thread.start()

    def _forward_other(self, message: dict[str, Any]) -> None:
        """A notification or a response to the server: POSTed in order, 202 expected."""
        if message.get("method") == "notifications/cancelled":
            params = message.get("params")
            target = params.get("requestId") if isinstance(params, dict) else None
            with self._state_lock:
                record = self._in_flight.get(target)
                modern = self._modern
            if record is not None and record.modern:
                record.abort()
                return
            if record is None and modern:
                return  # 2026-07-28 has no cancel to post; a late one racing the answer is dropped
        try:
            endpoint = self._open()
        except Unavailable as exc:
            self._note(f"mcp-stdio: dropped a {message.get('method') or 'response'} message: {exc.message}")
            return
        conn = endpoint.connection
        try:
            conn.request("POST", endpoint.target, body=_dumps(message), headers=self._headers(message, endpoint))
            response = conn.getresponse()
            self._learn(response)
            body = response.read()
            if not 200 <= response.status < 300:
                self._note(f"mcp-stdio: the daemon refused a {message.get('method') or 'response'} message "
                           f"(HTTP {response.status}): {body[:200].decode('utf-8', 'replace')}")
        except (OSError, http.client.HTTPException) as exc:
            self._note(f"mcp-stdio: could not deliver a {message.get('method') or 'response'} message "
                       f"to {endpoint.where}: {_reason(exc)}")
        finally:
            conn.close()

    # -- one request, in its thread ------------------------------------------------------------

    def _forward_request(self, message: dict[str, Any], record: _InFlight) -> None:
        request_id = message["id"]
        try:
            self._exchange(message, record)
        finally:
            with self._state_lock:
                if self._in_flight.get(request_id) is record:
                    del self._in_flight[request_id]

    def _exchange(self, message: dict[str, Any], record: _InFlight) -> None:
        request_id = message["id"]
        try:
            endpoint = self._open()
        except Unavailable as exc:
            self._write(error_message(request_id, CONNECTION_CLOSED, exc.message, exc.data))
            return
        conn = record.connection = endpoint.connection
        try:
            try:
                conn.connect()
            except OSError as exc:
                self._write(error_message(
                    request_id, CONNECTION_CLOSED,
                    f"gpuplaned at {endpoint.where} does not answer ({_reason(exc)}): is it restarting? "
                    "Try again in a moment.", {"reason": "unreachable", "endpoint": endpoint.where}))
                return
            if record.cancelled:
                return
            try:
                conn.request("POST", endpoint.target, body=_dumps(message), headers=self._headers(message, endpoint))
                response = conn.getresponse()
                self._learn(response)
                self._relay(message, response, endpoint)
            except (OSError, http.client.HTTPException) as exc:
                if record.cancelled:
                    return  # we closed it: the client cancelled and waits for no answer
                self._write(error_message(
                    request_id, CONNECTION_CLOSED,
                    f"lost gpuplaned at {endpoint.where} before it answered ({_reason(exc)}); "
                    f"{message['method']} may or may not have taken effect",
                    {"reason": "lost", "endpoint": endpoint.where}))
        finally:
            conn.close()

    def _relay(self, message: dict[str, Any], response: http.client.HTTPResponse, endpoint: Endpoint) -> None:
        request_id = message["id"]
        content_type = (response.getheader("Content-Type") or "").partition(";")[0].strip().lower()
        if content_type == "text/event-stream" and 200 <= response.status < 300:
            self._relay_stream(request_id, response, endpoint)
            return
        raw = response.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        if _is_jsonrpc(body):
            if message["method"] == "initialize" and isinstance(body, dict):
                self._learn_initialize(body)
            self._write(body)
            return
        self._write(error_message(request_id, *self._http_error(response.status, body, endpoint)))

    def _relay_stream(self, request_id: Any, response: http.client.HTTPResponse, endpoint: Endpoint) -> None:
        decoder = SseDecoder()
        while True:
            line = response.readline()
            if not line:
                break
            event = decoder.feed(line.decode("utf-8", "replace").rstrip("\r\n"))
            if event is None or event.event != "message" or not event.data:
                continue  # keep-alive pings, priming events
            try:
                message = json.loads(event.data)
            except ValueError:
                self._note(f"mcp-stdio: skipped an event that is not JSON from {endpoint.where}")
                continue
            self._write(message)
            if _answers(message, request_id):
                return
        self._write(error_message(request_id, CONNECTION_CLOSED,
                                  f"gpuplaned at {endpoint.where} ended the stream without an answer",
                                  {"reason": "lost", "endpoint": endpoint.where}))

    def _http_error(self, status: int, body: Any, endpoint: Endpoint) -> tuple[int, str, dict[str, Any]]:
        """An answer that is no JSON-RPC message, as a JSON-RPC error: (code, message, data)."""
        error = body.get("error") if isinstance(body, dict) else None
        said = error.get("message") if isinstance(error, dict) else None
        data: dict[str, Any] = {"reason": "http_status", "status": status}
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            data["api_code"] = error["code"]
        if status == 404:
            return (INTERNAL_ERROR, f"gpuplaned at {endpoint.where} serves no MCP endpoint (POST /mcp answered 404): "
                    "it is older than this gpuplanectl; upgrade and restart it", data)
        if status == 503:  # starting or stopping: the same request works once it is READY again
            data["reason"] = "not_ready"
            return (CONNECTION_CLOSED, f"gpuplaned at {endpoint.where} is not ready: {said or 'HTTP 503'}", data)
        if status in (401, 403):
            return (INVALID_REQUEST, f"gpuplaned refused the request (HTTP {status}): {said or 'no reason given'}",
                    data)
        return (INTERNAL_ERROR, f"gpuplaned answered HTTP {status} without a JSON-RPC message"
                + (f": {said}" if said else ""), data)

    # -- headers ---------------------------------------------------------------------------

    def _headers(self, message: dict[str, Any], endpoint: Endpoint) -> dict[str, str]:
        headers = {**endpoint.headers, "Accept": "application/json, text/event-stream",
                   "Content-Type": "application/json"}
        with self._state_lock:
            session_id, negotiated = self._session_id, self._protocol_version
        if session_id:
            headers[SESSION_HEADER] = session_id
        version = envelope_version(message) if is_request(message) else None
        if version is not None:
            headers[PROTOCOL_VERSION_HEADER] = version
            headers[METHOD_HEADER] = message["method"]
            name_key = NAME_BEARING_METHODS.get(message["method"])
            name = message["params"].get(name_key) if name_key else None
            if isinstance(name, str):
                headers[NAME_HEADER] = encode_header_value(name)
        elif negotiated and message.get("method") != "initialize":
            headers[PROTOCOL_VERSION_HEADER] = negotiated
        return headers

    def _learn(self, response: http.client.HTTPResponse) -> None:
        session_id = response.getheader(SESSION_HEADER)
        version = response.getheader(PROTOCOL_VERSION_HEADER)
        with self._state_lock:
            if session_id:
                self._session_id = session_id
            if version:
                self._protocol_version = version

    def _learn_initialize(self, body: dict[str, Any]) -> None:
        result = body.get("result")
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        if isinstance(version, str):
            with self._state_lock:
                self._protocol_version = version

    # -- output ------------------------------------------------------------------------------

    def _forward_batch(self, batch: list[Any]) -> None:
        requests = [m for m in batch if is_request(m)]
        try:
            endpoint = self._open()
        except Unavailable as exc:
            for message in requests:
                self._write(error_message(message["id"], CONNECTION_CLOSED, exc.message, exc.data))
            return
        conn = endpoint.connection
        try:
            conn.request("POST", endpoint.target, body=_dumps(batch), headers=self._headers({}, endpoint))
            response = conn.getresponse()
            raw = response.read()
            body = json.loads(raw) if raw else None
            if _is_jsonrpc(body):
                self._write(body)
            elif requests:
                code, text, data = self._http_error(response.status, body, endpoint)
                for message in requests:
                    self._write(error_message(message["id"], code, text, data))
        except (OSError, http.client.HTTPException, ValueError) as exc:
            for message in requests:
                self._write(error_message(message["id"], CONNECTION_CLOSED,
                                          f"lost gpuplaned at {endpoint.where}: {_reason(exc)}", {"reason": "lost"}))
        finally:
            conn.close()

    def _write(self, message: Any) -> None:
        """One message, one line; only JSON-RPC ever reaches stdout."""
        line = _dumps(message) + b"\n"
        with self._write_lock:
            if self.stdout_closed:
                return
            try:
                self._out.write(line)
                self._out.flush()
            except (BrokenPipeError, ValueError, OSError):
                self.stdout_closed = True  # the client has gone: stop reading, exit

    def _note(self, text: str) -> None:
        try:
            print(text, file=self._err, flush=True)
        except (OSError, ValueError):
            pass


def _dumps(message: Any) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
