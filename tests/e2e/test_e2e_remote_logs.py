"""A remote agent's job logs through the server (issue 18, deliverable 4): one ``--role server``
daemon and one ``--role agent`` daemon dialing it through a TCP proxy (``tests/remote_cluster.py``).

- ``logs -f`` of a job on the agent prints its lines live, exact and in order, a burst of more
  lines than one stored tail holds included, and exits with the job's code.
- A follower connected across a cut link gets every line once, in order, then the job's end; so
  do followers that resume with ``Last-Event-ID`` while the link is down: one from within the
  stored tail gets the rest of it at once, one from before it nothing until the agent is back
  (the stored tail would skip lines).
- ``logs --full`` of a remote job prints the files byte for byte (sha256), read through the agent.
  Bytes that are not UTF-8 cross as they are: every line keeps its offset in the file.
- ``logs --full`` with the agent killed prints the stored tail, says on stderr that only those
  lines are shown because the node's agent is offline, and exits 1.

The cluster is the module's; the test that kills the agent runs last.
"""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
import threading
from contextlib import closing
from pathlib import Path

import pytest
from helpers import ctl_follower, wait_for
from remote_cluster import Agent, Cluster, running

pytestmark = pytest.mark.e2e

NODE = "r1"
TAIL_LINES = 2000  # [node] log_tail_lines' default: what the server's store keeps
LOST_WITHIN = 15.0  # 3 heartbeats of 0.3 s, then the scheduler's next tick, with a margin

# Gates the test opens (marker files in the job's cwd): print ``first`` lines, make "half" and
# wait for "go"; print ``second`` lines a few at a time (many tailer passes), make "written" and
# wait for "end"; print ``third`` lines at once, a line to stderr, and exit with ``code``.
JOB = textwrap.dedent("""
    import os, sys, time
    first, second, third, code = map(int, sys.argv[1:])

    def gate(mark, wait):
        open(mark, "w").close()
        while not os.path.exists(wait):
            time.sleep(0.02)

    for i in range(first):
        print(f"a {i} {'x' * (i % 30)}")
    sys.stdout.flush()
    gate("half", "go")
    for i in range(second):
        print(f"b {i} \\u00e9\\u4e2d")
        if i % 50 == 49:
            sys.stdout.flush()
            time.sleep(0.01)
    sys.stdout.flush()
    gate("written", "end")
    for i in range(third):
        print(f"c {i}")
    sys.stdout.flush()
    print("bye", file=sys.stderr, flush=True)
    sys.exit(code)
""")


def expected(first: int, second: int, third: int) -> list[str]:
    return ([f"a {i} {'x' * (i % 30)}" for i in range(first)] + [f"b {i} \u00e9\u4e2d" for i in range(second)]
            + [f"c {i}" for i in range(third)])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(tmp_path_factory.mktemp("remote-logs"), NODE) as cluster:
        yield cluster


@pytest.fixture
def agent(cluster) -> Agent:
    return cluster.agents[0]


def submit(cluster: Cluster, work: Path, first: int, second: int, third: int, code: int = 0) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    job = cluster.api.post("/api/v1/jobs", {
        "command": [sys.executable, "-c", JOB, str(first), str(second), str(third), str(code)],
        "cwd": str(work), "gpu": 0, "node": NODE})["job"]
    running = cluster.wait_job(job["id"], "RUNNING")
    wait_for((work / "half").exists, 30, what="the job's first part")
    return running


class Follower:
    """An SSE follower of a job's stdout through the server, on a thread: every line event's
    ``(id, line)``, then the end event's data."""

    def __init__(self, cluster: Cluster, job_id: str, last_event_id: str | None = None) -> None:
        self.path = f"/api/v1/jobs/{job_id}/logs/stream?stream=stdout"
        self.events = cluster.api.events(self.path, last_event_id=last_event_id)  # open once this returns
        self.lines: list[tuple[str | None, str]] = []
        self.end: dict | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            with closing(self.events) as events:
                for event in events:
                    if event.event == "stdout":
                        self.lines.append((event.id, event.data))
                    elif event.event == "end":
                        self.end = json.loads(event.data)
                        return
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.error = exc

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the follower did not end; it has {len(self.lines)} lines"
        assert self.error is None, self.error

    def texts(self) -> list[str]:
        return [line for _, line in self.lines]


def test_logs_f_follows_a_remote_job_live_through_the_server(cluster, agent, tmp_path):
    # 3000 lines printed at once in the third part: more than one pass's stored tail holds.
    job = submit(cluster, tmp_path / "work", 5, 400, 3000, code=3)
    follower = ctl_follower(["logs", "-f", job["id"]], cluster.server.env)
    try:
        for i in range(5):
            assert follower.stdout.readline() == f"a {i} {'x' * i}\n"
        # Live: the job is still waiting for the test.
        assert cluster.job(job["id"])["status"] == "RUNNING"
        (tmp_path / "work" / "go").touch()
        assert follower.stdout.readline() == "b 0 \u00e9\u4e2d\n"
        wait_for((tmp_path / "work" / "written").exists, 30, what="the job's second part")
        (tmp_path / "work" / "end").touch()
        # Not communicate(): it would skip what readline() has buffered already.
        out, err = follower.stdout.read(), follower.stderr.read()
        follower.wait(60)
    finally:
        follower.kill()
        follower.wait()
        follower.stdout.close()
        follower.stderr.close()
    assert follower.returncode == 3, err
    assert out.splitlines() == expected(5, 400, 3000)[6:]  # after the lines read above
    assert err == f"bye\n[job {job['id']} FAILED, exit code 3]\n"
    assert agent.log_file(job).read_bytes().decode().splitlines() == expected(5, 400, 3000)


def stored_last(cluster: Cluster, job_id: str) -> list[str]:
    return [line["line"] for line in cluster.api.get(f"/api/v1/jobs/{job_id}/logs?stream=stdout&tail=1")["lines"]]


def test_a_follower_across_a_cut_link_gets_every_line_once(cluster, agent, tmp_path):
    work = tmp_path / "work"
    job = submit(cluster, work, 3000, 4000, 1000)
    want = expected(3000, 4000, 1000)
    connected = Follower(cluster, job["id"])
    wait_for(lambda: len(connected.lines) >= 3000, 30, what="the first part through the server")
    wait_for(lambda: stored_last(cluster, job["id"]) == want[2999:3000], 30, what="the first part's stored tail")
    ids = [event_id for event_id, _ in connected.lines]

    agent.proxy.cut()
    try:
        (work / "go").touch()
        wait_for((work / "written").exists, 60, what="the second part, written while the link is down")
        cluster.wait_job(job["id"], "LOST", timeout=LOST_WITHIN)
        # Followers that come back while the link is down: one from within the stored tail (the
        # last 2000 lines) gets the rest of it at once; one from before it must wait for the agent,
        # since sending the stored tail would skip the lines in between.
        within = Follower(cluster, job["id"], last_event_id=ids[2499])
        before = Follower(cluster, job["id"], last_event_id=ids[499])
        wait_for(lambda: len(within.lines) >= 500, 15, what="the stored tail's lines")
        assert within.texts() == want[2500:3000]
        assert before.lines == []
        assert len(connected.lines) == 3000  # nothing of the second part has reached the server
    finally:
        agent.proxy.restore()
    cluster.wait_job(job["id"], "RUNNING", timeout=30)  # reconciled
    (work / "end").touch()
    done = cluster.wait_job(job["id"], "SUCCEEDED", "FAILED", timeout=60)
    assert done["status"] == "SUCCEEDED", done

    for follower, first in ((connected, 0), (within, 2500), (before, 500)):
        follower.join(60)
        assert follower.texts() == want[first:]
        assert follower.end == {"status": "SUCCEEDED", "attempt": 1, "exit_code": 0, "failure_reason": None}
        offsets = [int(event_id) for event_id, _ in follower.lines]
        assert offsets == sorted(set(offsets))  # each line once, in file order
    assert agent.log_file(job).read_bytes().decode().splitlines() == want


def finished_job(cluster: Cluster, work: Path, first: int, second: int, third: int) -> dict:
    job = submit(cluster, work, first, second, third)
    (work / "go").touch()
    wait_for((work / "written").exists, 60, what="the job's second part")
    (work / "end").touch()
    done = cluster.wait_job(job["id"], "SUCCEEDED", "FAILED", timeout=60)
    assert done["status"] == "SUCCEEDED", done
    return done


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_logs_full_of_a_remote_job_is_its_file(cluster, agent, tmp_path):
    job = finished_job(cluster, tmp_path / "work", 30_000, 2_000, 5)  # over a --full page (20,000 lines)
    path = agent.log_file(job)
    result = cluster.server.run_ctl("logs", job["id"], "--full", "--stream", "stdout", timeout=60)
    assert result.returncode == 0, result.stderr
    assert sha256(result.stdout.encode()) == sha256(path.read_bytes())
    assert len(result.stdout.splitlines()) == 32_005 > TAIL_LINES

    both = cluster.server.run_ctl("logs", job["id"], "--full", timeout=60)
    assert (both.returncode, both.stdout, both.stderr) == (0, result.stdout, "bye\n")
    pages = [json.loads(line) for line in
             cluster.server.run_ctl("logs", job["id"], "--full", "--json", "--stream", "stdout").stdout.splitlines()]
    assert [len(page["lines"]) for page in pages] == [20_000, 12_005]
    assert [line["line"] for page in pages for line in page["lines"]] == result.stdout.splitlines()


BAD_BYTES_JOB = textwrap.dedent("""
    import os
    line = b"\\xff\\xfe not UTF-8 \\xc3 " + b"y" * 100 + b"\\n"
    with os.fdopen(1, "wb") as out:
        for i in range(12_000):  # 1.4 MB: the reads of 1 MiB through the agent end inside a line
            out.write(b"%d " % i + line)
        out.write("end \\u00e9\\n".encode())
""")


def test_logs_full_of_bytes_that_are_not_utf8_keeps_every_offset(cluster, agent, tmp_path):
    """The agent sends the file's bytes as they are: a line's offset is where it is in the file,
    its text what a local read gives (bad bytes replaced), and no line is lost or repeated."""
    work = tmp_path / "work"
    work.mkdir()
    job = cluster.api.post("/api/v1/jobs", {"command": [sys.executable, "-c", BAD_BYTES_JOB], "cwd": str(work),
                                            "gpu": 0, "node": NODE})["job"]
    done = cluster.wait_job(job["id"], "SUCCEEDED", "FAILED", timeout=60)
    assert done["status"] == "SUCCEEDED", done
    raw = agent.log_file(done).read_bytes()
    wanted, offset = [], 0
    for piece in raw.splitlines(keepends=True):
        wanted.append((offset, piece.rstrip(b"\n").decode("utf-8", "replace")))
        offset += len(piece)
    pages = [json.loads(line) for line in
             cluster.server.run_ctl("logs", done["id"], "--full", "--json", "--stream", "stdout",
                                    timeout=60).stdout.splitlines()]
    got = [(line["offset"], line["line"]) for page in pages for line in page["lines"]]
    assert len(got) == 12_001 and got == wanted


def test_logs_full_with_the_agent_offline_prints_the_stored_tail_and_exits_1(cluster, agent, tmp_path):
    job = finished_job(cluster, tmp_path / "work", 3_000, 500, 5)
    lines = expected(3_000, 500, 5)
    # The stored tail has the file's last line: the agent's last log record is in.
    wait_for(lambda: [line["line"] for line in cluster.api.get(
        f"/api/v1/jobs/{job['id']}/logs?stream=stdout&tail=1")["lines"]] == lines[-1:], 30, what="the stored tail")

    agent.daemon.kill()
    result = wait_for(lambda: (r := cluster.server.run_ctl("logs", job["id"], "--full", "--stream", "stdout"))
                      .returncode != 0 and r, 15, interval=0.1, what="the server to see the agent gone")
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines() == lines[-TAIL_LINES:]
    assert result.stderr == (f"[only the last {TAIL_LINES} stored lines of stdout are shown: node {NODE}'s agent is "
                             "offline, and the whole file is on that node; try again when it is back]\n")

    both = cluster.server.run_ctl("logs", job["id"], "--full", "--json")
    assert both.returncode == 1
    out = [json.loads(line) for line in both.stdout.splitlines()]
    assert [line["line"] for line in out[0]["lines"]] == lines[-TAIL_LINES:]
    assert out[1]["error"]["code"] == "unavailable" and out[1]["error"]["details"]["stored_lines"] == TAIL_LINES
    assert out[1]["error"]["details"]["node"] == NODE
    assert [line["line"] for line in out[2]["lines"]] == ["bye"]
    assert out[3]["error"]["details"]["stream"] == "stderr"
