"""``gpuplanectl logs --full``: its flag errors without a daemon, and its paging and its offline
answer against a scripted API (the real server and agent: ``tests/e2e/test_e2e_remote_logs.py``)."""

from __future__ import annotations

import http.server
import json
import os
import socketserver
import threading
from urllib.parse import parse_qs, urlsplit

import pytest
from gpuplanectl.commands import logs as logs_command
from helpers import DaemonProcess
from jobhelpers import ctl_in_process

from gpuplaned.protocol.discovery import PORTFILE_NAME, PortFile

JOB = "job_01TESTTESTTESTTESTTESTTEST"


@pytest.mark.parametrize(("args", "said"), [
    (["--full", "-f"], "--full and --follow do not go together"),
    (["--full", "--follow", "--stream", "stdout"], "--full and --follow do not go together"),
    (["--full", "--tail", "5"], "--full and --tail do not go together"),
    (["--full", "-n", "0"], "--full and --tail do not go together"),
])
def test_full_with_follow_or_tail_is_a_usage_error(tmp_path, args, said):
    proc = DaemonProcess(tmp_path / "none")  # no daemon: the flags are refused before any is looked for
    result = proc.run_ctl("logs", JOB, *args)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert said in result.stderr

    as_json = proc.run_ctl("logs", JOB, *args, "--json")
    assert as_json.returncode == 2
    error = json.loads(as_json.stdout)["error"]
    assert (error["code"], error["details"]["field"]) == ("bad_request", "full")


def test_full_is_refused_for_a_run(tmp_path):
    result = DaemonProcess(tmp_path / "none").run_ctl("logs", "run_01TESTTESTTESTTESTTESTTEST", "--full")
    assert result.returncode == 2
    assert "--full: run_01TESTTESTTESTTESTTESTTEST is a run" in result.stderr


# --- against a scripted API ------------------------------------------------------


class _Api(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """``GET /api/v1/jobs/JOB/logs`` over a "file" per stream, like the server: ``offset=`` pages
    from a line (after it, unless 0), ``tail=`` the last lines; ``offline``: ``offset=`` answers
    ``unavailable`` as for a remote job whose agent is away, and ``tail=`` the last ``stored``."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, path: str, files: dict[str, list[tuple[int, str]]], *, offline_after: int | None = None,
                 stored: int = 0) -> None:
        super().__init__(path, _Handler)
        self.files = files
        self.offline_after = offline_after  # pages served before the agent goes away
        self.stored = stored
        self.queries: list[dict[str, str]] = []


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Api

    def log_message(self, *args: object) -> None:
        pass

    def address_string(self) -> str:
        return "unix"

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        api = self.server
        api.queries.append(query)
        lines = api.files[query["stream"]]
        if "offset" in query:
            pages = sum(1 for q in api.queries if "offset" in q) - 1
            if api.offline_after is not None and pages >= api.offline_after:
                return self._send(503, {"error": {"code": "unavailable", "message": "node box is away", "details": {
                    "node": "box", "node_id": "nd_1", "stored_lines": api.stored}}})
            offset, limit = int(query["offset"]), int(query["limit"])  # the API's: from the line at offset
            found = [line for line in lines if line[0] >= offset][:limit + 1]
            after = found.pop()[0] if len(found) > limit else None
        else:
            tail = int(query["tail"])
            found, after = (lines[-min(tail, api.stored):] if tail and api.stored else []), None
        if found and after is None:  # where the line after the last one starts
            after = found[-1][0] + len(found[-1][1].encode()) + 1
        self._send(200, {"job_id": JOB, "attempt": 1, "stream": query["stream"],
                         "lines": [{"offset": o, "line": text} for o, text in found],
                         "next_offset": after if found else None})

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def scripted(tmp_path):
    proc = DaemonProcess(tmp_path / "fake")  # only its dirs and environment
    proc.runtime_dir.mkdir(parents=True)
    servers: list[_Api] = []

    def serve(files: dict[str, list[tuple[int, str]]], **options: object) -> _Api:
        server = _Api(str(proc.socket_path), files, **options)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        (proc.runtime_dir / PORTFILE_NAME).write_text(PortFile(pid=os.getpid(), unix=str(proc.socket_path)).render())
        return server

    yield proc, serve
    for server in servers:
        server.shutdown()
        server.server_close()


def file_of(*texts: str) -> list[tuple[int, str]]:
    out, offset = [], 0
    for text in texts:
        out.append((offset, text))
        offset += len(text.encode()) + 1
    return out


def test_full_pages_through_each_file_once(scripted, capsys, monkeypatch):
    proc, serve = scripted
    monkeypatch.setattr(logs_command, "FULL_PAGE", 3)  # so that a file takes several pages
    stdout = file_of(*(f"line {i}" for i in range(7)))
    api = serve({"stdout": stdout, "stderr": file_of("only one")})
    code, out, err = ctl_in_process(proc, capsys, "logs", JOB, "--full")
    assert (code, out, err) == (0, "".join(f"line {i}\n" for i in range(7)), "only one\n")
    # Each page from the next_offset of the one before (the line after its last); a short page is the end.
    assert [q["offset"] for q in api.queries if q["stream"] == "stdout"] == ["0", str(stdout[3][0]), str(stdout[6][0])]
    assert [q["offset"] for q in api.queries if q["stream"] == "stderr"] == ["0"]

    code, out, _ = ctl_in_process(proc, capsys, "logs", JOB, "--full", "--json", "--stream", "stdout")
    pages = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert [[line["line"] for line in page["lines"]] for page in pages] == [
        ["line 0", "line 1", "line 2"], ["line 3", "line 4", "line 5"], ["line 6"]]


def test_full_with_the_agent_away_prints_the_stored_tail_and_exits_1(scripted, capsys, monkeypatch):
    proc, serve = scripted
    monkeypatch.setattr(logs_command, "FULL_PAGE", 3)
    serve({"stdout": file_of(*(f"line {i}" for i in range(7))), "stderr": file_of("only one")},
          offline_after=1, stored=4)
    code, out, err = ctl_in_process(proc, capsys, "logs", JOB, "--full")
    assert code == 1
    # The first page came before the agent went away; then the stored tail's lines after it.
    assert out == "".join(f"line {i}\n" for i in range(7))
    said = ("[only the last 4 stored lines of {} are shown: node box's agent is offline, and the whole file is on "
            "that node; try again when it is back]\n")
    assert err == said.format("stdout") + "only one\n" + said.format("stderr")

    code, out, _ = ctl_in_process(proc, capsys, "logs", JOB, "--full", "--json", "--stream", "stderr")
    assert code == 1
    page, error = (json.loads(line) for line in out.splitlines())
    assert [line["line"] for line in page["lines"]] == ["only one"]
    assert error["error"]["code"] == "unavailable"
    assert error["error"]["details"] == {"node": "box", "node_id": "nd_1", "stored_lines": 4, "stream": "stderr"}
