"""Following job output over Server-Sent Events, with resume, against a real daemon."""

from __future__ import annotations

import http.client
import json
import socket

import pytest
from helpers import running_jobs

pytestmark = pytest.mark.e2e


class _Unix(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=30)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self._path)


def read_events(daemon, path: str, headers=None, stop_after: int | None = None):
    """Yield (event, id, data) from an SSE response; stops after ``stop_after`` line events."""
    conn = _Unix(str(daemon.socket_path))
    conn.request("GET", path, headers=headers or {})
    response = conn.getresponse()
    assert response.status == 200, response.read()
    assert response.getheader("Content-Type").startswith("text/event-stream")
    assert response.getheader("X-Accel-Buffering") == "no"
    events = []
    event, event_id, data = None, None, []
    try:
        while True:
            raw = response.readline()
            if not raw:
                break
            line = raw.decode().rstrip("\n")
            if line.startswith(":"):
                continue
            if line == "":
                if event is not None or data:
                    events.append((event, event_id, "\n".join(data)))
                    if event == "end":
                        break
                    if stop_after is not None and sum(1 for e in events if e[0] != "end") >= stop_after:
                        break
                event, event_id, data = None, None, []
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                event = value
            elif field == "id":
                event_id = value
            elif field == "data":
                data.append(value)
    finally:
        conn.close()
    return events


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """One daemon for the module: each test reads the logs of its own jobs, which end within it,
    so none needs a fresh daemon, whose start was most of such a test's time."""
    with running_jobs(tmp_path_factory.mktemp("job-logs"), "--gpus=fake:1") as jobs:
        yield jobs


def test_follow_both_streams_then_end(jobs):
    job = jobs.sh("""
        for i in 1 2 3; do echo "out $i"; echo "err $i" >&2; sleep 0.05; done
        printf 'no newline at the end'
        exit 5
    """, gpu=0)
    events = read_events(jobs.daemon, f"/api/v1/jobs/{job['id']}/logs/stream")
    out = [d for e, _, d in events if e == "stdout"]
    err = [d for e, _, d in events if e == "stderr"]
    assert out == ["out 1", "out 2", "out 3", "no newline at the end"]
    assert err == ["err 1", "err 2", "err 3"]
    kind, _, data = events[-1]
    assert kind == "end"
    assert json.loads(data) == {"status": "FAILED", "attempt": 1, "exit_code": 5, "failure_reason": "EXIT_CODE"}


def test_resume_after_a_dropped_connection_loses_and_repeats_nothing(jobs):
    job = jobs.sh("""
        i=0
        while [ $i -lt 300 ]; do i=$((i+1)); echo "line $i"; done
        while [ ! -e go ]; do sleep 0.02; done
        i=300
        while [ $i -lt 600 ]; do i=$((i+1)); echo "line $i"; done
    """, gpu=0)
    first = read_events(jobs.daemon, f"/api/v1/jobs/{job['id']}/logs/stream?stream=stdout", stop_after=120)
    assert len(first) == 120
    last_id = first[-1][1]
    jobs.file("go").touch()
    rest = read_events(jobs.daemon, f"/api/v1/jobs/{job['id']}/logs/stream?stream=stdout",
                       headers={"Last-Event-ID": last_id})
    lines = [d for e, _, d in first + rest if e == "stdout"]
    assert lines == [f"line {i}" for i in range(1, 601)]
    assert rest[-1][0] == "end"


def test_bad_follow_requests(jobs):
    job = jobs.sh("true", gpu=0)
    jobs.wait(job["id"])
    conn = _Unix(str(jobs.daemon.socket_path))
    conn.request("GET", f"/api/v1/jobs/{job['id']}/logs/stream?stream=both")
    response = conn.getresponse()
    assert response.status == 400
    assert json.loads(response.read())["error"]["details"]["field"] == "stream"
    conn.close()
    conn = _Unix(str(jobs.daemon.socket_path))
    conn.request("GET", "/api/v1/jobs/job_nope/logs/stream")
    response = conn.getresponse()
    assert response.status == 404
    response.read()
    conn.close()


def test_pages_by_offset_start_at_that_line_and_next_offset_reads_each_line_once(jobs):
    """``offset=`` skipped the line that starts there (except at 0), and ``offset=0&limit=1``
    answered ``next_offset: 0``, so a client following it read the first line forever."""
    job = jobs.sh("""
        echo "step 1"; echo; printf 'caf\\303\\251 \\377\\n'; echo "step 4"
        echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2
        printf 'no newline at the end'
        exit 1
    """, gpu=0)
    assert jobs.wait(job["id"])["status"] == "FAILED"
    api = jobs.client
    path = f"/api/v1/jobs/{job['id']}/logs"
    whole = api.get(f"{path}?stream=stdout&offset=0&limit=1000")
    lines = [(line["offset"], line["line"]) for line in whole["lines"]]
    assert [text for _, text in lines] == ["step 1", "", "caf\u00e9 \ufffd", "step 4", "no newline at the end"]
    for offset, text in lines:  # every line's own offset gives that line
        assert [(ln["offset"], ln["line"]) for ln in api.get(f"{path}?stream=stdout&offset={offset}&limit=1")["lines"]] \
            == [(offset, text)]
    read, offset = [], 0
    for _ in range(len(lines) + 1):  # following next_offset, one line a page, reads each once and ends
        page = api.get(f"{path}?stream=stdout&offset={offset}&limit=1")
        if not page["lines"]:
            assert page["next_offset"] is None
            break
        read += [(ln["offset"], ln["line"]) for ln in page["lines"]]
        offset = page["next_offset"]
    else:
        pytest.fail("following next_offset did not end")
    assert read == lines
    tail = api.get(f"{path}?stream=stdout&tail=2")
    assert [ln["line"] for ln in tail["lines"]] == ["step 4", "no newline at the end"]
    assert api.get(f"{path}?stream=stdout&offset={tail['next_offset']}&limit=5")["lines"] == []

    # An evidence pointer's offset resolves to the line it cites.
    found = api.get(f"/api/v1/jobs/{job['id']}/explanation")
    pointers = [e for f in found["findings"] for e in f["evidence"] if e["kind"] == "log" and e["stream"] == "stderr"]
    assert pointers, found
    for pointer in pointers:
        cited = api.get(f"{path}?stream=stderr&attempt={pointer['attempt']}&offset={pointer['offsets'][0]}&limit=1")
        assert [ln["line"] for ln in cited["lines"]] == pointer["lines"][:1]
        assert "CUDA out of memory" in cited["lines"][0]["line"]


def test_pages_from_the_stored_copy_once_the_file_is_gone(jobs):
    """With the file cleaned up, offset= pages the store's copy the same way: from the line at offset."""
    from helpers import wait_for

    job = jobs.sh('for i in 1 2 3 4 5; do echo "line $i"; done', gpu=0)
    jobs.wait(job["id"])
    api = jobs.client
    path = f"/api/v1/jobs/{job['id']}/logs"
    lines = [(ln["offset"], ln["line"]) for ln in api.get(f"{path}?stream=stdout&offset=0&limit=100")["lines"]]
    assert [text for _, text in lines] == [f"line {i}" for i in range(1, 6)]
    (jobs.daemon.home / "jobs" / job["id"] / "attempt-1" / "stdout.log").unlink()
    wait_for(lambda: len(api.get(f"{path}?stream=stdout&tail=10")["lines"]) == 5, what="the stored copy")
    for offset, text in lines:
        assert [(ln["offset"], ln["line"]) for ln in api.get(f"{path}?stream=stdout&offset={offset}&limit=1")["lines"]] \
            == [(offset, text)]
    read, offset = [], 0
    for _ in range(len(lines) + 1):
        page = api.get(f"{path}?stream=stdout&offset={offset}&limit=2")
        if not page["lines"]:
            break
        read += [(ln["offset"], ln["line"]) for ln in page["lines"]]
        offset = page["next_offset"]
    assert read == lines
