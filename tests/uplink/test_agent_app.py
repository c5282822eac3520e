"""The agent's control app (``gpuplaned.uplink.agent_app``), served as the daemon serves it:
the real control actor under a real supervisor, Hypercorn on a real Unix socket, a real
``UplinkNodeLink`` over a spool with no server behind it (so the link stays down), and
httpx or a raw socket as the client."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import trio
from gpuplaned.actors import control

from gpuplaned.config import Config, HttpLimits
from gpuplaned.daemon import DaemonContext
from gpuplaned.endpoint import claim_endpoint
from gpuplaned.lifecycle import Lifecycle
from gpuplaned.runtime.spec import ActorSpec
from gpuplaned.runtime.supervisor import Supervisor
from gpuplaned.uplink.agent_app import MAX_BODY
from gpuplaned.uplink.link import UplinkNodeLink
from gpuplaned.uplink.spool import Spool

SERVER = "wss://server.example:8443"
BODY_TIMEOUT_S = 0.3


@asynccontextmanager
async def agent(tmp_path: Path, nursery: trio.Nursery, *, secret: str | None = None,
                ready: bool = True) -> AsyncIterator[DaemonContext]:
    """An agent daemon's context with only its control actor running."""
    runtime = Path(tempfile.mkdtemp(prefix="gpa-", dir="/tmp"))  # a socket path well under the 108 bytes
    try:
        cfg = Config(role="agent", home=tmp_path / "home", runtime_dir=runtime / "run", server=SERVER,
                     http_limits=HttpLimits(body_timeout_s=BODY_TIMEOUT_S))
        endpoint = claim_endpoint(cfg.runtime_dir, None)
        assert endpoint.unix_path is not None
        endpoint.secret = secret  # as the loopback-TCP fallback has it
        shared = DaemonContext(cfg, Lifecycle(), endpoint, trio.current_time(), time.time())
        shared.uplink = UplinkNodeLink(Spool(tmp_path / "spool", max_bytes=1 << 30, max_age_s=86_400), SERVER)
        spec = ActorSpec("control", control.run, frozenset({"agent"}), graceful_stop=True, stoppable=False)
        shared.supervisor = Supervisor([spec], shared)
        await nursery.start(shared.supervisor.run)
        if ready:
            shared.lifecycle.ready()
        try:
            yield shared
        finally:
            shared.uplink.close()
            endpoint.release()
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


@asynccontextmanager
async def client(shared: DaemonContext, **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.AsyncHTTPTransport(uds=shared.endpoint.unix_path)
    async with httpx.AsyncClient(transport=transport, base_url="http://agent", headers=headers) as http:
        yield http


async def call(http: httpx.AsyncClient, method: str, path: str, **kwargs) -> httpx.Response:
    """One request; every reply names the API version and is JSON (or nothing)."""
    response = await http.request(method, path, **kwargs)
    assert response.headers["x-gpuplane-api"] == "1"
    if response.content:
        assert response.headers["content-type"] == "application/json"
    return response


def error_of(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    return error


async def raw(shared: DaemonContext, *parts: bytes, wait_s: float = 5.0) -> bytes:
    """``parts`` over a fresh connection; what came back before the server closed it. After an
    early reply the server closes with our body unread: the rest of it is not sent then, and
    the reset that follows the reply ends it like a close."""
    stream = await trio.open_unix_socket(shared.endpoint.unix_path)
    reply = b""
    async with stream:
        try:
            for part in parts:
                await stream.send_all(part)
        except trio.BrokenResourceError:
            pass
        with trio.fail_after(wait_s):
            try:
                while chunk := await stream.receive_some(65536):
                    reply += chunk
            except trio.BrokenResourceError:
                pass
    return reply


def head_and_error(reply: bytes, status: int) -> tuple[bytes, dict]:
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), head
    assert b"\r\nx-gpuplane-api: 1\r\n" in head and b"\r\ncontent-type: application/json\r\n" in head
    return head, json.loads(body)["error"]


async def test_the_daemon_is_an_agent_and_shows_its_link(tmp_path, nursery):
    async with agent(tmp_path, nursery) as shared, client(shared) as http:
        response = await call(http, "GET", "/api/v1/daemon")
        assert response.status_code == 200
        body = response.json()
        assert body["role"] == "agent" and body["state"] == "READY"
        assert body["endpoints"]["unix"] == shared.endpoint.unix_path
        assert body["uplink"]["state"] == "waiting" and body["uplink"]["server"] == SERVER
        assert body["uplink"]["backlog_records"] == 0
        # Compact, sorted keys, ASCII and a newline, as the server's app writes JSON.
        assert response.content == (json.dumps(body, sort_keys=True, separators=(",", ":")) + "\n").encode()
        head = await call(http, "HEAD", "/api/v1/daemon")  # GET's headers, no body
        assert head.status_code == 200 and head.content == b""
        assert abs(int(head.headers["content-length"]) - len(response.content)) <= 3  # uptime_s's digits


async def test_actors_are_listed_and_commanded(tmp_path, nursery):
    async with agent(tmp_path, nursery) as shared, client(shared) as http:
        actors = (await call(http, "GET", "/api/v1/actors")).json()["actors"]
        assert [a["name"] for a in actors] == ["control"]
        one = await call(http, "GET", "/api/v1/actors/control")
        assert one.status_code == 200 and one.json()["actor"]["stats"]["endpoint"].startswith("unix://")
        error = error_of(await call(http, "GET", "/api/v1/actors/n%C3%A9pe"), 404, "not_found")
        assert error == {"code": "not_found", "message": "no actor named 'népe'",
                         "details": {"actor": "népe", "actors": ["control"]}}
        error = error_of(await call(http, "POST", "/api/v1/actors/control/frob"), 404, "not_found")
        assert error["details"] == {"verbs": ["start", "stop", "restart"]}
        error_of(await call(http, "POST", "/api/v1/actors/nope/start"), 404, "not_found")
        error = error_of(await call(http, "POST", "/api/v1/actors/control/stop"), 409, "conflict")
        assert error["details"] == {"actor": "control"}


async def test_an_unknown_path_names_the_server_and_a_wrong_method_is_405(tmp_path, nursery):
    async with agent(tmp_path, nursery) as shared, client(shared) as http:
        error = error_of(await call(http, "GET", "/api/v1/jobs"), 404, "not_found")
        assert error["message"] == ("no such endpoint on this agent: GET /api/v1/jobs; this daemon is a GPUPlane "
                                    f"agent, and the server at {SERVER} serves the API (jobs, runs, nodes, logs)")
        assert error["details"] == {"server": SERVER}
        # One segment per <name>, no trailing slash, and "//" is not merged.
        for path in ("/api/v1/actors/", "/api/v1/actors//start", "/api/v1/sessions/", "/api/v1/sessions//x",
                     "/api/v1/runs//summary", "/api/v1/daemon/"):
            error = error_of(await call(http, "GET", path), 404, "not_found")
            assert f"GET {path};" in error["message"]
        response = await call(http, "DELETE", "/api/v1/actors")
        assert error_of(response, 405, "method_not_allowed")["message"] == "DELETE is not allowed on /api/v1/actors"
        assert response.headers["allow"] == "GET, HEAD, OPTIONS"
        response = await call(http, "GET", "/api/v1/sessions")
        error_of(response, 405, "method_not_allowed")
        assert response.headers["allow"] == "OPTIONS, POST"
        error_of(await call(http, "PUT", "/api/v1/sessions/s1/batches", json={}), 405, "method_not_allowed")
        options = await call(http, "OPTIONS", "/api/v1/sessions/s1")
        assert options.status_code == 200 and options.content == b""
        assert options.headers["allow"] == "GET, HEAD, OPTIONS, POST"


async def test_a_secret_is_required_when_set(tmp_path, nursery):
    async with agent(tmp_path, nursery, secret="s3cret") as shared:
        async with client(shared) as http:
            error = error_of(await call(http, "GET", "/api/v1/daemon"), 401, "unauthorized")
            assert error["message"] == "missing or wrong bearer token for the control endpoint"
        async with client(shared, authorization="Bearer s3cre") as http:
            error_of(await call(http, "GET", "/api/v1/jobs"), 401, "unauthorized")  # before the 404
        async with client(shared, authorization="Bearer s3cret") as http:
            assert (await call(http, "GET", "/api/v1/daemon")).status_code == 200


async def test_starting_and_stopping_gate_the_requests(tmp_path, nursery):
    async with agent(tmp_path, nursery, ready=False) as shared, client(shared) as http:
        daemon = await call(http, "GET", "/api/v1/daemon")
        assert daemon.status_code == 200 and daemon.json()["state"] == "NOT_READY"
        error = error_of(await call(http, "GET", "/api/v1/actors"), 503, "not_ready")
        assert error["message"] == f"the agent is starting (its link to {SERVER} is waiting); retry shortly"
        assert error["details"] == {"state": "NOT_READY"}
        error_of(await call(http, "POST", "/api/v1/sessions", json={}), 503, "not_ready")
        error_of(await call(http, "POST", "/api/v1/daemon"), 405, "method_not_allowed")  # past the gate
        shared.lifecycle.ready()
        assert (await call(http, "GET", "/api/v1/actors")).status_code == 200
        shutdown = await call(http, "POST", "/api/v1/daemon/shutdown")
        assert shutdown.status_code == 202 and shutdown.json() == {"state": "STOPPING"}
        assert (await call(http, "GET", "/api/v1/daemon")).json()["state"] == "STOPPING"
        for method, path in (("GET", "/api/v1/actors"), ("HEAD", "/api/v1/daemon"), ("GET", "/api/v1/jobs"),
                             ("POST", "/api/v1/sessions")):
            response = await call(http, method, path)
            assert response.status_code == 503
            if method != "HEAD":
                assert error_of(response, 503, "stopping")["details"] == {"state": "STOPPING"}


async def test_sdk_calls_while_the_link_is_down_get_503_naming_the_server(tmp_path, nursery):
    async with agent(tmp_path, nursery) as shared, client(shared) as http:
        for method, path, body in (("POST", "/api/v1/sessions", {"project": "p"}), ("POST", "/api/v1/sessions", None),
                                   ("GET", "/api/v1/sessions/s1?after=3", None),
                                   ("POST", "/api/v1/sessions/s1/batches", {"points": []}),
                                   ("GET", "/api/v1/runs/r1/summary", None)):
            error = error_of(await call(http, method, path, json=body), 503, "not_ready")
            assert error["message"] == f"this agent's link to its server {SERVER} is down (waiting); retry later"
            assert error["details"] == {"server": SERVER, "link": "waiting"}
        error = error_of(await call(http, "GET", "/api/v1/runs/a.b/summary"), 400, "bad_request")
        assert error["message"].startswith("path: must match")


async def test_a_body_must_be_a_json_object(tmp_path, nursery):
    async with agent(tmp_path, nursery) as shared, client(shared) as http:
        error = error_of(await call(http, "POST", "/api/v1/sessions", content=b"nope"), 400, "bad_request")
        assert error["message"] == "the body is not JSON: Expecting value: line 1 column 1 (char 0)"
        error = error_of(await call(http, "POST", "/api/v1/sessions", json=[1]), 400, "bad_request")
        assert error["message"] == "the body must be a JSON object"
        error = error_of(await call(http, "POST", "/api/v1/sessions", content=b"[" * 100 + b"]" * 100),
                         400, "bad_request")
        assert error["message"] == "the body is not JSON: nested deeper than 64 levels"


async def test_a_body_over_the_limit_is_413_and_the_agent_answers_on(tmp_path, nursery):
    too_large = {"code": "payload_too_large", "details": {}, "message": f"the body is over {MAX_BODY} bytes"}
    async with agent(tmp_path, nursery) as shared:
        # Refused from its Content-Length, before any of it is read.
        reply = await raw(shared, b"POST /api/v1/sessions HTTP/1.1\r\nhost: a\r\ncontent-length: %d\r\n\r\n"
                          % (MAX_BODY + 1), b" " * (MAX_BODY + 1))
        head, error = head_and_error(reply, 413)
        assert error == too_large and b"\r\nconnection: close\r\n" in head.lower()
        async with client(shared) as http:
            assert (await call(http, "GET", "/api/v1/daemon")).status_code == 200
        # Chunked: refused once the chunks come to more than the limit.
        chunk = b"10000\r\n" + b" " * 0x10000 + b"\r\n"
        reply = await raw(shared, b"POST /api/v1/sessions/s1/batches HTTP/1.1\r\nhost: a\r\n"
                          b"transfer-encoding: chunked\r\n\r\n", *[chunk] * 17, b"0\r\n\r\n")
        assert head_and_error(reply, 413)[1] == too_large
        async with client(shared) as http:
            assert (await call(http, "GET", "/api/v1/actors")).status_code == 200
            padded = b" " * (MAX_BODY - 2) + b"{}"  # exactly the limit is taken
            error_of(await call(http, "POST", "/api/v1/sessions", content=padded), 503, "not_ready")


async def test_a_body_that_stalls_is_408(tmp_path, nursery):
    async with agent(tmp_path, nursery) as shared:
        start = trio.current_time()
        reply = await raw(shared, b"POST /api/v1/sessions HTTP/1.1\r\nhost: a\r\ncontent-length: 10\r\n\r\n{")
        assert BODY_TIMEOUT_S <= trio.current_time() - start < 3
        assert head_and_error(reply, 408)[1] == {"code": "request_timeout", "details": {},
                                                 "message": "the body did not arrive in time"}
        async with client(shared) as http:
            assert (await call(http, "GET", "/api/v1/actors")).status_code == 200


async def test_requests_and_errors_are_counted(tmp_path, nursery):
    async with agent(tmp_path, nursery) as shared, client(shared) as http:
        for path in ("/api/v1/daemon", "/api/v1/actors", "/api/v1/nope", "/api/v1/actors/nope"):
            await call(http, "GET", path)
        await call(http, "POST", "/api/v1/sessions", json={})  # 503: an error too
        stats = shared.supervisor.snapshot("control").stats
        assert (stats.requests, stats.errors) == (5, 3)
        shown = (await call(http, "GET", "/api/v1/actors/control")).json()["actor"]["stats"]
        assert (shown["requests"], shown["errors"]) == (6, 3)  # the request that reads them counts


async def test_nothing_is_served_over_a_websocket(tmp_path, nursery):
    async with agent(tmp_path, nursery) as shared:
        reply = await raw(shared, b"GET /api/v1/daemon HTTP/1.1\r\nhost: a\r\nconnection: upgrade\r\n"
                          b"upgrade: websocket\r\nsec-websocket-version: 13\r\n"
                          b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 403 ")  # the handshake refused: the app closed it
        async with client(shared) as http:
            assert (await call(http, "GET", "/api/v1/daemon")).status_code == 200
