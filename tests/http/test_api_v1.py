"""REST v1 conventions against a real daemon: cursor pagination, Idempotency-Key, body limit,
runs, node snapshot streams, and streams whose clients vanish leaving nothing behind."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import time

import pytest
from helpers import Jobs, wait_for

from gpuplaned.protocol.errors import ApiError, ErrorCode

pytestmark = pytest.mark.e2e


@pytest.fixture
def jobs(daemon_factory, tmp_path):
    return Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1", "--max-cpu-jobs=4")


def raw_post(jobs: Jobs, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], dict]:
    """A POST over the daemon's Unix socket with exactly these bytes and headers."""
    conn = http.client.HTTPConnection("localhost", timeout=10)
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(jobs.daemon.socket_path))
    conn.sock = sock
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json", **headers})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def pages(jobs: Jobs, path: str, key: str, limit: int, between=None) -> list[str]:
    seen, cursor = [], None
    while True:
        sep = "&" if "?" in path else "?"
        page = jobs.client.get(f"{path}{sep}limit={limit}" + (f"&cursor={cursor}" if cursor else ""))
        seen += [item["id"] for item in page[key]]
        cursor = page["next_cursor"]
        if between is not None:
            between()
        if cursor is None:
            return seen


def test_job_pages_are_newest_first_and_unshaken_by_new_jobs(jobs):
    made = [jobs.submit(["true"], gpu=0)["id"] for _ in range(7)]
    newest_first = made[::-1]
    assert pages(jobs, "/api/v1/jobs", "jobs", 3) == newest_first
    # Jobs submitted while paging land before the first page: the pages go on unshaken.
    assert pages(jobs, "/api/v1/jobs", "jobs", 2, between=lambda: jobs.submit(["true"], gpu=0)) == newest_first[:0] + \
        pages(jobs, "/api/v1/jobs", "jobs", 100)[4:]
    everything = pages(jobs, "/api/v1/jobs", "jobs", 100)
    assert everything[-7:] == newest_first and len(set(everything)) == len(everything) == 11
    for bad in ("garbage", "eyJ4Ijox", pages_cursor(jobs, "/api/v1/runs?limit=1")):
        with pytest.raises(ApiError) as err:
            jobs.client.get(f"/api/v1/jobs?limit=1&cursor={bad}")
        assert err.value.code == ErrorCode.BAD_REQUEST and "cursor" in err.value.message


def pages_cursor(jobs: Jobs, path: str) -> str:
    return wait_for(lambda: jobs.client.get(path)["next_cursor"], what="a second page")


def test_runs_list_and_show(jobs):
    job = jobs.submit(["sh", "-c", "exit 3"], gpu=0, max_attempts=2)
    wait_for(lambda: jobs.get(job["id"])["status"] == "FAILED" and jobs.get(job["id"])["attempt"] == 2,
             what="two failed attempts")
    runs = jobs.client.get(f"/api/v1/runs?job_id={job['id']}")["runs"]
    assert [(r["attempt"], r["status"], r["exit_code"]) for r in runs] == [(2, "FAILED", 3), (1, "FAILED", 3)]
    one = jobs.client.get(f"/api/v1/runs/{runs[0]['id']}")["run"]
    assert one == runs[0] and one["source"] == "job" and one["job_id"] == job["id"]
    assert pages(jobs, f"/api/v1/runs?job_id={job['id']}", "runs", 1) == [r["id"] for r in runs]
    assert jobs.client.get("/api/v1/runs?status=failed")["runs"]
    with pytest.raises(ApiError) as err:
        jobs.client.get("/api/v1/runs?status=BORED")
    assert err.value.code == ErrorCode.BAD_REQUEST
    with pytest.raises(ApiError) as err:
        jobs.client.get("/api/v1/runs/run_nope")
    assert err.value.code == ErrorCode.NOT_FOUND


def test_idempotency_key_gives_one_job_and_refuses_another_body(jobs):
    body = json.dumps({"command": ["sleep", "30"], "cwd": str(jobs.workdir), "gpu": 0}).encode()
    first = raw_post(jobs, "/api/v1/jobs", body, {"Idempotency-Key": "sweep-42"})
    again = raw_post(jobs, "/api/v1/jobs", body, {"Idempotency-Key": "sweep-42"})
    assert first[0] == again[0] == 201
    assert again[2] == first[2] and again[1].get("idempotent-replayed") == "true"
    assert [j["id"] for j in jobs.client.get("/api/v1/jobs")["jobs"]] == [first[2]["job"]["id"]]

    other = json.dumps({"command": ["false"], "cwd": str(jobs.workdir), "gpu": 0}).encode()
    status, _, reply = raw_post(jobs, "/api/v1/jobs", other, {"Idempotency-Key": "sweep-42"})
    assert status == 409 and reply["error"]["code"] == "conflict" and "different request (body or query)" in reply["error"]["message"]
    # The key belongs to its path: the same key elsewhere is a different request.
    status, _, _ = raw_post(jobs, f"/api/v1/jobs/{first[2]['job']['id']}/cancel", b"{}", {"Idempotency-Key": "sweep-42"})
    assert status == 200
    # A dry run is a request of its own: its key never replays the plan as if it were the job.
    plan = raw_post(jobs, "/api/v1/jobs?dry_run=true", body, {"Idempotency-Key": "plan-7"})
    assert plan[0] == 200 and plan[2]["plan"]["would"] in ("dispatch", "queue")
    status, _, reply = raw_post(jobs, "/api/v1/jobs", body, {"Idempotency-Key": "plan-7"})
    assert status == 409 and reply["error"]["code"] == "conflict"
    status, _, reply = raw_post(jobs, "/api/v1/jobs", body, {"Idempotency-Key": "x" * 300})
    assert status == 400 and reply["error"]["details"]["field"] == "Idempotency-Key"
    assert len(jobs.client.get("/api/v1/jobs")["jobs"]) == 1


def test_an_oversized_body_is_413_with_the_error_shape(jobs):
    big = json.dumps({"command": ["echo", "x" * (2 << 20)], "cwd": str(jobs.workdir)}).encode()
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect(str(jobs.daemon.socket_path))
    with sock:
        head = (f"POST /api/v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(big)}\r\n\r\n").encode()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it may stop reading at the limit
            sock.sendall(head + big)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
        head, _, body = answer.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        while len(body) < length:
            body += sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 413"), head
    reply = json.loads(body)
    assert reply["error"]["code"] == "payload_too_large"
    assert jobs.client.get("/api/v1/jobs")["jobs"] == []


def test_node_snapshot_stream(jobs):
    node = wait_for(lambda: (n := jobs.client.get("/api/v1/nodes")["nodes"][0])["snapshot"] and n,
                    what="a first snapshot")
    with contextlib.closing(jobs.client.events(f"/api/v1/nodes/{node['name']}/stream", read_timeout=15)) as stream:
        first = next(stream)
        second = next(stream)
    assert first.event == second.event == "snapshot"
    a, b = json.loads(first.data), json.loads(second.data)
    assert int(second.id) == b["ts"] > a["ts"] and [g["index"] for g in b["gpus"]] == [0]
    with pytest.raises(ApiError) as err:
        jobs.client.events("/api/v1/nodes/nope/stream")
    assert err.value.code == ErrorCode.NOT_FOUND


def open_stream(jobs: Jobs, path: str) -> socket.socket:
    """An SSE request on a bare socket, its response head read: a client that can just vanish."""
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect(str(jobs.daemon.socket_path))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock


def test_clients_vanishing_mid_stream_leave_no_task_behind(jobs):
    job = jobs.sh("i=0; while true; do echo line $i; i=$((i+1)); sleep 0.01; done", gpu=0)
    jobs.wait(job["id"], "RUNNING")
    node = jobs.client.get("/api/v1/nodes")["nodes"][0]

    def settled_tasks() -> int:
        counts = []
        for _ in range(3):
            counts.append(jobs.client.get("/api/v1/daemon")["tasks"])
            time.sleep(0.2)
        return min(counts)

    before = settled_tasks()
    paths = [f"/api/v1/jobs/{job['id']}/logs/stream", "/api/v1/events/stream", f"/api/v1/nodes/{node['id']}/stream"]
    streams = [open_stream(jobs, paths[i % 3]) for i in range(100)]
    for sock in streams[::3]:
        assert b"event: stdout" in sock.recv(65536)  # the log followers are mid-stream when they go
    during = jobs.client.get("/api/v1/daemon")["tasks"]
    assert during > before + 50  # the streams were really open
    for sock in streams:  # vanish: close the sockets without a goodbye
        sock.close()
    after = wait_for(lambda: (t := settled_tasks()) <= before + 2 and t, timeout=20, what="stream tasks to go")
    assert after <= before + 2
    jobs.client.post(f"/api/v1/jobs/{job['id']}/cancel")
    jobs.wait(job["id"])


def test_a_writes_audit_record_commits_with_it_and_a_refusal_is_recorded_once(jobs):
    def rows():
        entries = jobs.client.get("/api/v1/audit?limit=1000")["entries"]
        return sorted((e for e in entries if e["action"] == "POST /api/v1/jobs"), key=lambda e: e["id"])

    def submit(*argv, **more):
        return jobs.client.post("/api/v1/jobs", {"command": ["true", *argv], "cwd": str(jobs.workdir), **more})["job"]

    first = submit("first")
    # In the submit's own transaction: there as soon as the reply is, and only once.
    [row] = rows()
    assert row["outcome"] == "ok" and row["arguments"]["body"]["command"] == ["true", "first"]

    # Refused inside its write (an unknown dependency): nothing is changed, and the refusal is
    # recorded once, with its code, and no "ok" record rides along. It is queued before the
    # reply, so the next submit's record, committed with that submit, comes after it.
    with pytest.raises(ApiError) as refused:
        submit(after={"ids": ["job_nope"]})
    assert refused.value.code is ErrorCode.BAD_REQUEST
    last = submit("last")
    kept, refusal, later = rows()
    assert kept == row and later["outcome"] == "ok" and later["arguments"]["body"]["command"] == ["true", "last"]
    assert refusal["outcome"] == "bad_request" and "job_nope" in refusal["detail"]
    assert {j["id"] for j in jobs.client.get("/api/v1/jobs")["jobs"]} == {first["id"], last["id"]}


def test_a_hostile_body_on_a_write_route_is_recorded_by_its_size(jobs):
    """A body nested 60,000 deep on a route that takes none: the cancel is refused or done as
    ever, and the audit record names the body as not JSON instead of failing to be written."""
    job = jobs.client.post("/api/v1/jobs", {"command": ["sleep", "30"], "cwd": str(jobs.workdir)})["job"]
    deep = b"[" * 60_000
    status, _, _ = raw_post(jobs, f"/api/v1/jobs/{job['id']}/cancel", deep, {})
    assert status in (200, 400)
    [row] = [e for e in jobs.client.get("/api/v1/audit?limit=1000")["entries"]
             if e["action"] == "POST /api/v1/jobs/<job_id>/cancel"]
    assert row["arguments"]["body"] == f"[{len(deep)} bytes, not JSON]"
    assert "Traceback" not in jobs.daemon.log()
