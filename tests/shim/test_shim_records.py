"""Job files, process identity and failure classification (no launcher needed)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import psutil
import pytest
import trio
import trio.testing
from shimkit import wait_until

from gpuplaned.domain.failures import failure_line, judge_exit
from gpuplaned.launching import processes as launcher_mod
from gpuplaned.launching.job_files import CorruptRecord, ExitRecord, Runtime, read_exit, read_runtime, tail_text
from gpuplaned.launching.processes import (
    is_same_process,
    job_processes,
    process_start_time,
    signal_shim,
    wait_process_exit,
)
from gpuplaned.shim import job as shim_module
from gpuplaned.shim.procs import read_proc_stat


@pytest.fixture
def sleeper():
    """A ``sleep`` child; killed and reaped at teardown."""
    procs: list[subprocess.Popen] = []

    def start(executable: str = "sleep") -> subprocess.Popen:
        proc = subprocess.Popen([executable, "1000"], stdin=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_start_time_of_a_process_with_parentheses_in_its_name(tmp_path, sleeper):
    odd = tmp_path / "a) b (c"
    shutil.copy(shutil.which("sleep"), odd)
    proc = sleeper(str(odd))
    start = process_start_time(proc.pid)
    assert read_proc_stat(proc.pid)[0] in "RSD"
    ticks = os.sysconf("SC_CLK_TCK")
    expected = (psutil.Process(proc.pid).create_time() - psutil.boot_time()) * ticks
    assert abs(start - expected) <= 2
    assert is_same_process(proc.pid, start)


async def test_is_same_process_false_for_reused_zombie_and_dead_pids(sleeper):
    me = process_start_time(os.getpid())
    assert is_same_process(os.getpid(), me)
    assert not is_same_process(os.getpid(), me + 1)  # what a reused pid looks like
    assert not is_same_process(os.getpid(), None)

    proc = sleeper()
    start = process_start_time(proc.pid)
    assert is_same_process(proc.pid, start)
    proc.kill()
    await wait_until(lambda: read_proc_stat(proc.pid)[0] == "Z", "a zombie")
    assert not is_same_process(proc.pid, start)
    proc.wait()
    assert not is_same_process(proc.pid, start)
    assert process_start_time(proc.pid) is None


async def test_signal_shim_refuses_a_reused_pid(sleeper):
    proc = sleeper()
    start = process_start_time(proc.pid)
    assert not signal_shim(proc.pid, start + 1, signal.SIGTERM)
    assert proc.poll() is None
    assert signal_shim(proc.pid, start, signal.SIGTERM)
    assert proc.wait(10) == -signal.SIGTERM
    assert not signal_shim(proc.pid, start, signal.SIGTERM)


def _runtime(pid: int, start_time: int | None, shim_pid: int, shim_start_time: int | None) -> Runtime:
    return Runtime("x", shim_pid, shim_start_time, pid, pid, start_time, ("sleep",), "/", (), 0.0, None, 1.0)


async def test_job_processes_are_found_by_group_and_session_never_by_a_reused_number():
    # A leader of its own session and group (as a shim, or a job's main process, is of its
    # own) and a child of it in both.
    proc = subprocess.Popen(["sh", "-c", "sleep 1000 & exec sleep 1001"], start_new_session=True,
                            stdin=subprocess.DEVNULL)
    try:
        leader = proc.pid
        children = await wait_until(lambda: psutil.Process(leader).children(), "the child to start")
        child = children[0].pid
        start, child_start = process_start_time(leader), process_start_time(child)
        gone = 2**22 + 7  # above any pid_max: no such process
        assert sorted(job_processes(_runtime(leader, start, gone, None))) == sorted(
            [(leader, start), (child, child_start)])  # its process group
        assert job_processes(_runtime(gone, None, leader, start)) == [(child, child_start)]  # a dead shim's session
        # A number held by a process that started at another time is no longer the job's.
        assert job_processes(_runtime(leader, start + 1, gone, None)) == []
        assert job_processes(_runtime(gone, None, leader, start + 1)) == []
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("pidfd", [True, False])
async def test_wait_process_exit(sleeper, monkeypatch, pidfd):
    if not pidfd:
        def no_pidfd(pid):
            raise OSError(38, "Function not implemented")
        monkeypatch.setattr(launcher_mod.os, "pidfd_open", no_pidfd)
        monkeypatch.setattr(launcher_mod, "POLL_INTERVAL_S", 0.01)
    proc = sleeper()
    start = process_start_time(proc.pid)
    with trio.move_on_after(0.05) as scope:
        await wait_process_exit(proc.pid, start)
    assert scope.cancelled_caught  # still running
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_process_exit, proc.pid, start)
        await trio.testing.wait_all_tasks_blocked()
        proc.kill()
    # returns for a zombie, for a dead pid, and for a pid that names another process
    await wait_process_exit(proc.pid, start)
    proc.wait()
    with trio.fail_after(1):
        await wait_process_exit(proc.pid, start)
        await wait_process_exit(os.getpid(), process_start_time(os.getpid()) + 1)


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


EXIT = {"exit_code": 1, "signal": None, "signal_name": None, "reason": "exited",
        "ended_at": 1.7e9, "pid": 42, "error": None}
RUNTIME = {"id": "j", "shim_pid": 1, "shim_start_time": 2, "pid": 3, "pgid": 3, "start_time": 4,
           "argv": ["x"], "cwd": "/", "env_keys": ["PATH"], "started_at": 1.7e9,
           "timeout_s": None, "grace_s": 10.0}


def test_read_records(tmp_path):
    assert read_exit(tmp_path / "nope") is None
    assert read_runtime(tmp_path) is None
    _write(tmp_path / "exit.json", EXIT)
    _write(tmp_path / "runtime.json", RUNTIME)
    assert read_exit(tmp_path) == ExitRecord(1, None, None, "exited", 1.7e9, 42, None)
    runtime = read_runtime(tmp_path)
    assert (runtime.pid, runtime.argv, runtime.env_keys, runtime.timeout_s) == (3, ("x",), ("PATH",), None)


@pytest.mark.parametrize("content", [
    "", "{", "[1]", "null",
    {k: v for k, v in EXIT.items() if k != "reason"},
    EXIT | {"reason": "vanished"},
    EXIT | {"exit_code": "1"},
    EXIT | {"exit_code": True},
    EXIT | {"ended_at": None},
])
def test_read_exit_corrupt(tmp_path, content):
    _write(tmp_path / "exit.json", content)
    with pytest.raises(CorruptRecord) as info:
        read_exit(tmp_path)
    assert info.value.path == tmp_path / "exit.json"
    assert str(tmp_path / "exit.json") in str(info.value)


@pytest.mark.parametrize("content", ["not json", RUNTIME | {"argv": "x"}, RUNTIME | {"pid": None}])
def test_read_runtime_corrupt(tmp_path, content):
    _write(tmp_path / "runtime.json", content)
    with pytest.raises(CorruptRecord):
        read_runtime(tmp_path)


def _rec(reason="exited", exit_code=None, sig=None, name=None, error=None):
    return ExitRecord(exit_code, sig, name, reason, 1.7e9, 42, error)


@pytest.mark.parametrize(("record", "tail", "oom", "report", "failure"), [
    (_rec(exit_code=0), "", False, "SUCCEEDED", None),
    (_rec(exit_code=0), "CUDA out of memory (recovered)", False, "SUCCEEDED", None),
    (_rec(exit_code=1), "", False, "FAILED", "EXIT_CODE"),
    (_rec(exit_code=2), "Traceback ...\nValueError: nan", False, "FAILED", "EXIT_CODE"),
    (_rec(exit_code=1), "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried", False, "FAILED", "OOM"),
    (_rec(exit_code=1), "RuntimeError: CUDA out of memory.", False, "FAILED", "OOM"),
    (_rec(exit_code=1), "torch.OutOfMemoryError: boom", False, "FAILED", "OOM"),
    (_rec("signaled", sig=9, name="SIGKILL"), "", True, "FAILED", "OOM"),
    (_rec("signaled", sig=9, name="SIGKILL"), "", False, "FAILED", "SIGNAL(SIGKILL)"),
    (_rec("signaled", sig=11, name="SIGSEGV"), "", False, "FAILED", "SIGNAL(SIGSEGV)"),
    (_rec("signaled", sig=11, name=None), "", False, "FAILED", "SIGNAL(SIGSEGV)"),
    (_rec("cancelled", sig=15, name="SIGTERM"), "CUDA out of memory", False, "CANCELLED", None),
    (_rec("cancelled", exit_code=0), "", False, "CANCELLED", None),
    (_rec("timeout", sig=9, name="SIGKILL"), "", True, "FAILED", "TIMEOUT"),
    (_rec("spawn_failed", exit_code=127, error="argv[0] 'x' not found"), "", False, "FAILED", "SPAWN_FAILED"),
])
def test_judge_exit(record, tail, oom, report, failure):
    verdict = judge_exit(record, tail, oom_killed=oom)
    assert (verdict.report, verdict.failure) == (report, failure)
    assert (verdict.detail is None) == (report == "SUCCEEDED")


def test_judge_exit_details():
    assert judge_exit(_rec(exit_code=3)).detail == "exit code 3"
    assert judge_exit(_rec("spawn_failed", exit_code=127, error="argv[0] 'x' not found")).detail == (
        "argv[0] 'x' not found")


@pytest.mark.parametrize(("tail", "reason", "expected"), [
    ("", "EXIT_CODE", None),
    ("\n  \n", "EXIT_CODE", None),
    ("Traceback (most recent call last):\n  ...\nValueError: boom\n\n", "EXIT_CODE", "ValueError: boom"),
    ("step 1\r step 2\r", "TIMEOUT", "step 2"),  # progress bars redraw with a carriage return
    ("RuntimeError: CUDA out of memory. Tried\nwhile at step 4\n", "OOM", "RuntimeError: CUDA out of memory. Tried"),
    ("killed\n", "OOM", "killed"),  # the kernel's OOM kill: no message of its own
    ("x" * 2000, "EXIT_CODE", "x" * 500),
])
def test_failure_line(tail, reason, expected):
    assert failure_line(tail, reason) == expected


def test_tail_text(tmp_path):
    assert tail_text(tmp_path / "missing") == ""
    small = tmp_path / "small"
    small.write_bytes(b"one\ntwo\n")
    assert tail_text(small) == "one\ntwo\n"
    big = tmp_path / "big"
    big.write_bytes(b"".join(b"line %d\n" % i for i in range(1000)))
    tail = tail_text(big, max_bytes=100)
    assert tail.endswith("line 999\n")
    assert tail.splitlines()[0].startswith("line ")  # the cut-off first line is dropped
    assert len(tail) <= 100
    one_line = tmp_path / "one"
    one_line.write_bytes(b"x" * 50 + "é".encode() * 10)
    assert tail_text(one_line, max_bytes=15).endswith("é")  # undecodable start replaced


_SUPERVISE = """
import os, signal, sys, time
from gpuplaned.shim import job as shim
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD, signal.SIGTERM})  # as in a shim
synced = []
pid = os.posix_spawn("/bin/sleep", ["sleep", sys.argv[1]], dict(os.environ))
status, reason, durable = shim._supervise(pid, time.monotonic(), None, 1.0, lambda: synced.append(1))
print(len(synced), durable, os.WEXITSTATUS(status), reason)
"""


@pytest.mark.parametrize(("seconds", "expected"), [("0", "0 False 0 None"), ("0.8", "1 True 0 None")])
def test_records_are_made_durable_only_once_a_job_has_run_a_while(seconds, expected):
    # A job that ends within DURABLE_AFTER_S pays no fsync; one that runs longer has its
    # runtime.json (and then its exit.json) synced, once.
    assert float(seconds) == 0 or float(seconds) > shim_module.DURABLE_AFTER_S
    out = subprocess.run([sys.executable, "-c", _SUPERVISE, seconds], capture_output=True, text=True,
                         timeout=30, check=True)
    assert out.stdout.split("\n")[0] == expected
