"""GPU process -> job, with real process groups and sessions claiming fake GPUs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from helpers import wait_for

from gpuplaned.telemetry.attribution import GpuProcessOwner, JobGroup, PinningViolation, attribute_processes
from gpuplaned.telemetry.fake import FakeGpus, claim
from gpuplaned.telemetry.samples import GpuProcess, GpuSample

# The job's main process starts a worker (as a training script starts its workers); the
# worker claims a fake GPU the way a job would, through GPUPLANE_FAKE_GPU_DIR.
WORKER = textwrap.dedent("""
    import os, pathlib, sys, time
    if sys.argv[3] == "own-group":
        os.setpgid(0, 0)
    folder = pathlib.Path(os.environ["GPUPLANE_FAKE_GPU_DIR"], sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f".{os.getpid()}").write_text("700")
    os.replace(folder / f".{os.getpid()}", folder / str(os.getpid()))
    pathlib.Path(sys.argv[2]).write_text(str(os.getpid()))
    time.sleep(60)
""")
MAIN = "import subprocess, sys; subprocess.run([sys.executable, '-c', sys.argv[1], *sys.argv[2:]])"


@pytest.fixture
def claims(tmp_path):
    return tmp_path / "fake-gpus"


@pytest.fixture
def start_job(tmp_path, claims):
    started: list[tuple[subprocess.Popen, int]] = []

    def start(gpu_index: int, group: str = "same-group") -> tuple[subprocess.Popen, int]:
        ready = tmp_path / f"worker-{len(started)}.pid"
        env = {**os.environ, "GPUPLANE_FAKE_GPU_DIR": str(claims)}
        job = subprocess.Popen([sys.executable, "-c", MAIN, WORKER, str(gpu_index), str(ready), group],
                               env=env, start_new_session=True)
        worker = int(wait_for(lambda: ready.exists() and ready.read_text(), what="worker claim"))
        started.append((job, worker))
        return job, worker

    yield start
    for job, worker in started:
        for kill in (lambda: os.kill(worker, signal.SIGKILL), lambda: os.killpg(job.pid, signal.SIGKILL)):
            try:
                kill()
            except ProcessLookupError:
                pass
        job.wait()


def test_a_workers_process_is_its_jobs(claims, start_job):
    gpus = FakeGpus(2, "Fake", 81920, claims_dir=claims)
    job, worker = start_job(0)
    result = attribute_processes(gpus.sample({0}), [JobGroup("job-1", job.pid, {0})])
    assert result.processes == (GpuProcessOwner(0, worker, 700, "job-1"),)
    assert result.violations == () and result.foreign == ()
    assert result.job_gpu_memory_mb == {"job-1": 700}


def test_a_job_on_a_gpu_it_was_not_given_is_a_violation(claims, start_job):
    gpus = FakeGpus(2, "Fake", 81920, claims_dir=claims)
    job, worker = start_job(1)
    result = attribute_processes(gpus.sample(), [JobGroup("job-1", job.pid, {0})])
    assert result.violations == (PinningViolation("job-1", worker, 1),)
    assert result.processes[0].job_id == "job-1"


def test_a_process_of_no_job_is_foreign(claims, start_job):
    gpus = FakeGpus(2, "Fake", 81920, claims_dir=claims)
    job, _ = start_job(0)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        claim(claims, 1, stranger.pid, memory_mb=300)
        result = attribute_processes(gpus.sample(), [JobGroup("job-1", job.pid, {0})])
    finally:
        stranger.kill()
        stranger.wait()
    assert [p.foreign for p in result.processes] == [False, True]
    assert result.foreign == (GpuProcessOwner(1, stranger.pid, 300, None),)
    assert result.job_gpu_memory_mb == {"job-1": 700}


def test_a_worker_in_a_group_of_its_own_is_found_by_its_session(claims, start_job):
    gpus = FakeGpus(1, "Fake", 81920, claims_dir=claims)
    job, worker = start_job(0, "own-group")
    assert os.getpgid(worker) != job.pid and os.getsid(worker) == job.pid
    result = attribute_processes(gpus.sample(), [JobGroup("job-1", job.pid, {0})])
    assert result.processes == (GpuProcessOwner(0, worker, 700, "job-1"),)


def test_a_process_gone_before_the_lookup_is_gone_not_foreign(claims):
    gpus = FakeGpus(1, "Fake", 81920, claims_dir=claims)
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        claim(claims, 0, proc.pid, memory_mb=700)
        sample = gpus.sample()
    finally:
        proc.kill()
        proc.wait()
    result = attribute_processes(sample, [JobGroup("job-1", proc.pid, {0})])
    assert result.processes == (GpuProcessOwner(0, proc.pid, 700, None, gone=True),)
    assert result.foreign == () and result.job_gpu_memory_mb == {"job-1": 0}


def test_a_job_under_a_shim_is_found_by_the_shims_session():
    gpus = [GpuSample(0, None, "m", processes=(GpuProcess(11, 100), GpuProcess(12, None))),
            GpuSample(1, None, "m", processes=(GpuProcess(13, 50),))]
    groups = {11: 100, 12: 12, 13: 200}  # 12 left the job's group, 13 is another job's
    sessions = {11: 555, 12: 555, 13: 777}
    jobs = [JobGroup("a", 100, {0, 1}, sid=555), JobGroup("b", 200, {1}, sid=777), JobGroup("c", 300, {2})]
    result = attribute_processes(gpus, jobs, pgid_of=groups.__getitem__, sid_of=sessions.__getitem__)
    assert [p.job_id for p in result.processes] == ["a", "a", "b"]
    assert result.job_gpu_memory_mb == {"a": 100, "b": 50, "c": 0}
    assert result.violations == ()
