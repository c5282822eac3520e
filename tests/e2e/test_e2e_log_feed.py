"""Live log feeds: many followers of a fast job each get every line once, in order, whether
they ride the logs actor's feed, lag behind it, resume, or read the files without it."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import Jobs, wait_for

pytestmark = pytest.mark.e2e

LINES = 20_000

# Waits for the go-file, prints LINES numbered lines in bursts (every 1000th also on
# stderr), then an unfinished last line on each stream, and exits.
SCRIPT = f"""
import os, sys, time
while not os.path.exists("go"):
    time.sleep(0.01)
for start in range(1, {LINES} + 1, 400):
    sys.stdout.write("".join(f"line {{i}}\\n" for i in range(start, start + 400)))
    sys.stdout.flush()
    if start % 1000 < 400:
        sys.stderr.write(f"err {{start}}\\n")
        sys.stderr.flush()
    time.sleep(0.01)
sys.stdout.write("no newline")
sys.stderr.write("err end")
"""

EXPECTED_OUT = [f"line {i}" for i in range(1, LINES + 1)] + ["no newline"]
EXPECTED_ERR = [f"err {start}" for start in range(1, LINES + 1, 400) if start % 1000 < 400] + ["err end"]


class Follower(threading.Thread):
    """Follows a job over the Unix socket in a thread; ``stop_after`` lines, then resumes
    with the last id once ``resume`` is set; ``pause`` sleeps every 500 events (a slow reader)."""

    def __init__(self, daemon, job_id: str, stream: str, *, stop_after: int | None = None,
                 pause: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.daemon_proc = daemon
        self.path = f"/api/v1/jobs/{job_id}/logs/stream?stream={stream}"
        self.stop_after = stop_after
        self.pause = pause
        self.events: list = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            last_id = None
            if self.stop_after is not None:
                last_id = self._follow(None, self.stop_after)
                time.sleep(0.3)
            self._follow(last_id, None)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _follow(self, last_id: str | None, stop_after: int | None) -> str | None:
        stream = self.daemon_proc.client().events(self.path, last_event_id=last_id, read_timeout=60)
        try:
            for n, event in enumerate(stream, 1):
                self.events.append(event)
                if event.event == "end":
                    return None
                if stop_after is not None and n >= stop_after:
                    return event.id
                if self.pause and n % 500 == 0:
                    time.sleep(self.pause)
        finally:
            stream.close()
        raise AssertionError("the stream ended without an end event")

    def lines(self, name: str) -> list[str]:
        return [e.data for e in self.events if e.event == name]


@pytest.fixture
def jobs(daemon_factory, tmp_path):
    return Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")


def run_job(jobs: Jobs, followers: list[dict], late: list[dict] = ()) -> list[Follower]:
    """Submit SCRIPT, start ``followers`` before it prints, ``late`` ones while it prints."""
    job = jobs.submit(["python3", "-u", "-c", SCRIPT], gpu=0)
    jobs.wait(job["id"], "RUNNING")
    started = [Follower(jobs.daemon, job["id"], **kw) for kw in followers]
    for f in started:
        f.start()
    time.sleep(0.5)
    jobs.file("go").touch()
    log = jobs.daemon.home  # the job's stdout grows under the daemon's home; wait for some of it
    wait_for(lambda: any(p.stat().st_size > 40_000 for p in log.rglob("stdout.log")), timeout=20,
             what="the job to be printing")
    for kw in late:
        f = Follower(jobs.daemon, job["id"], **kw)
        f.start()
        started.append(f)
    for f in started:
        f.join(timeout=60)
        assert not f.is_alive(), "a follower did not finish"
        assert f.error is None, f.error
    assert jobs.wait(job["id"])["status"] == "SUCCEEDED"
    return started


def check(f: Follower) -> None:
    names = f.path.rsplit("=", 1)[1]
    assert f.events[-1].event == "end"
    if names in ("stdout", "all"):
        assert f.lines("stdout") == EXPECTED_OUT
    if names in ("stderr", "all"):
        assert f.lines("stderr") == EXPECTED_ERR
    if names == "stdout":
        ids = [int(e.id) for e in f.events if e.event == "stdout"]
        assert ids == sorted(set(ids))


def test_many_followers_each_get_every_line_once_in_order(jobs):
    followers = run_job(
        jobs,
        [{"stream": "stdout"}, {"stream": "stdout"}, {"stream": "stdout"}, {"stream": "all"},
         {"stream": "stderr"}, {"stream": "stdout", "stop_after": 5_000}, {"stream": "all", "stop_after": 7_000}],
        late=[{"stream": "stdout"}, {"stream": "all"}],
    )
    for f in followers:
        check(f)


def test_followers_that_lag_behind_the_feed_still_get_every_line(daemon_factory, tmp_path):
    jobs = Jobs(daemon_factory("--gpus=fake:1", env={"GPUPLANE_LOG_FEED_MAXLEN": "1"}).start(), tmp_path / "work")
    jobs.daemon.wait_ready()
    jobs.wait_node()
    followers = run_job(jobs, [{"stream": "stdout", "pause": 0.05}, {"stream": "all", "pause": 0.05},
                               {"stream": "stdout"}, {"stream": "stdout", "stop_after": 3_000, "pause": 0.02}])
    for f in followers:
        check(f)


def test_following_works_with_the_logs_actor_stopped(jobs):
    assert jobs.client.post("/api/v1/actors/logs/stop")["actor"]["state"] == "STOPPED"
    followers = run_job(jobs, [{"stream": "stdout"}, {"stream": "all"}, {"stream": "stdout", "stop_after": 4_000}],
                        late=[{"stream": "stdout"}])
    for f in followers:
        check(f)
