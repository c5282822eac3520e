"""Jobs outlive the launcher (and so the daemon): they keep writing, and their end is recorded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest
import trio
from shimkit import WAIT_S, wait_until
from shimkit import job_processes as shim_job_processes

from gpuplaned.launching.client import LauncherGone, open_launcher
from gpuplaned.launching.job_files import read_exit, read_runtime
from gpuplaned.launching.processes import is_same_process, job_processes, wait_process_exit
from gpuplaned.shim.procs import read_proc_stat

# Writes a tick every 10 ms until a file named "stop" appears in its cwd, then exits 7.
TICKER = ["sh", "-c", "i=0; while [ ! -e stop ]; do i=$((i+1)); echo tick $i; sleep 0.01; done; exit 7"]

WAITER = textwrap.dedent("""
    import sys, trio
    from gpuplaned.launching.processes import wait_process_exit
    print("waiting", flush=True)
    trio.run(wait_process_exit, int(sys.argv[1]), int(sys.argv[2]))
    print("done", flush=True)
""")


async def _receive_line(stream) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await stream.receive_some()
        assert chunk, f"EOF after {data!r}"
        data += chunk
    return data


async def _assert_output_grows(path):
    size = path.stat().st_size
    await wait_until(lambda: path.stat().st_size > size + 20, "the job's stdout to keep growing")


@pytest.mark.parametrize("how", ["stdin closed", "SIGKILL"])
async def test_job_survives_the_launcher(jobs, how):
    req = jobs.request(TICKER, name="ticker", cwd=jobs.root / "ticker")
    req.job_dir.mkdir()
    stdout = req.job_dir / "stdout.log"
    async with open_launcher() as launcher:
        spawned = await launcher.spawn(req)
        await wait_until(lambda: stdout.stat().st_size > 0, "a first tick")
        if how == "SIGKILL":
            os.kill(launcher.pid, signal.SIGKILL)
            with pytest.raises(LauncherGone):
                await launcher.ping()
    # Leaving the context closed the launcher's stdin and reaped it.
    assert launcher.gone
    assert read_proc_stat(launcher.pid) is None
    assert is_same_process(spawned.shim_pid, spawned.shim_start_time)
    assert is_same_process(spawned.pid, spawned.start_time)
    await _assert_output_grows(stdout)
    assert read_exit(req.job_dir) is None

    if how == "SIGKILL":
        (req.job_dir / "stop").touch()
        with trio.fail_after(WAIT_S):
            await wait_process_exit(spawned.shim_pid)
    else:
        # A fresh trio run in another process (as a restarted daemon would be) waits for
        # the shim, which is not its child.
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-c", WAITER, str(spawned.shim_pid), str(spawned.shim_start_time)],
            stdout=subprocess.PIPE,
        )
        try:
            with trio.fail_after(WAIT_S):
                assert await _receive_line(proc.stdout) == b"waiting\n"
                assert proc.poll() is None
                (req.job_dir / "stop").touch()
                assert await proc.wait() == 0
                assert await _receive_line(proc.stdout) == b"done\n"
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await proc.stdout.aclose()

    assert not is_same_process(spawned.shim_pid, spawned.shim_start_time)
    record = read_exit(req.job_dir)
    assert record is not None
    assert (record.exit_code, record.reason) == (7, "exited")
    assert shim_job_processes(jobs.marker) == []
    last = stdout.read_text().splitlines()[-1]
    assert last.startswith("tick ") and int(last.split()[1]) > 3


async def test_the_job_of_a_killed_shim_is_the_launchers_to_reap(launcher, jobs):
    # A shim killed under its job: the job runs on, re-parented to the launcher (a subreaper)
    # rather than to init, and the launcher keeps its exit status for the daemon to ask for.
    script = ("import os, subprocess, sys, time\nsubprocess.Popen(['sleep', '1000'])\n"
              "while not os.path.exists('stop'):\n    time.sleep(0.01)\nsys.exit(7)\n")
    req = jobs.request([sys.executable, "-c", script], cwd=jobs.root)
    spawned = await launcher.spawn(req)
    runtime = read_runtime(req.job_dir)
    os.kill(spawned.shim_pid, signal.SIGKILL)
    with trio.fail_after(WAIT_S):
        assert await launcher.wait_exit(spawned.id) is None  # the shim said nothing
    assert read_exit(req.job_dir) is None
    await wait_until(lambda: psutil.Process(spawned.pid).ppid() == launcher.pid, "the job to come to the launcher")
    assert is_same_process(spawned.pid, spawned.start_time)
    await wait_until(lambda: len(shim_job_processes(jobs.marker)) == 2, "the job's child to start")
    assert sorted(job_processes(runtime)) == sorted(  # the job and its child
        (pid, read_proc_stat(pid)[1]) for pid in shim_job_processes(jobs.marker))
    assert await launcher.orphan_exit(spawned.id) is None  # still running: nothing to tell

    (jobs.root / "stop").touch()
    await wait_until(lambda: not is_same_process(spawned.pid, spawned.start_time), "the job's main process to end")
    record = await launcher.orphan_exit(spawned.id)
    assert (record.reason, record.exit_code, record.pid) == ("exited", 7, spawned.pid)
    assert await launcher.orphan_exit(spawned.id) is None  # told once
    assert job_processes(runtime) != []  # what it left behind is the daemon's to stop (see the runner)
