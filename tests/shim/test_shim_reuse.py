"""A shim whose job has ended takes the launcher's next request: no fork, no exit per job.

What must hold across reuse: every job is still alone in its own process group inside the
shim's session; nothing of one job is left when the next starts; and a cancel (or a stray
SIGTERM) meant for an earlier job never reaches a later one.
"""

from __future__ import annotations

import json
import os
import signal

import attrs
import pytest
from shimkit import job_processes, session_and_group, wait_job_end, wait_until

from gpuplaned.launching.client import SpawnError
from gpuplaned.launching.job_files import read_exit
from gpuplaned.launching.processes import signal_shim
from gpuplaned.shim.job import _cancels_for, _next_spec, _Requests
from gpuplaned.shim.procs import children as _children
from gpuplaned.shim.procs import read_proc_stat


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
    from gpuplaned.launching.client import open_launcher

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


async def test_a_job_that_cannot_start_leaves_its_shim_for_the_next(launcher, jobs):
    _, spawned = await _after_a_finished_job(launcher, jobs)
    for bad in (jobs.request(["/no/such/program"]), jobs.request(["true"], cwd=jobs.root / "missing")):
        with pytest.raises(SpawnError):
            await launcher.spawn(bad)
        assert read_exit(bad.job_dir).reason == "spawn_failed"
    after = jobs.request(["sh", "-c", "echo fine"])
    again = await launcher.spawn(after)
    assert again.shim_pid == spawned.shim_pid  # the same shim, through both failures
    assert (await wait_job_end(launcher, again, after.job_dir)).exit_code == 0


async def test_a_request_exec_cannot_take_is_refused_before_any_shim(launcher, jobs):
    _, spawned = await _after_a_finished_job(launcher, jobs)
    for change in ({"env": {**jobs.base_env(), "BAD": "a\0b"}}, {"argv": ("echo", "a\0b")},
                   {"env": {**jobs.base_env(), "A=B": "1"}}):
        bad = attrs.evolve(jobs.request(["true"]), **change)
        with pytest.raises(SpawnError, match="bad request: (.* cannot contain NUL bytes|bad env variable name)"):
            await launcher.spawn(bad)
    after = jobs.request(["true"])
    assert (await launcher.spawn(after)).shim_pid == spawned.shim_pid


def test_a_shim_refuses_a_bad_request_by_reporting_it():
    # The launcher checks each request before a shim sees it; should a shim's own check
    # refuse one all the same, it answers, and lives on for the next.
    report_r, report_w = os.pipe()
    request = {"op": "spawn", "id": "x", "job_dir": "/x", "argv": ["true"], "cwd": "/",
               "env": {"A": "a\0b"}}
    try:
        assert _next_spec(json.dumps(request).encode(), report_w) is None
        assert json.loads(os.read(report_r, 4096)) == {
            "ok": False, "error": "bad request: env cannot contain NUL bytes"}
        assert _next_spec(b'{"cancel": "old"}', report_w) is None  # a late cancel: no answer
        assert _next_spec(b"[[[", report_w) is None
        spec = _next_spec(json.dumps(request | {"env": {"A": "b"}}).encode(), report_w)
        assert spec is not None and spec.env == {"A": "b"}
    finally:
        os.close(report_r)
        os.close(report_w)
