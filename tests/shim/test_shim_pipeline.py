"""Pipelined spawns: many in flight at once, a stuck shim holds up no one, job dirs, started_at."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import time

import pytest
import trio
from shimkit import job_processes, wait_job_end, wait_until

from gpuplaned.launching.client import SpawnError, open_launcher
from gpuplaned.launching.job_files import read_exit, read_runtime
from gpuplaned.shim.job import _make_job_dir
from gpuplaned.shim.procs import read_proc_stat

STUCK_TIMEOUT_S = 0.75  # the report timeout of the launchers that meet a stuck shim


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def _gone(pid: int) -> bool:
    state = read_proc_stat(pid)
    return state is None or state[0] in ("Z", "X")


async def test_twenty_concurrent_spawns(launcher, jobs, tmp_path):
    # Each job waits for the go file, so all twenty run at once: twenty shims.
    go = tmp_path / "go"
    reqs = [jobs.request(["sh", "-c", f"echo {i}; while [ ! -e {go} ]; do sleep 0.01; done; exit {i}"])
            for i in range(20)]
    results = {}

    async def one(req):
        results[req.id] = await launcher.spawn(req)

    async with trio.open_nursery() as nursery:
        for req in reqs:
            nursery.start_soon(one, req)
    go.touch()
    assert len({s.pid for s in results.values()}) == 20
    assert len({s.shim_pid for s in results.values()}) == 20
    for i, req in enumerate(reqs):
        spawned = results[req.id]
        assert spawned.id == req.id
        runtime = read_runtime(req.job_dir)
        assert (runtime.id, runtime.pid, runtime.shim_pid, runtime.start_time) == (
            req.id, spawned.pid, spawned.shim_pid, spawned.start_time)
        assert spawned.started_at == runtime.started_at
        record = await wait_job_end(launcher, spawned, req.job_dir)
        assert record.exit_code == i
        assert (req.job_dir / "stdout.log").read_text() == f"{i}\n"


async def test_started_at_in_the_reply_is_runtime_json_s(launcher, jobs):
    req = jobs.request(["true"])
    before = time.time()
    spawned = await launcher.spawn(req)
    after = time.time()
    raw = json.loads((req.job_dir / "runtime.json").read_text())
    assert isinstance(spawned.started_at, float)
    assert spawned.started_at == raw["started_at"]  # the very same float, not re-rounded
    assert before <= spawned.started_at <= after
    await wait_job_end(launcher, spawned, req.job_dir)


async def test_a_request_larger_than_the_pipe_goes_out_whole(launcher, jobs):
    # Written straight into the pipe while it has room, the rest through the stream: 600 kB of
    # variables (ten pipe buffers; execve takes 128 kB a string) reach the job intact, and the
    # next request after them.
    env = {f"BIG{i}": str(i) * 100_000 for i in range(6)}
    req = jobs.request(["sh", "-c", 'printf %s "$BIG0$BIG1$BIG2$BIG3$BIG4$BIG5" | md5sum'], env=env)
    spawned = await launcher.spawn(req)
    await wait_job_end(launcher, spawned, req.job_dir)
    expected = hashlib.md5("".join(env.values()).encode()).hexdigest()
    assert (req.job_dir / "stdout.log").read_text().split()[0] == expected
    small = jobs.request(["true"])
    await wait_job_end(launcher, await launcher.spawn(small), small.job_dir)


async def test_the_shim_creates_the_job_dir(launcher, jobs, tmp_path):
    nested = tmp_path / "a" / "b" / "job"
    req = jobs.request(["echo", "hi"], name="a/b/job")
    assert req.job_dir == nested and not nested.parent.exists()
    spawned = await launcher.spawn(req)
    assert stat.S_IMODE(nested.stat().st_mode) == 0o700 & ~_umask()
    assert read_runtime(nested).pid == spawned.pid
    assert (await wait_job_end(launcher, spawned, nested)).exit_code == 0
    assert (nested / "stdout.log").read_text() == "hi\n"

    existing = tmp_path / "existing"
    existing.mkdir(mode=0o755)
    existing.chmod(0o755)
    req = jobs.request(["true"], name="existing")
    await wait_job_end(launcher, await launcher.spawn(req), existing)
    assert stat.S_IMODE(existing.stat().st_mode) == 0o755  # left as it was


async def test_a_job_dir_that_cannot_be_created(launcher, jobs, tmp_path):
    (tmp_path / "file").write_text("not a directory")
    req = jobs.request(["true"], name="file/job")
    with pytest.raises(SpawnError) as info:
        await launcher.spawn(req)
    assert info.value.message.startswith(f"cannot create job_dir '{req.job_dir}': [Errno 20] Not a directory")
    await launcher.ping()

    (tmp_path / "plain").write_text("a file where the job dir should be")
    req = jobs.request(["true"], name="plain")
    with pytest.raises(SpawnError, match=r"cannot create job_dir .*: \[Errno 20\]"):
        await launcher.spawn(req)
    assert (tmp_path / "plain").read_text() == "a file where the job dir should be"


def test_make_job_dir_names_the_directories_to_fsync(tmp_path):
    job = tmp_path / "a" / "b" / "c"
    assert _make_job_dir(str(job)) == [str(tmp_path / "a" / "b"), str(tmp_path / "a"), str(tmp_path)]
    assert stat.S_IMODE(job.stat().st_mode) == 0o700 & ~_umask()
    assert _make_job_dir(str(job)) == []  # there already
    assert _make_job_dir(str(tmp_path / "a" / "d")) == [str(tmp_path / "a")]


def test_make_job_dir_makes_a_first_attempts_dir_in_three_mkdirs(tmp_path, monkeypatch):
    """The attempt's dir, found missing with its job's folder, then the folder and the dir: no
    other look (it took seven system calls, four of them stat calls)."""
    (tmp_path / "jobs").mkdir()
    calls = []
    real_mkdir, real_stat = os.mkdir, os.stat
    monkeypatch.setattr(os, "mkdir", lambda path, mode=0o777: calls.append(("mkdir", path)) or real_mkdir(path, mode))
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: calls.append(("stat", path)) or real_stat(path, *a, **k))
    attempt = str(tmp_path / "jobs" / "job_1" / "attempt-1")
    assert _make_job_dir(attempt) == [str(tmp_path / "jobs" / "job_1"), str(tmp_path / "jobs")]
    assert calls == [("mkdir", attempt), ("mkdir", str(tmp_path / "jobs" / "job_1")), ("mkdir", attempt)]
    calls.clear()
    assert _make_job_dir(str(tmp_path / "jobs" / "job_1" / "attempt-2")) == [str(tmp_path / "jobs" / "job_1")]
    assert len(calls) == 1


def test_make_job_dir_refuses_a_file_in_its_way_and_takes_a_parent_made_meanwhile(tmp_path, monkeypatch):
    (tmp_path / "plain").write_text("x")
    with pytest.raises(NotADirectoryError):
        _make_job_dir(str(tmp_path / "plain"))
    with pytest.raises(NotADirectoryError):
        _make_job_dir(str(tmp_path / "plain" / "attempt-1"))
    real_mkdir = os.mkdir
    racer = tmp_path / "jobs" / "job_2"

    def another_shim_first(path, mode=0o777):
        if path == str(racer):
            real_mkdir(path, mode)  # the other shim's, just before ours
        real_mkdir(path, mode)

    (tmp_path / "jobs").mkdir()
    monkeypatch.setattr(os, "mkdir", another_shim_first)
    assert _make_job_dir(str(racer / "attempt-1")) == [str(racer)]
    assert (racer / "attempt-1").is_dir()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


async def _spawn_all(launcher, reqs):
    """Spawn ``reqs`` concurrently; returns {id: (Spawned or SpawnError, seconds taken)}."""
    results = {}

    async def one(req):
        t0 = time.monotonic()
        try:
            outcome = await launcher.spawn(req)
        except SpawnError as exc:
            outcome = exc
        results[req.id] = (outcome, time.monotonic() - t0)

    async with trio.open_nursery() as nursery:
        for req in reqs:
            nursery.start_soon(one, req)
    return results


async def test_a_shim_stuck_before_its_job_starts_holds_up_no_one(jobs):
    # stdout.log is a FIFO nobody reads: the shim blocks opening it, before posix_spawn.
    stuck = jobs.request(["sh", "-c", "echo never"], name="stuck")
    stuck.job_dir.mkdir()
    os.mkfifo(stuck.job_dir / "stdout.log")
    others = [jobs.request(["true"]) for _ in range(6)]
    async with open_launcher(report_timeout_s=STUCK_TIMEOUT_S) as launcher:
        results = await _spawn_all(launcher, [stuck, *others])
        failure, waited = results[stuck.id]
        assert isinstance(failure, SpawnError), failure
        assert waited >= STUCK_TIMEOUT_S
        assert f"did not report within {STUCK_TIMEOUT_S:g} s; killed it" in failure.message
        assert "its job" not in failure.message  # it had not started one
        for req in others:
            spawned, took = results[req.id]
            assert not isinstance(spawned, SpawnError), spawned
            assert took < STUCK_TIMEOUT_S
            assert (await wait_job_end(launcher, spawned, req.job_dir)).exit_code == 0
        await launcher.ping()

    record = read_exit(stuck.job_dir)  # written before the reply
    assert (record.reason, record.exit_code, record.error) == ("spawn_failed", 126, failure.message)
    shim_pid = int(failure.message.split()[1])
    await wait_until(lambda: _gone(shim_pid), "the stuck shim to be killed")
    # Had it survived, a reader on the FIFO would let it go on and start the job.
    fd = os.open(stuck.job_dir / "stdout.log", os.O_RDONLY | os.O_NONBLOCK)
    try:
        await trio.sleep(0.1)
        assert read_runtime(stuck.job_dir) is None
        assert job_processes(jobs.marker) == []
    finally:
        os.close(fd)


async def test_a_shim_stuck_after_its_job_started_is_killed_with_the_job(jobs):
    req = jobs.request(["sleep", "1000"], name="stuck-late")
    req.job_dir.mkdir()
    async with open_launcher(report_timeout_s=STUCK_TIMEOUT_S, prefork=2) as launcher:
        # The idle shims are forked ahead: each one's runtime.json temp file is made a FIFO,
        # so whichever takes the request starts the job, then blocks writing runtime.json.
        idle = await wait_until(lambda: len(_children(launcher.pid)) == 2 and _children(launcher.pid),
                                "two idle shims")
        for pid in idle:
            os.mkfifo(req.job_dir / f".runtime.json.{pid}.tmp")
        with pytest.raises(SpawnError) as info:
            await launcher.spawn(req)
        message = info.value.message
        assert "did not report within" in message and "and its job (pid " in message
        job_pid = int(message.rpartition("(pid ")[2].rstrip(")"))
        await launcher.ping()
    await wait_until(lambda: _gone(job_pid), "the job to be killed")
    assert job_processes(jobs.marker) == []
    assert read_runtime(req.job_dir) is None
    assert read_exit(req.job_dir).reason == "spawn_failed"


async def test_a_shim_that_dies_before_reporting(jobs):
    stuck = jobs.request(["true"], name="dies")
    stuck.job_dir.mkdir()
    os.mkfifo(stuck.job_dir / "stdout.log")  # it blocks here until it is killed
    async with open_launcher(prefork=0) as launcher:  # no idle shims: its only child
        assert _children(launcher.pid) == []
        results = {}

        async def spawn():
            results.update(await _spawn_all(launcher, [stuck]))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(spawn)
            [shim] = await wait_until(lambda: _children(launcher.pid), "the shim")
            os.kill(shim, signal.SIGKILL)
        failure, _ = results[stuck.id]
        assert isinstance(failure, SpawnError), failure
        assert failure.message == f"shim {shim} exited before reporting"
        await launcher.ping()
    record = read_exit(stuck.job_dir)
    assert (record.reason, record.error) == ("spawn_failed", failure.message)
