"""Job dependencies outlive a kill -9 of the daemon (issue 31 item 1): a chain held behind a running
job is still held after the restart, and goes on once the re-adopted job ends."""

from __future__ import annotations

import signal

import pytest
from helpers import Jobs

pytestmark = pytest.mark.e2e


def test_a_held_chain_survives_a_kill_9_and_runs_after_the_readopted_job(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:2")
    first = jobs.sh("while [ ! -e go ]; do sleep 0.05; done; echo first >> order")["id"]
    then = jobs.sh("echo then >> order", after={"ids": [first]})["id"]
    last = jobs.sh("echo last >> order", after={"ids": [then], "when": "ended"})["id"]
    jobs.wait(first, "RUNNING")
    jobs.daemon.signal(signal.SIGKILL)
    jobs.daemon.proc.wait(10)

    jobs.restart(daemon_factory, "--gpus=fake:2")
    jobs.wait(first, "RUNNING")  # re-adopted
    held = jobs.get(then)
    assert (held["status"], held["queue_reason"]) == ("QUEUED", f"after {first} (RUNNING)")
    assert jobs.get(last)["queue_reason"] == f"after the end of {then} (QUEUED)"
    jobs.file("go").touch()
    assert [jobs.wait(j)["status"] for j in (first, then, last)] == ["SUCCEEDED"] * 3
    assert jobs.file("order").read_text().split() == ["first", "then", "last"]
