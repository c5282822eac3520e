"""One squeue per cycle, backoff, and where a job's end is read, on a real private Slurm."""

import trio

from gpuplaned.slurm import Backoff, SlurmUnreachable, poll, read_ends

WAIT_S = 30.0


def sbatch(slurm, name, script):
    out = slurm.client("sbatch", "--parsable", "-J", name, "-o", "/dev/null", "--wrap", script)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


async def test_one_squeue_call_per_cycle_for_all_the_jobs(slurm):
    ids = [sbatch(slurm, f"gp-p{i}-1", "sleep 60") for i in range(5)]
    cli = slurm.cli()
    rows = await poll(cli, [*ids, "99999"])  # one that Slurm never had is simply absent
    assert cli.calls == 1
    assert sorted(rows, key=int) == ids
    assert {row.name for row in rows.values()} == {f"gp-p{i}-1" for i in range(5)}
    assert await poll(cli, []) == {} and cli.calls == 1  # nothing to ask: no call
    assert await poll(cli, ["99998", "99999"]) == {}  # squeue refuses ids it has none of; none known


async def test_an_ended_job_reads_its_exit_code_while_slurm_holds_it_and_then_is_known_to_none(slurm_factory):
    slurm = slurm_factory(min_job_age=2)  # purged within ~10 s of its end (slurmctld's purge interval)
    cli = slurm.cli()
    done = sbatch(slurm, "gp-e-1", "exit 7")
    killed = sbatch(slurm, "gp-k-1", "kill -9 $$")
    with trio.fail_after(WAIT_S):
        while True:
            rows = await poll(cli, [done, killed])
            if all(rows.get(i) and rows[i].state.ended for i in (done, killed)):
                break
            await trio.sleep(0.2)
    ends = await read_ends(cli, [done, killed])
    assert (ends[done].state.name, ends[done].exit_code.status, ends[done].source) == ("FAILED", 7, "scontrol")
    assert (ends[killed].state.name, ends[killed].exit_code.signal) == ("FAILED", 9)
    with trio.fail_after(WAIT_S):
        while await poll(cli, [done, killed]):
            await trio.sleep(0.5)
    # Gone from squeue and scontrol, and no sacct here: no source accounts for them, and
    # read_ends says nothing rather than guess (the runner then records LOST after a grace).
    assert await read_ends(cli, [done, killed]) == {}


async def test_a_running_job_has_no_end(slurm):
    cli = slurm.cli()
    job = sbatch(slurm, "gp-r-1", "sleep 60")
    assert await read_ends(cli, [job]) == {}


def test_backoff_doubles_while_squeue_fails_and_resets_on_an_answer():
    backoff = Backoff(period_s=5.0, max_s=60.0)
    assert [backoff.failed() for _ in range(5)] == [10.0, 20.0, 40.0, 60.0, 60.0]
    assert backoff.answered() == 5.0
    assert backoff.failed() == 10.0


async def test_a_cycle_under_a_stopped_controller_backs_off_and_recovers(slurm):
    """A watcher's loop never hangs on a stopped controller, waits longer while squeue
    fails, and is back to its period once it answers (the waits are returned, not slept)."""
    cli = slurm.cli(timeout_s=0.5)
    job = sbatch(slurm, "gp-w-1", "sleep 60")
    backoff = Backoff(period_s=2.0, max_s=16.0)

    async def cycle():
        try:
            rows = await poll(cli, [job])
        except SlurmUnreachable:
            return backoff.failed(), None
        return backoff.answered(), rows

    slurm.pause_controller()
    try:
        stopped = [await cycle() for _ in range(4)]
    finally:
        slurm.resume_controller()
    assert stopped == [(4.0, None), (8.0, None), (16.0, None), (16.0, None)]
    cli.timeout_s = 10.0
    wait, rows = await cycle()
    assert wait == 2.0 and list(rows) == [job]
