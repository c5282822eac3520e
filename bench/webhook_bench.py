#!/usr/bin/env python3
"""Event-to-webhook latency: from an event's time to its notification reaching a receiver.

One gpuplaned (``--gpus none``) in a fresh temporary directory, a webhook (format json, signed)
to an HTTP receiver on loopback in this process, and ``--jobs`` jobs (200) that fail at once
(``exit 1``), ``--batch`` (10) submitted at a time. Each failure is a ``JOB_FAILED`` event; its
``ts`` is when the node saw the process exit. Latency per notification: the receiver's wall
clock on arrival minus that ``ts``: the report to the server, the event's transaction (which
queues the notification through the outbox trigger), the delivery actor's wake-up, rendering,
signing and the POST. Target: p99 <= 1 s.

Usage::

    .venv/bin/python bench/webhook_bench.py [--jobs N] [--batch N] [--json]

Exits 0 whatever it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpuplanectl.client import DaemonClient  # noqa: E402


def receiver(arrivals: list[tuple[float, dict[str, Any]]]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            arrivals.append((time.time() * 1000, json.loads(body)["event"]))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    arrivals: list[tuple[float, dict[str, Any]]] = []
    server = receiver(arrivals)
    with tempfile.TemporaryDirectory(prefix="gpp-webhook-bench-") as tmp:
        root = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPLANE_", "XDG_RUNTIME_DIR"))}
        env.update(GPUPLANE_HOME=str(root / "home"), GPUPLANE_RUNTIME_DIR=str(root / "run"),
                   XDG_CONFIG_HOME=str(root / "config"), GPUPLANE_HTTP="127.0.0.1:0")
        with open(root / "daemon.log", "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "gpuplaned", "--gpus=none", "--max-cpu-jobs=16"], env=env,
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        try:
            client = wait_for(lambda: _client(root / "run"), 30, "gpuplaned to be READY")
            url = f"http://127.0.0.1:{server.server_address[1]}/hook"
            client.post("/api/v1/webhooks", {"url": url, "events": ["JOB_FAILED"], "secret": "bench-secret"})
            for start in range(0, args.jobs, args.batch):
                ids = [client.post("/api/v1/jobs", {"command": ["sh", "-c", "exit 1"], "cwd": tmp, "gpu": 0})["job"]["id"]
                       for _ in range(min(args.batch, args.jobs - start))]
                wait_for(lambda: all(client.get(f"/api/v1/jobs/{i}")["job"]["status"] == "FAILED" for i in ids), 60,
                         "a batch of jobs to fail")
            wait_for(lambda: len(arrivals) >= args.jobs, 60, "every notification")
        finally:
            proc.terminate()
            proc.wait(30)
    server.shutdown()
    latencies = [arrived - event["ts"] for arrived, event in arrivals]
    figures = {"notifications": len(latencies), "p50_ms": round(statistics.median(latencies), 1),
               "p99_ms": round(percentile(latencies, 0.99), 1), "max_ms": round(max(latencies), 1),
               "target_p99_ms": 1000}
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"event -> webhook over {figures['notifications']} JOB_FAILED notifications: "
              f"p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms, max {figures['max_ms']} ms "
              f"(target p99 <= 1000 ms)")


def _client(runtime_dir: Path) -> DaemonClient | None:
    try:
        client = DaemonClient.discover(runtime_dir, timeout=5)
        return client if client.get("/api/v1/daemon")["state"] == "READY" else None
    except Exception:
        return None


if __name__ == "__main__":
    main()
