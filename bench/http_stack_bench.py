#!/usr/bin/env python3
"""What the HTTP stack costs a control-socket request, before any of gpuplaned's own work:
Hypercorn (as the daemon runs it, with ``gpuplaned.http.connections``' patch) against a
minimal HTTP/1.1 loop on ``h11``, both serving the same Quart-Trio app, and that loop serving
a bare ASGI app (no Quart), for Quart's own share.

Why: issue 31 item 8 asks for a submit (a new connection, a JSON POST) within 2x of
task-spooler's client, whose whole round trip is ~1 ms; this says how much of a request the
stack DESIGN.md fixes takes by itself. Each server is a process of its own on a Unix socket in
a temp dir; the client (this process, ``http.client``, a new connection a request, as the CLI
makes) sends ``--requests`` GETs then as many small JSON POSTs to each server in turn,
``--reps`` times interleaved (the machine's speed moves within minutes). Reported per server:
its CPU a request (utime+stime over the requests, psutil) and the median round trip.

The minimal loop is a yardstick, not a server to ship: one request a connection, no timeouts,
no limits, no streaming, no WebSockets.

Usage::

    .venv/bin/python bench/http_stack_bench.py                 # 3 reps of 1,000 + 1,000 requests
    .venv/bin/python bench/http_stack_bench.py --reps 5 --requests 500

Exits 0 unless the arguments are wrong; the servers are stopped and the temp dir removed on
the way out.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

STACKS = ("hypercorn+quart", "h11+quart", "h11+bare")
REPLY = {"ok": True, "name": "gpuplaned", "items": list(range(10))}
BODY = json.dumps({"command": ["true"], "cwd": "/tmp", "gpu": 0}).encode()


# --------------------------------------------------------------------------------------------
# The servers (each in its own process: ``--serve STACK SOCKET``)


def quart_app():
    from quart import request
    from quart_trio import QuartTrio

    app = QuartTrio("stack-bench")

    @app.get("/get")
    async def get() -> dict:
        return REPLY

    @app.post("/post")
    async def post() -> dict:
        body = await request.get_json()
        return {**REPLY, "got": len(body)}

    return app


async def bare_app(scope, receive, send) -> None:
    """The same replies as ``quart_app``'s, straight on ASGI."""
    if scope["type"] != "http":
        return
    got = b""
    while True:
        message = await receive()
        got += message.get("body", b"")
        if not message.get("more_body"):
            break
    reply = REPLY if scope["method"] == "GET" else {**REPLY, "got": len(json.loads(got))}
    data = json.dumps(reply).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


async def serve_h11(app, path: str) -> None:
    import h11
    import trio

    async def one(stream) -> None:
        conn = h11.Connection(h11.SERVER)
        request, body = None, b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
        target, _, query = request.target.partition(b"?")
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": request.method.decode(), "scheme": "http", "path": target.decode(), "raw_path": target,
                 "query_string": query, "root_path": "", "headers": list(request.headers), "client": None,
                 "server": None, "extensions": {}}
        given = False
        out: list[bytes] = []

        async def receive() -> dict:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            await trio.sleep_forever()

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), (b"connection", b"close")]
                out.append(conn.send(h11.Response(status_code=message["status"], headers=headers)))
            elif message["type"] == "http.response.body":
                out.append(conn.send(h11.Data(data=message.get("body", b""))))
                if not message.get("more_body"):
                    out.append(conn.send(h11.EndOfMessage()))
                    await stream.send_all(b"".join(out))

        async with trio.open_nursery() as nursery:  # the app may spawn tasks; they end with the reply
            await app(scope, receive, send)
            nursery.cancel_scope.cancel()
        await stream.aclose()

    sock = trio.socket.socket(socket.AF_UNIX)
    await sock.bind(path)
    sock.listen(128)
    await trio.serve_listeners(one, [trio.SocketListener(sock)])


async def serve_hypercorn(app, path: str) -> None:
    from hypercorn.config import Config
    from hypercorn.trio import serve

    from gpuplaned.http import connections

    connections.install()  # as the daemon serves: the patched TCPServer and H11Protocol
    cfg = Config()
    cfg.bind = [f"unix:{path}"]
    cfg.accesslog = None
    cfg.errorlog = None
    await serve(app, cfg)


def serve(stack: str, path: str) -> None:
    import trio

    if stack == "hypercorn+quart":
        trio.run(serve_hypercorn, quart_app(), path)
    else:
        trio.run(serve_h11, quart_app() if stack == "h11+quart" else bare_app, path)


# --------------------------------------------------------------------------------------------
# The client


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=10)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.path)


def ask(path: str, method: str) -> float:
    started = time.perf_counter()
    conn = UnixConnection(path)
    try:
        conn.request(method, f"/{method.lower()}", body=BODY if method == "POST" else None,
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        if response.status != 200 or not json.loads(data)["ok"]:
            raise RuntimeError(f"{method}: {response.status} {data[:200]!r}")
    finally:
        conn.close()
    return time.perf_counter() - started


def measure(stack: str, root: Path, requests: int) -> dict[str, float]:
    path = str(root / f"{stack}.sock")
    if os.path.exists(path):  # the last rep's
        os.unlink(path)
    server = subprocess.Popen([sys.executable, __file__, "--serve", stack, path])
    try:
        deadline = time.monotonic() + 30
        while True:  # its socket file is there from bind(), before listen(): ask until it answers
            try:
                ask(path, "GET")
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"{stack}: the server did not start") from None
                time.sleep(0.01)
        for _ in range(50):  # warm up
            ask(path, "GET")
        proc = psutil.Process(server.pid)
        figures: dict[str, float] = {}
        for method in ("GET", "POST"):
            before = proc.cpu_times()
            trips = [ask(path, method) for _ in range(requests)]
            after = proc.cpu_times()
            figures[f"{method}_cpu_ms"] = ((after.user + after.system) - (before.user + before.system)) / requests * 1e3
            figures[f"{method}_trip_ms"] = statistics.median(trips) * 1e3
        return figures
    finally:
        server.terminate()
        server.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="GETs, then as many POSTs, a server a rep")
    parser.add_argument("--reps", type=int, default=3, help="rounds over the servers, interleaved")
    parser.add_argument("--serve", nargs=2, metavar=("STACK", "SOCKET"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(*args.serve)
        return 0
    if args.requests < 1 or args.reps < 1:
        parser.error("--requests and --reps must be at least 1")
    runs: dict[str, list[dict[str, float]]] = {stack: [] for stack in STACKS}
    with tempfile.TemporaryDirectory(prefix="gpuplane-stack-bench-") as root:
        for rep in range(args.reps):
            for stack in STACKS:
                print(f"[bench] rep {rep + 1}/{args.reps}: {stack}", file=sys.stderr, flush=True)
                runs[stack].append(measure(stack, Path(root), args.requests))
    print(f"a new Unix-socket connection a request, {args.requests} GETs and {args.requests} small JSON POSTs a "
          f"server, {args.reps} reps interleaved; medians over the reps (load average {os.getloadavg()[0]:.2f})")
    print(f"{'server':<17} {'GET CPU ms':>11} {'GET trip ms':>12} {'POST CPU ms':>12} {'POST trip ms':>13}"
          f"  {'CPU a request / hypercorn+quart':>32}")
    base = statistics.median(r["POST_cpu_ms"] + r["GET_cpu_ms"] for r in runs[STACKS[0]])
    for stack, reps in runs.items():
        med = {key: statistics.median(r[key] for r in reps) for key in reps[0]}
        share = statistics.median(r["POST_cpu_ms"] + r["GET_cpu_ms"] for r in reps) / base
        print(f"{stack:<17} {med['GET_cpu_ms']:>11.3f} {med['GET_trip_ms']:>12.3f} {med['POST_cpu_ms']:>12.3f} "
              f"{med['POST_trip_ms']:>13.3f}  {share:>32.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
