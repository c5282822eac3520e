"""``gpuplanectl logs [-f]``: tails and live following against real daemons; reconnecting and
Ctrl-C against a scripted SSE server; the event-stream decoder and exit codes without processes."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socketserver
import subprocess
import sys
import threading
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

import pytest
from gpuplanectl import render
from gpuplanectl.client import SseDecoder, SseEvent
from gpuplanectl.exit_codes import for_job_end
from helpers import DaemonProcess
from jobhelpers import ctl, submit, wait_job

from gpuplaned.protocol.discovery import PORTFILE_NAME, PortFile

# --- with a daemon -------------------------------------------------------------


def test_follow_prints_lines_as_they_come_and_exits_with_the_jobs_code(gpu_daemon, tmp_path):
    # The job waits for the test after its first line, so following is seen to be live.
    script = ("echo out 1; while [ ! -e go ]; do sleep 0.05; done; "
              "for i in 2 3 4 5; do echo out $i; sleep 0.2; done; echo bad >&2; exit 3")
    job = submit(gpu_daemon, "--gpu", "0", "--dir", str(tmp_path), "--", "sh", "-c", script)
    follower = subprocess.Popen([sys.executable, "-m", "gpuplanectl", "logs", "-f", job["id"]], env=gpu_daemon.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert follower.stdout.readline() == "out 1\n"
        # Its start is written within a few ms of its first line (a start nobody waits on
        # shares the next write); it cannot end before the test says so.
        wait_job(gpu_daemon, job["id"], lambda j: j["status"] == "RUNNING", what="the job to be RUNNING")
        (tmp_path / "go").touch()
        out, err = follower.communicate(timeout=20)
    finally:
        follower.kill()
        follower.wait()
    assert follower.returncode == 3
    assert out == "out 2\nout 3\nout 4\nout 5\n"
    assert err == f"bad\n[job {job['id']} FAILED, exit code 3]\n"

    # Once it has ended: the tail, then the end at once.
    result = ctl(gpu_daemon, "logs", "-f", "--tail", "2", "--stream", "stdout", job["id"])
    assert (result.returncode, result.stdout, result.stderr) == (3, "out 4\nout 5\n", f"[job {job['id']} FAILED, exit code 3]\n")
    result = ctl(gpu_daemon, "logs", "-f", "--tail", "0", job["id"], "--json")
    assert result.returncode == 3
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {"end": {"status": "FAILED", "attempt": 1, "exit_code": 3, "failure_reason": "EXIT_CODE"}}]

    # Without -f: each stream's tail, stderr lines on stderr unless that stream alone is asked for.
    result = ctl(gpu_daemon, "logs", "--tail", "2", job["id"])
    assert (result.returncode, result.stdout, result.stderr) == (0, "out 4\nout 5\n", "bad\n")
    result = ctl(gpu_daemon, "logs", "--stream", "stderr", job["id"])
    assert (result.returncode, result.stdout, result.stderr) == (0, "bad\n", "")
    pages = json.loads(ctl(gpu_daemon, "logs", "--json", "--tail", "1", job["id"]).stdout)
    assert [line["line"] for line in pages["stdout"]["lines"]] == ["out 5"]
    assert [line["line"] for line in pages["stderr"]["lines"]] == ["bad"]

    result = ctl(gpu_daemon, "logs", "-f", "job_nope")
    assert (result.returncode, result.stdout, result.stderr) == (1, "", "error: no job 'job_nope'\n")


def test_follow_goes_on_to_the_retried_attempt_and_reports_signals(gpu_daemon, tmp_path):
    # The first attempt waits for the test until the follower has its line, so the follower is
    # on attempt 1 when it ends however slowly the CLI starts; the second finds "go" and ends.
    script = "echo try; while [ ! -e go ]; do sleep 0.05; done; exit 1"
    retried = submit(gpu_daemon, "--gpu", "0", "--retry", "1", "--dir", str(tmp_path), "--", "sh", "-c", script)
    follower = subprocess.Popen([sys.executable, "-m", "gpuplanectl", "job", "logs", "-f", retried["id"]],
                                env=gpu_daemon.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL)
    try:
        assert follower.stdout.readline() == "try\n"
        (tmp_path / "go").touch()
        out, err = follower.communicate(timeout=30)
    finally:
        follower.kill()
        follower.wait()
    assert (follower.returncode, "try\n" + out) == (1, "try\ntry\n"), err
    assert err == (f"[job {retried['id']} attempt 1 ended; following attempt 2]\n"
                   f"[job {retried['id']} FAILED, exit code 1]\n")

    killed = submit(gpu_daemon, "--gpu", "0", "--", "sh", "-c", "echo about to crash; kill -SEGV $$")
    result = ctl(gpu_daemon, "logs", "-f", killed["id"])
    assert (result.returncode, result.stdout) == (128 + signal.SIGSEGV, "about to crash\n")
    assert result.stderr == f"[job {killed['id']} FAILED, signal SIGSEGV]\n"
    assert wait_job(gpu_daemon, killed["id"])["failure_reason"] == "SIGNAL(SIGSEGV)"


# --- against a scripted SSE server -----------------------------------------------

JOB = "job_01TESTTESTTESTTESTTESTTEST"


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, path: str, streams: list[Callable[[http.server.BaseHTTPRequestHandler], None]]) -> None:
        super().__init__(path, _Handler)
        self.streams = streams
        self.requests: list[tuple[str, dict[str, list[str]], str | None]] = []
        self.release = threading.Event()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: object) -> None:
        pass

    def address_string(self) -> str:
        return "unix"

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        self.server.requests.append((url.path, query, self.headers.get("Last-Event-ID")))
        if url.path == f"/api/v1/jobs/{JOB}/logs":
            body = json.dumps({"job_id": JOB, "attempt": 1, "stream": query["stream"][0], "lines": [],
                               "next_offset": None}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif url.path == f"/api/v1/jobs/{JOB}/logs/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.server.streams.pop(0)(self)
            self.close_connection = True
        else:
            self.send_error(404)


def _chunk(handler: http.server.BaseHTTPRequestHandler, text: str) -> None:
    data = text.encode()
    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
    handler.wfile.flush()


@pytest.fixture
def fake_daemon(tmp_path):
    """A scripted control API published like a daemon; give it the streams to serve, in order."""
    proc = DaemonProcess(tmp_path / "fake")  # only its dirs and environment
    proc.runtime_dir.mkdir(parents=True)
    servers: list[_Server] = []

    def serve(*streams: Callable[[http.server.BaseHTTPRequestHandler], None]) -> _Server:
        server = _Server(str(proc.socket_path), list(streams))
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        (proc.runtime_dir / PORTFILE_NAME).write_text(PortFile(pid=os.getpid(), unix=str(proc.socket_path)).render())
        return server

    yield proc, serve
    for server in servers:
        server.release.set()
        server.shutdown()
        server.server_close()


def test_follow_reconnects_with_last_event_id(fake_daemon):
    proc, serve = fake_daemon

    def ends_early(handler):  # a clean end of the stream, but no `end` event
        _chunk(handler, ": keep-alive\n\n")
        _chunk(handler, "id: 0,-1\nevent: stdout\ndata: one\n\n")
        _chunk(handler, "event: stderr\nid: 0,0\ndata: warn\n\n")
        handler.wfile.write(b"0\r\n\r\n")

    def breaks(handler):  # the connection drops in the middle of a chunk
        _chunk(handler, "id: 4,0\nevent: stdout\ndata: two\ndata: lines\n\n")
        handler.wfile.write(b"40\r\nid: 9,0\nevent: std")
        handler.wfile.flush()

    def finishes(handler):
        _chunk(handler, "id: 14,0\nevent: stdout\ndata: three\n\n")
        _chunk(handler, 'event: end\ndata: {"status": "FAILED", "exit_code": 3, "failure_reason": "EXIT_CODE"}\n\n')
        handler.wfile.write(b"0\r\n\r\n")

    server = serve(ends_early, breaks, finishes)
    result = proc.run_ctl("logs", "-f", JOB, timeout=20)
    assert result.returncode == 3, result.stderr
    assert result.stdout == "one\ntwo\nlines\nthree\n"
    assert result.stderr == f"warn\n[job {JOB} FAILED, exit code 3]\n"
    streams = [(query, last_id) for path, query, last_id in server.requests if path.endswith("/stream")]
    assert streams == [({"stream": ["all"], "attempt": ["1"]}, None),
                       ({"stream": ["all"], "attempt": ["1"]}, "0,0"),
                       ({"stream": ["all"], "attempt": ["1"]}, "4,0")]


def test_ctrl_c_stops_following_without_a_traceback(fake_daemon):
    proc, serve = fake_daemon

    def holds_open(handler):
        _chunk(handler, "id: 0\nevent: stdout\ndata: hello\n\n")
        handler.server.release.wait(20)

    serve(holds_open)
    follower = subprocess.Popen([sys.executable, "-m", "gpuplanectl", "logs", "-f", "--stream", "stdout", JOB],
                                env=proc.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL)
    try:
        assert follower.stdout.readline() == "hello\n"
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=10)
    finally:
        follower.kill()
        follower.wait()
    assert (follower.returncode, out, err) == (130, "", "")


# --- without processes -----------------------------------------------------------


def test_sse_decoder_follows_the_event_stream_grammar():
    decoder = SseDecoder()
    lines = [": keep-alive", "", "id: 5", "event: stdout", "data: a", "data:b", "data:  c", "retry: 10", "",
             "data: no event name", "", "event: ignored without data", "", "data:", "", "id: 6,7", "data: x", ""]
    events = [event for line in lines if (event := decoder.feed(line)) is not None]
    assert events == [
        SseEvent("stdout", "a\nb\n c", "5"),
        SseEvent("message", "no event name", "5"),  # the id carries over until a new one is set
        SseEvent("message", "", "5"),  # an empty log line is still a line
        SseEvent("message", "x", "6,7"),
    ]


@pytest.mark.parametrize(("end", "code", "line"), [
    ({"status": "SUCCEEDED", "exit_code": 0, "failure_reason": None}, 0, "SUCCEEDED, exit code 0"),
    ({"status": "FAILED", "exit_code": 3, "failure_reason": "EXIT_CODE"}, 3, "FAILED, exit code 3"),
    ({"status": "FAILED", "exit_code": None, "failure_reason": "SIGNAL(SIGKILL)"}, 137, "FAILED, signal SIGKILL"),
    ({"status": "FAILED", "exit_code": None, "failure_reason": "OOM", "signal": 9}, 137, "FAILED, signal 9 (OOM)"),
    ({"status": "FAILED", "exit_code": None, "failure_reason": "TIMEOUT"}, 1, "FAILED (TIMEOUT)"),
    ({"status": "CANCELLED", "exit_code": None, "failure_reason": None}, 1, "CANCELLED"),
    ({"status": "LOST", "exit_code": None, "failure_reason": "LOST"}, 1, "LOST"),
    ({"status": None}, 1, "ENDED"),
])
def test_exit_code_and_last_line_for_a_job_end(end, code, line):
    assert for_job_end(end) == code
    assert render.end_line("job_x", end) == f"[job job_x {line}]"
