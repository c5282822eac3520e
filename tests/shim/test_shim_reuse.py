"""A shim whose job has ended takes the launcher's next request: no fork, no exit per job.

What must hold across reuse: every job is still alone in its own process group inside the
shim's session; nothing of one job is left when the next starts; and a cancel (or a stray
SIGTERM) meant for an earlier job never reaches a later one.
"""

from __future__ import annotations

import json
import os
import signal

from shimkit import job_processes, session_and_group, wait_job_end, wait_until

from gpuplaned.launcher import signal_shim
from gpuplaned.shim import _cancels_for, _children, _Requests, read_proc_stat


async def test_sequential_jobs_share_one_shim_and_nothing_else(launcher, jobs):
    shims, groups = set(), set()
    for i in range(4):
        req = jobs.request(["sh", "-c", f"sleep 1000 & echo job {i}"])
        spawned = await launcher.spawn(req)
        record = await wait_job_end(launcher, spawned, req.job_dir)
        assert (record.reason, record.exit_code) == ("exited", 0)
        assert (req.job_dir / "stdout.log").read_text() == f"job {i}\n"
        assert job_processes(jobs.marker) == []  # its background sleep went with it
        shims.add(spawned.shim_pid)
        groups.add(spawned.pgid)
    assert len(shims) == 1 and len(groups) == 4
    shim = shims.pop()
    assert session_and_group(shim) == (shim, shim)
    await wait_until(lambda: _children(shim) == [], "the shim to have no children between jobs")


async def test_a_sigterm_left_from_an_earlier_job_spares_the_next(launcher, jobs):
    _, spawned = await _after_a_finished_job(launcher, jobs)
    # Stray SIGTERMs reach the idle shim (a late cancel, a person): they stay pending.
    os.kill(spawned.shim_pid, signal.SIGTERM)
    os.kill(spawned.shim_pid, signal.SIGTERM)
    await launcher.ping()

    second = jobs.request(["sh", "-c", "sleep 0.3; echo done"])
    again = await launcher.spawn(second)
    assert again.shim_pid == spawned.shim_pid
    record = await wait_job_end(launcher, again, second.job_dir)
    assert (record.reason, record.exit_code) == ("exited", 0)
    assert (second.job_dir / "stdout.log").read_text() == "done\n"


async def _after_a_finished_job(launcher, jobs):
    """A job run to its end: its request and ``Spawned``; its shim is idle now."""
    first = jobs.request(["true"])
    spawned = await launcher.spawn(first)
    await wait_job_end(launcher, spawned, first.job_dir)
    return first, spawned


async def test_a_cancel_for_a_finished_job_does_not_reach_the_next(launcher, jobs):
    first, spawned = await _after_a_finished_job(launcher, jobs)
    second = jobs.request(["sh", "-c", "sleep 0.3; echo done"])
    again = await launcher.spawn(second)
    assert again.shim_pid == spawned.shim_pid
    assert not await launcher.cancel(first.id)
    record = await wait_job_end(launcher, again, second.job_dir)
    assert (record.reason, record.exit_code) == ("exited", 0)


async def test_a_plain_sigterm_still_cancels_what_a_reused_shim_runs(launcher, jobs):
    _, spawned = await _after_a_finished_job(launcher, jobs)
    second = jobs.request(["sh", "-c", "echo ready; exec sleep 1000"])
    again = await launcher.spawn(second)
    assert again.shim_pid == spawned.shim_pid
    await wait_until(lambda: (second.job_dir / "stdout.log").read_text() == "ready\n", "ready")
    assert signal_shim(again.shim_pid, again.shim_start_time, signal.SIGTERM)
    record = await wait_job_end(launcher, again, second.job_dir)
    assert (record.reason, record.signal_name) == ("cancelled", "SIGTERM")
    assert job_processes(jobs.marker) == []


async def test_idle_shims_go_when_the_launcher_closes(jobs):
    from gpuplaned.launcher import open_launcher

    async with open_launcher() as launcher:
        req = jobs.request(["true"])
        spawned = await launcher.spawn(req)
        await wait_job_end(launcher, spawned, req.job_dir)
    await wait_until(lambda: read_proc_stat(spawned.shim_pid) is None, "the reused shim to exit")


def _pipe_with(*lines: dict) -> _Requests:
    read, write = os.pipe()
    for line in lines:
        os.write(write, json.dumps(line).encode() + b"\n")
    os.close(write)
    return _Requests(read)


def test_which_sigterm_is_a_cancel_of_the_running_job():
    assert _cancels_for(_pipe_with(), "b")  # no word from the launcher: a person's SIGTERM
    assert _cancels_for(_pipe_with({"cancel": "b"}), "b")
    assert _cancels_for(_pipe_with({"cancel": "a"}, {"cancel": "b"}), "b")
    assert not _cancels_for(_pipe_with({"cancel": "a"}), "b")  # meant for the job before
