"""Cancel and timeout: nothing of a job survives, however hard it tries."""

from __future__ import annotations

import signal
import sys
import textwrap

import pytest
import trio
from shimkit import job_processes, wait_job_end, wait_until

from gpuplaned.domain.failures import judge_exit
from gpuplaned.launching.processes import signal_shim

# Main process, a worker in its group, a worker that escapes with setsid() (and has a
# child of its own there), and an orphan re-parented to the shim: all ignore SIGTERM.
STUBBORN_TREE = textwrap.dedent("""
    import os, signal, sys
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def forever():
        while True:
            signal.pause()

    if os.fork() == 0:                      # dataloader-style worker, same group
        forever()
    if os.fork() == 0:                      # escapes the group and the session
        os.setsid()
        if os.fork() == 0:
            forever()
        forever()
    if os.fork() == 0:                      # parent leaves: re-parented to the shim
        if os.fork() == 0:
            forever()
        os._exit(0)
    print("ready", flush=True)
    forever()
""")


async def test_cancel_kills_every_descendant_after_grace(launcher, jobs):
    grace = 0.4
    req = jobs.request([sys.executable, "-c", STUBBORN_TREE], grace_s=grace)
    spawned = await launcher.spawn(req)
    stdout = req.job_dir / "stdout.log"
    await wait_until(lambda: stdout.read_text() == "ready\n", "the tree to be ready")
    # main, worker, escaped worker and its child, orphan (its parent may still be exiting)
    await wait_until(lambda: len(job_processes(jobs.marker)) == 5, "five job processes")

    started = trio.current_time()
    assert signal_shim(spawned.shim_pid, spawned.shim_start_time, signal.SIGTERM)
    record = await wait_job_end(launcher, spawned, req.job_dir, timeout=grace + 1)
    assert trio.current_time() - started >= grace  # they ignore SIGTERM: the grace is used up
    assert job_processes(jobs.marker) == []
    assert (record.reason, record.signal_name, record.exit_code) == ("cancelled", "SIGKILL", None)
    assert (judge_exit(record).report, judge_exit(record).failure) == ("CANCELLED", None)


async def test_cancel_shell_job_with_term_ignoring_children(launcher, jobs):
    grace = 0.3
    req = jobs.request(
        ["sh", "-c", 'trap "" TERM; sleep 1000 & setsid sleep 1000 & echo ready; wait'],
        grace_s=grace,
    )
    spawned = await launcher.spawn(req)
    await wait_until(lambda: len(job_processes(jobs.marker)) == 3, "sh and two sleeps")
    await wait_until(lambda: (req.job_dir / "stdout.log").read_text() == "ready\n", "ready")
    assert signal_shim(spawned.shim_pid, spawned.shim_start_time)
    record = await wait_job_end(launcher, spawned, req.job_dir, timeout=grace + 1)
    assert job_processes(jobs.marker) == []
    assert (record.reason, record.signal_name) == ("cancelled", "SIGKILL")


async def test_leftovers_are_killed_as_soon_as_the_main_process_exits(launcher, jobs):
    # The main process obeys SIGTERM; its child does not. No need to wait out the grace.
    req = jobs.request(
        ["sh", "-c", '(trap "" TERM; exec sleep 1000) & exec sleep 1000'], grace_s=60,
    )
    spawned = await launcher.spawn(req)
    await wait_until(lambda: len(job_processes(jobs.marker)) == 2, "two sleeps")
    assert signal_shim(spawned.shim_pid, spawned.shim_start_time)
    record = await wait_job_end(launcher, spawned, req.job_dir, timeout=5)
    assert job_processes(jobs.marker) == []
    assert (record.reason, record.signal_name) == ("cancelled", "SIGTERM")


async def test_background_processes_do_not_outlive_a_job_that_exits(launcher, jobs):
    req = jobs.request(["sh", "-c", "setsid sleep 1000 & sleep 1000 & echo started"])
    spawned = await launcher.spawn(req)
    record = await wait_job_end(launcher, spawned, req.job_dir)
    assert (record.reason, record.exit_code) == ("exited", 0)
    assert job_processes(jobs.marker) == []


async def test_second_sigterm_kills_without_waiting_for_the_grace(launcher, jobs):
    req = jobs.request(
        ["sh", "-c", 'trap "echo got-term" TERM; echo ready; while :; do sleep 0.05; done'],
        grace_s=60,
    )
    spawned = await launcher.spawn(req)
    stdout = req.job_dir / "stdout.log"
    await wait_until(lambda: "ready" in stdout.read_text(), "ready")
    assert signal_shim(spawned.shim_pid, spawned.shim_start_time)
    await wait_until(lambda: "got-term" in stdout.read_text(), "the job to see SIGTERM")
    assert signal_shim(spawned.shim_pid, spawned.shim_start_time)
    record = await wait_job_end(launcher, spawned, req.job_dir, timeout=5)
    assert (record.reason, record.signal_name) == ("cancelled", "SIGKILL")
    assert job_processes(jobs.marker) == []


@pytest.mark.parametrize(("script", "killed_by"), [
    ("exec sleep 1000", "SIGTERM"),
    ('trap "" TERM; sleep 1000', "SIGKILL"),  # sleep inherits the ignored SIGTERM
])
async def test_timeout(launcher, jobs, script, killed_by):
    req = jobs.request(["sh", "-c", script], timeout_s=0.2, grace_s=0.2)
    started = trio.current_time()
    spawned = await launcher.spawn(req)
    record = await wait_job_end(launcher, spawned, req.job_dir, timeout=5)
    assert trio.current_time() - started >= 0.2
    assert (record.reason, record.signal_name, record.exit_code) == ("timeout", killed_by, None)
    assert judge_exit(record).failure == "TIMEOUT"
    assert job_processes(jobs.marker) == []


async def test_cancel_through_the_launcher(launcher, jobs):
    req = jobs.request(["sh", "-c", 'trap "" TERM; echo ready; sleep 1000'], grace_s=0.2)
    spawned = await launcher.spawn(req)
    await wait_until(lambda: (req.job_dir / "stdout.log").read_text() == "ready\n", "ready")
    assert await launcher.cancel(spawned.id)
    record = await wait_job_end(launcher, spawned, req.job_dir, timeout=5)
    assert (record.reason, record.signal_name) == ("cancelled", "SIGKILL")
    assert job_processes(jobs.marker) == []


async def test_cancel_of_a_finished_job_is_refused(launcher, jobs):
    req = jobs.request(["true"])
    spawned = await launcher.spawn(req)
    await wait_job_end(launcher, spawned, req.job_dir)
    assert not await launcher.cancel(spawned.id)
    assert not await launcher.cancel("never-started")
