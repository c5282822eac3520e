"""A stand-in for the daemon's session API on a Unix socket, for SDK tests without gpuplaned.

It stores each (session, seq) batch once, like the daemon, and can be told to answer 503 or
drop the connection, so the SDK's retry and resend paths can be watched.
"""

from __future__ import annotations

import json
import math
import os
import socketserver
import threading
import uuid
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from gpuplaned.protocol import columns

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    fake: FakeDaemon


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def address_string(self) -> str:
        return "unix"

    def do_GET(self) -> None:
        self._answer(404, {"error": {"code": "not_found", "message": "", "details": {}}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        fake: FakeDaemon = self.server.fake  # type: ignore[attr-defined]
        status, body = fake.handle(self.path, json.loads(raw), dict(self.headers))
        if status is None:  # drop the connection without an answer
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self._answer(status, body)

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class FakeDaemon:
    def __init__(self, runtime_dir: Path) -> None:
        self.runtime_dir = runtime_dir
        runtime_dir.mkdir(parents=True, exist_ok=True)
        self.socket_path = str(runtime_dir / "gpuplaned.sock")
        self.lock = threading.Lock()
        self.sessions: dict[str, dict] = {}
        self.batches: dict[tuple[str, int], dict] = {}
        self.requests: list[tuple[str, Any]] = []
        self.finished: dict[str, str] = {}
        self.envs: dict[str, Any] = {}
        self.fail_batches = 0  # answer this many batch posts with 503
        self.drop_batches = 0  # then drop this many connections after storing the batch
        self.not_ready = False  # every request gets 503 not_ready
        self.down = False  # every connection is dropped unanswered, nothing stored (a dead daemon)
        self.headers: list[dict] = []
        self._server = _Server(self.socket_path, _Handler)
        self._server.fake = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeDaemon:
        self._thread.start()
        (self.runtime_dir / "gpuplaned.port").write_text(
            f"protocol=1\npid={os.getpid()}\nunix={self.socket_path}\nEOF\n")
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def handle(self, path: str, body: Any, headers: dict) -> tuple[int | None, Any]:
        with self.lock:
            self.requests.append((path, body))
            self.headers.append(headers)
            if self.down:
                return None, None
            if self.not_ready:
                return 503, {"error": {"code": "not_ready", "message": "starting", "details": {}}}
            parts = path.strip("/").split("/")
            if parts == ["api", "v1", "sessions"]:
                session_id = body.get("session_id") or str(uuid.uuid4())
                if session_id in self.sessions:  # re-opened (after an outage): the same session and run
                    return 201, {"session_id": session_id, "run_id": self.sessions[session_id]["run_id"]}
                run_id = body.get("run_id") or f"run_{uuid.uuid4().hex[:12]}"
                self.sessions[session_id] = dict(body, run_id=run_id)
                return 201, {"session_id": session_id, "run_id": run_id}
            session_id = parts[3]
            if session_id not in self.sessions:
                return 404, {"error": {"code": "not_found", "message": "no such session", "details": {}}}
            if parts[4] == "batches":
                if self.fail_batches:
                    self.fail_batches -= 1
                    return 503, {"error": {"code": "not_ready", "message": "busy", "details": {}}}
                key = (session_id, body["seq"])
                duplicate = key in self.batches
                metrics = unpacked(body)
                if not duplicate:
                    self.batches[key] = metrics
                if self.drop_batches:
                    self.drop_batches -= 1
                    return None, None
                points = sum(len(c["value"]) for c in metrics.values())
                return 200, {"seq": body["seq"], "duplicate": duplicate, "points": points}
            if parts[4] == "env":
                self.envs[session_id] = body
                return 200, {"stored": True}
            if parts[4] == "finish":
                self.finished[session_id] = body["status"]
                return 200, {"session": {"id": session_id}}
            return 404, {"error": {"code": "not_found", "message": path, "details": {}}}

    def points(self, name: str) -> list[tuple[int, float]]:
        """Every stored (step, value) of ``name``, over all sessions and batches, in seq order."""
        with self.lock:
            out = []
            for key in sorted(self.batches):
                cols = self.batches[key].get(name)
                if cols:
                    out.extend(zip(cols["step"], cols["value"]))
            return out

    def names(self) -> set[str]:
        with self.lock:
            return {name for metrics in self.batches.values() for name in metrics}


def unpacked(batch: dict) -> dict:
    """A batch's metrics as lists, whether it came as JSON numbers or packed columns."""
    if batch.get("encoding") != "base64":
        return batch["metrics"]
    return {name: {key: list(columns.decode(text, key)) for key, text in cols.items()}
            for name, cols in batch["metrics"].items()}


def same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def sdk_env(runtime_dir: Path, home: Path | None = None) -> dict[str, str]:
    """An environment for a subprocess that imports the SDK and finds the daemon in ``runtime_dir``.

    Its spool goes to ``home``/spool, by default the home beside ``runtime_dir`` (the one
    ``helpers.DaemonProcess`` gives its daemon), never the real user's.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANE_")}
    env["PYTHONPATH"] = str(SDK_DIR)
    env["GPUPLANE_RUNTIME_DIR"] = str(runtime_dir)
    env["GPUPLANE_HOME"] = str(home if home is not None else Path(runtime_dir).parent / "home")
    return env
