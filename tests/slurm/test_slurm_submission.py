"""Submitting, waiting and cancelling on a real private Slurm (tests/slurm/slurmkit.py)."""

import os
import time

import pytest
import trio

from gpuplaned.slurm import SlurmUnreachable, SubmitRefused, SubmitSpec, cancel, poll, read_ends, submit
from gpuplaned.slurm.parsing import parse_squeue, reason_name
from gpuplaned.slurm.submission import batch_script, find_by_name, sbatch_args

WAIT_S = 30.0


def spec(tmp_path, job_id="j1", attempt=1, argv=("sh", "-c", "echo hello; exit 0"), **kwargs) -> SubmitSpec:
    job_dir = tmp_path / "jobs" / job_id
    job_dir.mkdir(parents=True, exist_ok=True)
    return SubmitSpec(job_id=job_id, attempt=attempt, argv=argv, job_dir=job_dir, chdir=job_dir, **kwargs)


async def wait_state(cli, slurm_id, wanted, limit_s=WAIT_S):
    with trio.fail_after(limit_s):
        while True:
            rows = await poll(cli, [slurm_id])
            if slurm_id in rows and rows[slurm_id].state.name in wanted:
                return rows[slurm_id]
            await trio.sleep(0.2)


async def test_a_job_runs_with_its_own_environment_only_and_its_output_in_the_job_dir(slurm, tmp_path):
    cli = slurm.cli()
    os.environ["GP_TEST_LEAK"] = "daemon-only"  # the submitter's environment must not reach the job
    try:
        job = spec(tmp_path, argv=("sh", "-c", 'echo "msg=$MSG leak=${GP_TEST_LEAK:-none} gpus=$CUDA_VISIBLE_DEVICES"; '
                                              "pwd; exit 3"),
                   env={"MSG": "a, b 'quoted' $x", "PATH": "/usr/bin:/bin"}, gpus=1)
        submitted = await submit(cli, job)
    finally:
        del os.environ["GP_TEST_LEAK"]
    assert submitted.name == "gp-j1-1" and not submitted.found
    await wait_state(cli, submitted.slurm_id, {"FAILED"})
    out = (job.job_dir / f"slurm-{submitted.slurm_id}.out").read_text()
    assert out.splitlines() == ["msg=a, b 'quoted' $x leak=none gpus=0", str(job.job_dir)]
    ends = await read_ends(cli, [submitted.slurm_id])
    assert ends[submitted.slurm_id].exit_code.status == 3
    assert ends[submitted.slurm_id].state.name == "FAILED" and ends[submitted.slurm_id].source == "scontrol"


def test_sbatch_options_name_the_attempt_and_never_ask_for_tasks_per_node(tmp_path):
    job = spec(tmp_path, gpus=2, partition="gpu", account="lab", qos="high", time_limit_min=90)
    args = sbatch_args(job)
    assert args[:5] == ["--parsable", "--job-name=gp-j1-1", f"--chdir={job.job_dir}", "--export=NIL",
                        "--open-mode=append"]
    assert {"--gres=gpu:2", "--partition=gpu", "--account=lab", "--qos=high", "--time=90"} <= set(args)
    assert not any("ntasks-per-node" in arg for arg in args)
    assert batch_script(job).splitlines()[-1] == "exec sh -c 'echo hello; exit 0'"


@pytest.mark.parametrize(("kwargs", "problem"), [
    ({"job_id": "a b"}, "job id 'a b'"),
    ({"attempt": 0}, "attempt must be 1 or more"),
    ({"gpus": -1}, "gpus must be 0 or more"),
    ({"env": {"BAD-NAME": "x"}}, "'BAD-NAME' is not a shell name"),
    ({"argv": ()}, "argv must name a command"),
    ({"time_limit_min": 0}, "time_limit_min must be 1 or more minutes, got 0"),
])
def test_a_bad_spec_is_refused_naming_the_field(tmp_path, kwargs, problem):
    with pytest.raises(ValueError, match=problem):
        spec(tmp_path, **kwargs)


async def test_a_job_slurm_refuses_is_a_refusal_not_a_retry(slurm, tmp_path):
    cli = slurm.cli()
    with pytest.raises(SubmitRefused, match="Requested node configuration is not available"):
        await submit(cli, spec(tmp_path, gpus=5))  # the node has one GPU
    # Slurm keeps a record of what it refused, already FAILED; sbatch was not tried again.
    rows = await poll(cli, await find_by_name(cli, "gp-j1-1"))
    assert [(row.state.name, row.reason) for row in rows.values()] == [("FAILED", "BadConstraints")]


async def test_an_sbatch_timeout_never_makes_a_second_job(slurm, tmp_path):
    """slurmctld stopped (SIGSTOP) while sbatch waits: the kernel queues the request, our
    timeout kills sbatch, and the controller makes the job once it runs again. submit must
    find that job by its name rather than submit a second one."""
    cli = slurm.cli(timeout_s=2.0)
    job = spec(tmp_path, argv=("sleep", "300"))
    slurm.pause_controller()
    resumed_at = None

    async def resume_later():
        nonlocal resumed_at
        await trio.sleep(3.0)  # sbatch has been killed at 2 s; the first look-up fails too
        slurm.resume_controller()
        resumed_at = time.monotonic()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(resume_later)
        submitted = await submit(cli, job, lookups=6, lookup_pause_s=0.5)
    assert resumed_at is not None
    assert submitted.found, "the job sbatch's lost answer had made was found by its name"
    rows = parse_squeue(slurm.client("squeue", "-h", "-t", "all", "-o", "%A|%F|%K|%i|%T|%r|%N|%j").stdout)
    assert [row.job_id for row in rows if row.name == "gp-j1-1"] == [submitted.slurm_id]
    assert len(rows) == 1


async def test_while_the_controller_is_stopped_submit_says_so_and_makes_nothing_later(slurm, tmp_path):
    cli = slurm.cli(timeout_s=1.0)
    slurm.pause_controller()
    try:
        with pytest.raises(SlurmUnreachable, match="whether the job exists is unknown"):
            await submit(cli, spec(tmp_path), lookups=2, lookup_pause_s=0.1)
    finally:
        slurm.resume_controller()
    # The caller, told it is unknown, comes back with look_first: the job sbatch's request made.
    again = await submit(slurm.cli(), spec(tmp_path), look_first=True, lookup_pause_s=0.5)
    assert again.found
    assert await find_by_name(slurm.cli(), "gp-j1-1") == [again.slurm_id]


async def test_the_second_job_on_a_one_gpu_node_waits_with_reason_resources_and_cancel_leaves_nothing(
        slurm, tmp_path):
    cli = slurm.cli()
    first = await submit(cli, spec(tmp_path, "first", argv=("sleep", "300"), gpus=1))
    second = await submit(cli, spec(tmp_path, "second", argv=("sleep", "300"), gpus=1))
    await wait_state(cli, first.slurm_id, {"RUNNING"})
    with trio.fail_after(WAIT_S):
        while True:
            rows = await poll(cli, [first.slurm_id, second.slurm_id])
            if rows[second.slurm_id].reason == "Resources":
                break
            await trio.sleep(0.2)  # until the scheduler has looked at it (reason None before)
    assert rows[second.slurm_id].state.name == "PENDING"
    assert reason_name(rows[second.slurm_id].reason) == "Resources"
    assert rows[first.slurm_id].nodes == slurm.node
    with trio.fail_after(WAIT_S):
        while not slurm.job_processes():
            await trio.sleep(0.1)

    await cancel(cli, first.slurm_id)
    await cancel(cli, first.slurm_id)  # again: already ended is no error
    await wait_state(cli, first.slurm_id, {"CANCELLED"})
    ended = await read_ends(cli, [first.slurm_id])
    assert ended[first.slurm_id].state.name == "CANCELLED"
    assert ended[first.slurm_id].exit_code.signal == 15  # 0:15, as scontrol reports a cancel
    # The GPU freed, the second runs; cancel it too, and no process of either is left.
    await wait_state(cli, second.slurm_id, {"RUNNING"})
    await cancel(cli, second.slurm_id)
    await wait_state(cli, second.slurm_id, {"CANCELLED"})
    with trio.fail_after(WAIT_S):
        while slurm.job_processes():
            await trio.sleep(0.1)
