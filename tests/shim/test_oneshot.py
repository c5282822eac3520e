"""The one-shot shim (``__main__.py --oneshot ATTEMPT_DIR``) as a real process, without Slurm:
what a batch job's shim does with its spec.json, its job, Slurm's signals and environment."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from shimkit import MARKER_VAR, WAIT_S, job_processes, wait_until

from gpuplaned.launching.client import SHIM_PATH
from gpuplaned.launching.job_files import read_exit, read_runtime
from gpuplaned.slurm.batch_job import shim_argv, write_spec

PY = sys.executable


def attempt_dir(jobs, argv, *, env=None, timeout_s=None, grace_s=1.0, attempt=1) -> Path:
    """A spec.json for attempt ``attempt`` of job ``j1`` under the test's folder, as the backend writes it."""
    folder = jobs.root / "jobs" / "j1" / f"attempt-{attempt}"
    write_spec(folder, argv=argv, cwd=jobs.root, env=jobs.base_env() | (env or {}), job_id="j1",
               attempt=attempt, timeout_s=timeout_s, grace_s=grace_s)
    return folder


def shim_env(jobs, **extra: str) -> dict[str, str]:
    """The batch step's environment: Slurm's variables come from here, not from spec.json."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), MARKER_VAR: jobs.marker, **extra}


def run_shim(folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(shim_argv(PY, folder), env=env, capture_output=True, text=True, timeout=WAIT_S)


@asynccontextmanager
async def started_shim(folder: Path, env: dict[str, str]) -> AsyncIterator[trio.Process]:
    """The shim, running; killed (its job then by the ``jobs`` fixture) if the test fails first."""
    proc = await trio.lowlevel.open_process(shim_argv(PY, folder), env=env, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()


def ready(folder: Path) -> bool:
    log = folder / "stdout.log"
    return log.exists() and log.read_text() == "ready\n"


async def wait_shim(proc: trio.Process, timeout: float = WAIT_S) -> int:
    with trio.fail_after(timeout):
        return await proc.wait()


@pytest.mark.parametrize("code", [0, 3])
def test_the_exit_code_is_recorded_and_is_the_shims_own(jobs, code):
    folder = attempt_dir(jobs, ["sh", "-c", f"echo out; echo err >&2; exit {code}"])
    done = run_shim(folder, shim_env(jobs))
    assert (done.returncode, done.stderr) == (code, "")
    end = read_exit(folder, ("j1", 1))
    assert end is not None
    assert (end.reason, end.exit_code, end.signal, end.forwarded) == ("exited", code, None, ())
    runtime = read_runtime(folder, ("j1", 1))
    assert runtime is not None and runtime.id == "j1/1" and runtime.pgid == runtime.pid == end.pid
    assert (runtime.host, runtime.slurm_job_id) == (socket.gethostname(), None)  # no Slurm here
    assert (folder / "stdout.log").read_text() == "out\n" and (folder / "stderr.log").read_text() == "err\n"
    for name in ("spec.json", "runtime.json", "exit.json", "stdout.log", "stderr.log"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_signal_death_is_128_plus_the_signal(jobs):
    folder = attempt_dir(jobs, ["sh", "-c", "kill -KILL $$"])
    assert run_shim(folder, shim_env(jobs)).returncode == 128 + signal.SIGKILL
    end = read_exit(folder)
    assert end is not None
    assert (end.reason, end.exit_code, end.signal_name) == ("signaled", None, "SIGKILL")


@pytest.mark.parametrize(("content", "code", "problem"), [
    (None, 127, "spec.json not found: nothing to run"),
    ("{not json", 126, "spec.json is not JSON"),
    ("[1, 2]", 126, "spec.json must hold a JSON object, got list"),
    ('{"argv": "sleep 1", "cwd": "/"}', 126, "argv must be a non-empty list of strings, got 'sleep 1'"),
    ('{"argv": ["true"], "cwd": "/", "timeout": 5}', 126, "unknown field(s) 'timeout'"),
    ('{"cwd": "/"}', 126, "spec.json must name argv and cwd"),
])
def test_a_missing_or_bad_spec_is_a_spawn_failure_saying_why(jobs, content, code, problem):
    folder = jobs.root / "jobs" / "j1" / "attempt-1"
    folder.mkdir(parents=True)
    if content is not None:
        (folder / "spec.json").write_text(content)
    done = run_shim(folder, shim_env(jobs))
    assert done.returncode == code
    assert problem in done.stderr and str(folder / "spec.json") in done.stderr
    end = read_exit(folder)
    assert end is not None
    assert (end.reason, end.exit_code, end.pid) == ("spawn_failed", code, None)
    assert end.error is not None and problem in end.error
    assert not (folder / "runtime.json").exists()


def test_a_command_that_cannot_start_is_a_spawn_failure_of_the_attempt(jobs):
    folder = attempt_dir(jobs, ["no-such-command-here"])
    done = run_shim(folder, shim_env(jobs))
    assert done.returncode == 127 and "argv[0] 'no-such-command-here' not found" in done.stderr
    end = read_exit(folder, ("j1", 1))
    assert end is not None and (end.reason, end.exit_code) == ("spawn_failed", 127)


def test_the_command_line_names_its_attempt_dir(jobs):
    done = subprocess.run(shim_argv(PY, "")[:-1], capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 2 and "--oneshot ATTEMPT_DIR" in done.stderr


async def test_sigusr2_reaches_the_job_and_is_listed_as_forwarded(jobs):
    # Slurm's warning (--signal=B:USR2@120) goes to the batch shell only: the shim passes it on.
    job = textwrap.dedent("""
        import signal, sys, time
        got = []
        signal.signal(signal.SIGUSR2, lambda *_: got.append(1))
        print("ready", flush=True)
        while not got:
            time.sleep(0.01)
        open("usr2.txt", "w").write("saving a checkpoint")
        sys.exit(0)
    """)
    folder = attempt_dir(jobs, [PY, "-c", job])
    async with started_shim(folder, shim_env(jobs)) as proc:
        await wait_until(lambda: ready(folder), "the job to be ready")
        proc.send_signal(signal.SIGUSR2)
        assert await wait_shim(proc) == 0
    assert (jobs.root / "usr2.txt").read_text() == "saving a checkpoint"
    end = read_exit(folder)
    assert end is not None and (end.reason, end.exit_code, end.forwarded) == ("exited", 0, ("SIGUSR2",))


# The main process and a worker in its group ignore SIGTERM; another worker escapes with setsid().
STUBBORN = textwrap.dedent("""
    import os, signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork() == 0:
        while True: signal.pause()
    if os.fork() == 0:
        os.setsid()
        while True: signal.pause()
    print("ready", flush=True)
    while True: signal.pause()
""")


async def test_sigterm_cancels_the_job_within_its_grace_and_nothing_of_it_survives(jobs):
    grace = 0.4
    folder = attempt_dir(jobs, [PY, "-c", STUBBORN], grace_s=grace)
    async with started_shim(folder, shim_env(jobs)) as proc:
        await wait_until(lambda: ready(folder), "the job to be ready")
        await wait_until(lambda: len(job_processes(jobs.marker)) == 4, "the shim and three job processes")
        started = trio.current_time()
        proc.send_signal(signal.SIGTERM)  # scancel, or Slurm's preemption
        assert await wait_shim(proc, timeout=grace + 2) == 128 + signal.SIGKILL
    assert trio.current_time() - started >= grace  # the job ignored SIGTERM: its grace was used up
    assert job_processes(jobs.marker) == []
    end = read_exit(folder)
    assert end is not None and (end.reason, end.signal_name, end.forwarded) == ("cancelled", "SIGKILL", ())


def test_the_timeout_stops_the_job(jobs):
    folder = attempt_dir(jobs, ["sleep", "30"], timeout_s=0.3)
    assert run_shim(folder, shim_env(jobs)).returncode == 128 + signal.SIGTERM
    end = read_exit(folder)
    assert end is not None and (end.reason, end.signal_name) == ("timeout", "SIGTERM")


def test_slurms_variables_and_gpu_binding_reach_the_job_and_win(jobs):
    folder = attempt_dir(jobs, ["env"], env={"CUDA_VISIBLE_DEVICES": "0,1", "OWN": "spec"})
    env = shim_env(jobs, SLURM_JOB_ID="4242", SLURM_JOB_PARTITION="gpu", CUDA_VISIBLE_DEVICES="3",
                   ROCR_VISIBLE_DEVICES="3", GPU_DEVICE_ORDINAL="3", NOT_SLURM="batch-shell-only")
    assert run_shim(folder, env).returncode == 0
    seen = dict(line.split("=", 1) for line in (folder / "stdout.log").read_text().splitlines())
    assert {k: seen.get(k) for k in ("SLURM_JOB_ID", "SLURM_JOB_PARTITION", "CUDA_VISIBLE_DEVICES",
                                     "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "OWN", "NOT_SLURM")} == {
        "SLURM_JOB_ID": "4242", "SLURM_JOB_PARTITION": "gpu", "CUDA_VISIBLE_DEVICES": "3",
        "ROCR_VISIBLE_DEVICES": "3", "GPU_DEVICE_ORDINAL": "3", "OWN": "spec", "NOT_SLURM": None}
    runtime = read_runtime(folder)
    assert runtime is not None and runtime.slurm_job_id == "4242"
    assert "SLURM_JOB_ID" in runtime.env_keys


def test_a_requeued_batch_job_runs_nothing_and_touches_no_file(jobs):
    folder = attempt_dir(jobs, ["sh", "-c", "echo again > again; exit 5"], attempt=1)
    before = sorted(p.name for p in folder.iterdir())
    done = run_shim(folder, shim_env(jobs, SLURM_RESTART_COUNT="1", SLURM_JOB_ID="77"))
    assert done.returncode == 0 and "GPUPlane runs the job's next attempt itself" in done.stderr
    assert sorted(p.name for p in folder.iterdir()) == before  # the first run's records are its own
    assert not (folder.parent / "attempt-2").exists() and not (jobs.root / "again").exists()


def test_a_restart_count_that_is_not_a_number_is_refused(jobs):
    folder = attempt_dir(jobs, ["true"])
    done = run_shim(folder, shim_env(jobs, SLURM_RESTART_COUNT="one"))
    assert done.returncode == 126 and "SLURM_RESTART_COUNT must be a whole number, got 'one'" in done.stderr


def test_write_spec_makes_a_private_dir_and_file_the_shim_reads(tmp_path):
    folder = tmp_path / "jobdir" / "jobs" / "j9" / "attempt-3"
    path = write_spec(folder, argv=("python", "train.py"), cwd="/work", env={"A": "1"}, job_id="j9",
                      attempt=3, timeout_s=None, grace_s=5)
    assert path == folder / "spec.json"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"argv": ["python", "train.py"], "cwd": "/work", "env": {"A": "1"},
                                            "job_id": "j9", "attempt": 3, "timeout_s": None, "grace_s": 5}
    assert [p.name for p in folder.iterdir()] == ["spec.json"]  # no temp file left


@pytest.mark.parametrize(("kwargs", "problem"), [
    ({"argv": []}, "argv must be a non-empty list of strings"),
    ({"cwd": "work"}, "cwd must be an absolute path, got 'work'"),
    ({"env": {"A=B": "x"}}, "bad env variable name 'A=B'"),
    ({"attempt": 0}, "attempt must be a positive integer"),
    ({"grace_s": -1}, "grace_s must be a non-negative number"),
])
def test_write_spec_refuses_what_the_shim_would(tmp_path, kwargs, problem):
    fields = {"argv": ["true"], "cwd": "/", "env": {}, "job_id": "j1", "attempt": 1, "timeout_s": None,
              "grace_s": 1.0} | kwargs
    with pytest.raises(ValueError, match=problem.replace("(", r"\(")):
        write_spec(tmp_path / "a", **fields)
    assert not (tmp_path / "a").exists()


def test_write_spec_wants_an_absolute_dir():
    with pytest.raises(ValueError, match="attempt_dir must be an absolute path, got 'rel/a'"):
        write_spec("rel/a", argv=["true"], cwd="/", env={}, job_id="j1", attempt=1, timeout_s=None, grace_s=1)


def test_shim_argv_runs_the_shim_by_its_path_isolated(tmp_path):
    argv = shim_argv("/opt/py/bin/python3", tmp_path / "attempt-1")
    assert argv[:3] == ["/opt/py/bin/python3", "-I", "-S"] and argv[4:] == ["--oneshot", str(tmp_path / "attempt-1")]
    assert Path(argv[3]).is_absolute() and Path(argv[3]).name == "__main__.py" and Path(argv[3]).parent.name == "shim"


def test_the_oneshot_shim_needs_only_its_folder_and_the_standard_library(jobs, tmp_path):
    # A copy of the folder alone (a compute node's), under a gpuplaned/__init__.py that must never run.
    root = tmp_path / "elsewhere" / "gpuplaned"
    shutil.copytree(SHIM_PATH.parent, root / "shim", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "__init__.py").write_text("raise ImportError('the one-shot shim imported gpuplaned')\n")
    folder = attempt_dir(jobs, ["sh", "-c", "echo fine"])
    done = subprocess.run([PY, "-I", "-S", str(root / "shim" / "__main__.py"), "--oneshot", str(folder)],
                          env=shim_env(jobs), capture_output=True, text=True, timeout=WAIT_S)
    assert (done.returncode, done.stderr) == (0, "")
    assert (folder / "stdout.log").read_text() == "fine\n"
