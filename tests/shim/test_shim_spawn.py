"""Starting jobs through the launcher: files, environment, failures, concurrency."""

from __future__ import annotations

import json
import os
import signal
import stat

import attrs
import pytest
import trio
import trio.testing
from shimkit import job_processes, session_and_group, wait_job_end, wait_until

from gpuplaned.domain.failures import judge_exit
from gpuplaned.launching.client import LauncherGone, SpawnError
from gpuplaned.launching.job_files import read_exit, read_runtime
from gpuplaned.launching.processes import signal_shim
from gpuplaned.shim.procs import read_proc_stat


async def test_ping(launcher):
    await launcher.ping()


async def test_spawn_records_runtime_output_and_exit(launcher, jobs, tmp_path):
    work = tmp_path / "work dir"
    work.mkdir()
    req = jobs.request(
        ["sh", "-c", 'echo out; echo err >&2; echo "$FOO"; pwd'],
        env={"FOO": "bar baz"}, cwd=work, timeout_s=30.0, grace_s=2.5,
    )
    spawned = await launcher.spawn(req)
    assert spawned.id == req.id
    assert spawned.pgid == spawned.pid
    assert spawned.shim_pid not in (spawned.pid, os.getpid(), launcher.pid)

    runtime = read_runtime(req.job_dir)  # written before the reply
    assert runtime is not None
    assert (runtime.id, runtime.shim_pid, runtime.pid, runtime.pgid) == (
        req.id, spawned.shim_pid, spawned.pid, spawned.pid)
    assert (runtime.start_time, runtime.shim_start_time) == (spawned.start_time, spawned.shim_start_time)
    assert isinstance(runtime.start_time, int) and isinstance(runtime.shim_start_time, int)
    assert runtime.argv == tuple(req.argv)
    assert runtime.cwd == str(work)
    assert runtime.env_keys == tuple(sorted(req.env))
    assert (runtime.timeout_s, runtime.grace_s) == (30.0, 2.5)
    assert runtime.started_at > 1.6e9

    record = await wait_job_end(launcher, spawned, req.job_dir)
    assert (record.exit_code, record.signal, record.signal_name, record.reason) == (0, None, None, "exited")
    assert record.pid == spawned.pid
    assert record.ended_at >= runtime.started_at
    assert judge_exit(record).report == "SUCCEEDED"
    assert (req.job_dir / "stdout.log").read_text() == f"out\nbar baz\n{work}\n"
    assert (req.job_dir / "stderr.log").read_text() == "err\n"
    for name in ("stdout.log", "stderr.log", "runtime.json", "exit.json"):
        assert stat.S_IMODE((req.job_dir / name).stat().st_mode) == 0o600  # private whatever the umask
    assert not list(req.job_dir.glob(".*.tmp"))
    assert not (req.job_dir / "shim.log").exists()


async def test_reused_job_dir_appends_logs_and_drops_old_records(launcher, jobs):
    first = jobs.request(["echo", "first"], name="again")
    await wait_job_end(launcher, await launcher.spawn(first), first.job_dir)
    assert read_exit(first.job_dir).exit_code == 0
    second = jobs.request(["sh", "-c", "echo second; exec sleep 1000"], name="again")
    spawned = await launcher.spawn(second)
    assert read_exit(second.job_dir) is None  # the first run's record is gone
    assert read_runtime(second.job_dir).pid == spawned.pid
    await wait_until(lambda: (second.job_dir / "stdout.log").read_text() == "first\nsecond\n", "both lines")
    assert signal_shim(spawned.shim_pid, spawned.shim_start_time)
    assert (await wait_job_end(launcher, spawned, second.job_dir)).reason == "cancelled"


async def test_argv0_is_looked_up_on_the_jobs_path(launcher, jobs, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "gp-test-tool"
    tool.write_text('#!/bin/sh\necho "tool $*"\n')
    tool.chmod(0o755)
    req = jobs.request(["gp-test-tool", "a", "b c"], env={"PATH": f"{bindir}:/usr/bin:/bin"})
    record = await wait_job_end(launcher, await launcher.spawn(req), req.job_dir)
    assert record.exit_code == 0
    assert (req.job_dir / "stdout.log").read_text() == "tool a b c\n"


async def test_nonzero_exit(launcher, jobs):
    req = jobs.request(["sh", "-c", "exit 3"])
    record = await wait_job_end(launcher, await launcher.spawn(req), req.job_dir)
    assert (record.exit_code, record.signal, record.reason) == (3, None, "exited")
    assert judge_exit(record).failure == "EXIT_CODE"


async def test_death_by_signal(launcher, jobs):
    req = jobs.request(["sh", "-c", "ulimit -c 0; kill -SEGV $$"])
    record = await wait_job_end(launcher, await launcher.spawn(req), req.job_dir)
    assert (record.exit_code, record.signal, record.signal_name, record.reason) == (
        None, signal.SIGSEGV, "SIGSEGV", "signaled")
    assert judge_exit(record).failure == "SIGNAL(SIGSEGV)"


@pytest.mark.parametrize("case", ["missing command", "missing cwd", "not executable", "directory"])
async def test_spawn_failure_replies_and_records(launcher, jobs, tmp_path, case):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho never\n")
    script.chmod(0o644)
    argv, cwd, code, message = {
        "missing command": (["gp-no-such-command"], None, 127,
                            "argv[0] 'gp-no-such-command' not found: [Errno 2]"),
        "missing cwd": (["true"], tmp_path / "gone", 127, f"cwd '{tmp_path / 'gone'}' not found"),
        "not executable": ([str(script)], None, 126, f"argv[0] '{script}' is not executable"),
        "directory": ([str(tmp_path)], None, 126, f"argv[0] '{tmp_path}'"),
    }[case]
    req = jobs.request(argv, cwd=cwd)
    with pytest.raises(SpawnError) as info:
        await launcher.spawn(req)
    assert message in info.value.message
    assert info.value.job_id == req.id
    record = read_exit(req.job_dir)
    assert record is not None
    assert (record.reason, record.exit_code, record.signal, record.pid) == ("spawn_failed", code, None, None)
    assert record.error == info.value.message
    assert read_runtime(req.job_dir) is None
    assert judge_exit(record).failure == "SPAWN_FAILED"
    await launcher.ping()  # still serving


@pytest.mark.parametrize(("change", "complaint"), [
    ({"argv": ()}, "bad request: argv must be a non-empty list"),
    ({"cwd": "relative/dir"}, "bad request: cwd must be an absolute path"),
    ({"grace_s": -1}, "bad request: grace_s must be a non-negative number"),
    ({"env": {"A": 1}}, "bad request: env must map strings to strings"),
])
async def test_bad_request_is_refused_and_recorded(launcher, jobs, change, complaint):
    bad = attrs.evolve(jobs.request(["true"]), **change)
    with pytest.raises(SpawnError, match=complaint):
        await launcher.spawn(bad)
    assert read_exit(bad.job_dir).reason == "spawn_failed"
    await launcher.ping()


def _status_masks(pid: int) -> dict[str, int]:
    masks = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("SigBlk", "SigIgn"):
                masks[key] = int(value, 16)
    return masks


def _bit(signum: int) -> int:
    return 1 << (signum - 1)


async def test_job_process_is_isolated_and_clean(launcher, jobs):
    req = jobs.request(["sleep", "1000"], grace_s=5)
    spawned = await launcher.spawn(req)
    pid, shim = spawned.pid, spawned.shim_pid

    # The job: only stdin/stdout/stderr, pointing where they should; nothing blocked or
    # ignored; its own group inside the shim's session.
    # Right after the spawn the program's dynamic loader may still hold the libraries it maps
    # (a transient fd 3 on libc.so.6, seen under load): a descriptor the shim leaked stays.
    expected = {0: "/dev/null", 1: str(req.job_dir / "stdout.log"), 2: str(req.job_dir / "stderr.log")}

    def fds() -> dict[int, str]:
        return {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}

    with trio.move_on_after(5):
        await wait_until(lambda: fds() == expected, "the job to hold only stdin, stdout and stderr")
    assert fds() == expected
    masks = _status_masks(pid)
    assert masks["SigBlk"] == 0
    # glibc's posix_spawn leaves its two internal signals (32, 33) ignored; every signal a
    # program can name is at its default.
    assert masks["SigIgn"] & ~(_bit(32) | _bit(33)) == 0
    assert session_and_group(pid) == (shim, pid)

    # The shim: a session leader, immune to SIGINT/SIGHUP/SIGPIPE, holding nothing but
    # /dev/null and its own two pipes to the launcher (requests, reports). (SigBlk cannot
    # be checked: while in sigtimedwait the kernel reports the waited-for signals as
    # unblocked.)
    assert session_and_group(shim) == (shim, shim)
    ignored = _status_masks(shim)["SigIgn"]
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        assert ignored & _bit(signum), signum
    shim_fds = sorted(os.readlink(f"/proc/{shim}/fd/{fd}") for fd in os.listdir(f"/proc/{shim}/fd"))
    assert shim_fds[:3] == ["/dev/null"] * 3
    assert len(shim_fds) == 5 and all(fd.startswith("pipe:") for fd in shim_fds[3:]), shim_fds
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        os.kill(shim, signum)
    await launcher.ping()
    assert read_proc_stat(shim)[0] not in ("Z", "X")
    assert read_exit(req.job_dir) is None

    assert signal_shim(shim, spawned.shim_start_time, signal.SIGTERM)
    record = await wait_job_end(launcher, spawned, req.job_dir)
    assert (record.reason, record.signal_name) == ("cancelled", "SIGTERM")
    assert job_processes(jobs.marker) == []


async def test_cancelled_caller_does_not_desynchronise_replies(launcher, jobs):
    first = jobs.request(["true"], name="first")
    second = jobs.request(["true"], name="second")
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(launcher.spawn, first)
            await trio.testing.wait_all_tasks_blocked()  # request written, reply awaited
            scope.cancel()
    # The first job was started all the same; its reply must not be taken for the second's.
    spawned = await launcher.spawn(second)
    assert read_runtime(second.job_dir).pid == spawned.pid
    first_runtime = await wait_until(lambda: read_runtime(first.job_dir), "first runtime.json")
    assert first_runtime.pid != spawned.pid
    await wait_job_end(launcher, spawned, second.job_dir)


async def test_spawn_after_launcher_died_raises_launcher_gone(launcher, jobs):
    os.kill(launcher.pid, signal.SIGKILL)
    with pytest.raises(LauncherGone):
        await launcher.ping()
    with pytest.raises(LauncherGone):
        await launcher.spawn(jobs.request(["true"]))
    assert launcher.gone


async def test_runtime_json_is_what_the_shim_reported(launcher, jobs):
    req = jobs.request(["true"])
    spawned = await launcher.spawn(req)
    raw = json.loads((req.job_dir / "runtime.json").read_text())
    assert set(raw) == {"id", "shim_pid", "shim_start_time", "pid", "pgid", "start_time", "argv", "cwd",
                        "env_keys", "started_at", "timeout_s", "grace_s"}
    assert raw["pid"] == spawned.pid
    await wait_job_end(launcher, spawned, req.job_dir)
    assert set(json.loads((req.job_dir / "exit.json").read_text())) == {
        "exit_code", "signal", "signal_name", "reason", "ended_at", "pid", "error"}
