"""The one-shot shim inside a real Slurm allocation (tests/slurm/slurmkit.py): the batch script
only execs it, it writes the attempt's files, and Slurm's own account of the job agrees."""

import socket
import sys

import trio

from gpuplaned.launching.job_files import read_exit, read_runtime
from gpuplaned.slurm import SubmitSpec, read_ends, submit
from gpuplaned.slurm.batch_job import shim_argv, write_spec

WAIT_S = 30.0


async def submit_attempt(slurm, tmp_path, job_id, argv, *, grace_s=2.0, gpus=1):
    folder = tmp_path / "jobs" / job_id / "attempt-1"
    write_spec(folder, argv=argv, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, job_id=job_id, attempt=1,
               timeout_s=None, grace_s=grace_s)
    spec = SubmitSpec(job_id=job_id, attempt=1, argv=shim_argv(sys.executable, folder), job_dir=folder,
                      chdir=folder, gpus=gpus)
    return folder, (await submit(slurm.cli(), spec)).slurm_id


async def wait_for(predicate, what, limit_s=WAIT_S):
    with trio.fail_after(limit_s):
        while not (value := predicate()):
            await trio.sleep(0.1)
    return value


# Cancelled: the job ignores SIGTERM, so that it is the shim, not Slurm's own SIGTERM to the
# whole step, that ends it (after its grace, well before Slurm's KillWait of 30 s).
WARNED_THEN_CANCELLED = "trap 'touch usr2.txt' USR2; trap '' TERM; echo ready; while :; do sleep 0.05; done"


async def test_the_batch_job_is_the_shim_and_slurm_agrees_with_its_records(slurm, tmp_path):
    # Two jobs at once on the one cluster (a fixture start each would cost seconds).
    exits, exits_id = await submit_attempt(
        slurm, tmp_path, "exits", ["sh", "-c", 'echo "to stdout on gpu $CUDA_VISIBLE_DEVICES"; echo "to stderr" >&2; exit 3'])
    warned, warned_id = await submit_attempt(slurm, tmp_path, "warned", ["sh", "-c", WARNED_THEN_CANCELLED],
                                             grace_s=0.5, gpus=0)

    end = await wait_for(lambda: read_exit(exits, ("exits", 1)), "exit.json")
    assert (end.reason, end.exit_code, end.signal) == ("exited", 3, None)
    runtime = read_runtime(exits, ("exits", 1))
    assert runtime is not None and (runtime.slurm_job_id, runtime.host) == (exits_id, socket.gethostname())
    assert "SLURM_JOB_ID" in runtime.env_keys
    assert (exits / "stdout.log").read_text() == "to stdout on gpu 0\n"  # Slurm's GPU binding reached the job
    assert (exits / "stderr.log").read_text() == "to stderr\n"
    assert (exits / f"slurm-{exits_id}.err").read_text() == ""  # the shim had nothing to complain of
    cli = slurm.cli()
    slurm_end = None
    with trio.fail_after(WAIT_S):
        while slurm_end is None:
            slurm_end = (await read_ends(cli, [exits_id])).get(exits_id)
            await trio.sleep(0.1)
    assert (slurm_end.state.name, slurm_end.exit_code.status) == ("FAILED", 3)  # Slurm's ExitCode agrees

    stdout = warned / "stdout.log"
    await wait_for(lambda: stdout.exists() and stdout.read_text() == "ready\n", "the job to be ready")
    # What --signal=B:USR2@120 does before a time limit or a preemption: the batch shell only.
    signalled = slurm.client("scancel", "--batch", "--signal=USR2", warned_id)
    assert signalled.returncode == 0, signalled.stderr
    await wait_for(lambda: (tmp_path / "usr2.txt").exists(), "the job to get SIGUSR2")
    cancelled = slurm.client("scancel", warned_id)
    assert cancelled.returncode == 0, cancelled.stderr
    end = await wait_for(lambda: read_exit(warned, ("warned", 1)), "exit.json", limit_s=10)
    assert (end.reason, end.signal_name, end.forwarded) == ("cancelled", "SIGKILL", ("SIGUSR2",))
    await wait_for(lambda: not slurm.job_processes(), "every process of the jobs to be gone", limit_s=10)
