"""A sweep's trials on a Slurm node become one array job (issue 32 item 4), in virtual time:
the runner with the real Slurm backend against FakeSlurm, MemoryNodeLink as the server."""

from __future__ import annotations

import attrs
import trio
from runnerkit import job, start_runner

from gpuplaned.protocol.agent import ActiveJob, ArrayTask, JobSpecWire, SweepThrottle
from gpuplaned.slurm.arrays import expand_tasks, index_list
from gpuplaned.slurm.polling import poll
from gpuplaned.testing.launcher import FakeLauncher
from gpuplaned.testing.node_link import MemoryNodeLink
from gpuplaned.testing.slurm import FakeSlurm, SlurmScript

SWEEP = "swp_1"
HOUR = 3600.0


def trial(index: int, throttle: int = 2, attempt: int = 1) -> JobSpecWire:
    return attrs.evolve(job(f"trial_{index}", attempt, gpus=(), argv=("python", "train.py", f"--lr={index}")),
                        gpus=1, array=ArrayTask(SWEEP, index, throttle))


class Reports:
    """Every report of the node, by job, as they come."""

    def __init__(self, link) -> None:
        self.link = link
        self.by_job: dict[str, list] = {}
        self.changed = trio.Event()

    async def collect(self) -> None:
        while True:
            status = await self.link.next_report()
            self.by_job.setdefault(status.job_id, []).append(status)
            self.changed.set()
            self.changed = trio.Event()

    async def until(self, check) -> None:
        while not check():
            await self.changed.wait()

    def last(self, job_id: str):
        return self.by_job.get(job_id, [None])[-1]

    def ended(self, *job_ids: str) -> bool:
        return all(self.last(j) is not None and self.last(j).status in ("SUCCEEDED", "FAILED", "CANCELLED")
                   for j in job_ids)


async def node_with(nursery, tmp_path, fake, link=None):
    node = await start_runner(nursery, tmp_path, FakeLauncher(), link, slurm=fake)
    seen = Reports(node.link)
    nursery.start_soon(seen.collect)
    return node, seen


def sbatches(fake):
    return [command for command in fake.commands if command[0] == "sbatch"]


async def test_six_trials_are_one_throttled_array_each_with_its_own_end_and_a_raised_throttle(
        nursery, tmp_path, autojump_clock):
    scripts = {f"trial_{i}": SlurmScript(runs_s=100.0, exit_code=3 if i == 1 else 0) for i in range(6)}
    fake = FakeSlurm(scripts, gpus=8)
    node, seen = await node_with(nursery, tmp_path, fake)
    t0 = trio.current_time()
    for i in range(6):
        await node.link.dispatch(trial(i))
    trials = [f"trial_{i}" for i in range(6)]
    await seen.until(lambda: all(seen.last(t) is not None for t in trials))
    [sbatch] = sbatches(fake)  # one array for the six, gathered while they came
    assert "--array=0-5%2" in sbatch and "--job-name=gp-sweep-swp_1-0-1" in sbatch and "--gres=gpu:1" in sbatch
    [array_id] = fake.throttles
    # The two that run say so; the four Slurm holds wait with its reason, once each.
    assert sorted(seen.last(t).status for t in trials) == ["RUNNING"] * 2 + ["WAITING"] * 4
    waiting = [t for t in trials if seen.last(t).status == "WAITING"]
    assert {seen.last(t).message for t in waiting} == {"Slurm: JobArrayTaskLimit"}

    await trio.sleep(50.0 - (trio.current_time() - t0))
    cancelled = waiting[-1]  # a trial still pending in the array is cancelled as its task alone
    cancelled_index = int(cancelled.removeprefix("trial_"))
    await node.link.cancel(cancelled, 1)
    await seen.until(lambda: seen.ended(cancelled))
    assert seen.last(cancelled).status == "CANCELLED"
    assert ("scancel", "--full", f"{array_id}_{cancelled_index}") in fake.commands

    await trio.sleep(150.0 - (trio.current_time() - t0))
    assert fake.most_running[array_id] == 2  # never more than %2 so far
    await node.link.inbox.send(SweepThrottle(SWEEP, 3))
    await trio.sleep(1.0)
    assert ("scontrol", "update", f"JobId={array_id}", "ArrayTaskThrottle=3") in fake.commands
    others = [t for t in trials if t != cancelled]
    await seen.until(lambda: seen.ended(*others))
    assert fake.most_running[array_id] == 3  # the raised throttle let a third task run
    for t in others:  # each trial its own end, from its own task's exit.json
        statuses = [s.status for s in seen.by_job[t]]
        assert statuses[-2:] == ["RUNNING", "SUCCEEDED" if t != "trial_1" else "FAILED"], (t, statuses)
    assert seen.last("trial_1").exit_code == 3
    tasks = fake.array_tasks(array_id)
    assert [task.array_task for task in tasks] == list(range(6))
    assert [task.state for task in tasks] == ["COMPLETED", "FAILED", "COMPLETED", "COMPLETED", "COMPLETED",
                                              "COMPLETED"][:cancelled_index] + ["CANCELLED"] + (
        ["COMPLETED"] * (5 - cancelled_index))
    assert len(sbatches(fake)) == 1


async def test_an_arrays_lost_sbatch_answer_is_looked_up_by_its_name_one_array(nursery, tmp_path, autojump_clock):
    fake = FakeSlurm(default=SlurmScript(runs_s=30.0), gpus=4)
    fake.lose_sbatch_answers(1)
    node, seen = await node_with(nursery, tmp_path, fake)
    for i in range(3):
        await node.link.dispatch(trial(i, throttle=0))
    trials = [f"trial_{i}" for i in range(3)]
    await seen.until(lambda: seen.ended(*trials))
    assert {seen.last(t).status for t in trials} == {"SUCCEEDED"}
    assert len(sbatches(fake)) == 1 and len(fake.throttles) == 1 and len(fake.jobs) == 3
    assert "--array=0-2" in sbatches(fake)[0]


async def test_a_trial_dispatched_after_its_sweeps_array_was_submitted_makes_the_next_array(
        nursery, tmp_path, autojump_clock):
    fake = FakeSlurm(default=SlurmScript(runs_s=30.0), gpus=4)
    node, seen = await node_with(nursery, tmp_path, fake)
    await node.link.dispatch(trial(0, throttle=1))
    await node.link.dispatch(trial(1, throttle=1))
    await trio.sleep(5.0)
    await node.link.dispatch(trial(2, throttle=1))
    await seen.until(lambda: seen.ended("trial_0", "trial_1", "trial_2"))
    assert [next(a for a in s if a.startswith("--array=")) for s in sbatches(fake)] == ["--array=0-1%1",
                                                                                       "--array=2%1"]
    assert sorted(fake.most_running.values()) == [1, 1]


async def test_the_polls_of_an_arrays_tasks_read_the_pending_rest_record(nursery, tmp_path, autojump_clock):
    fake = FakeSlurm(default=SlurmScript(runs_s=100.0), gpus=4)
    await nursery.start(fake.simulate)
    script = "#!/bin/sh\n" + "".join(f"{i}) exec true ;;\n" for i in range(5))
    out = await fake.run("sbatch", "--parsable", "--job-name=a", "--array=0-4%2", stdin=script.encode())
    array_id = out.stdout.strip()
    rows = await poll(fake, [f"{array_id}_{i}" for i in range(5)])
    assert [rows[f"{array_id}_{i}"].state.name for i in range(5)] == ["RUNNING"] * 2 + ["PENDING"] * 3
    rest = rows[f"{array_id}_4"]
    assert (rest.display_id, rest.reason) == (f"{array_id}_[2-4%2]", "JobArrayTaskLimit")
    assert rest is rows[f"{array_id}_2"]


def test_task_lists_as_slurm_writes_them():
    assert index_list([5, 0, 1, 2, 9]) == "0-2,5,9"
    assert expand_tasks("4-9%2") == [4, 5, 6, 7, 8, 9]
    assert expand_tasks("[1,3-5%2]") == [1, 3, 4, 5]
    assert expand_tasks("0-6:3") == [0, 3, 6]


async def three_trials_then_the_runner_goes(nursery, tmp_path) -> tuple[FakeSlurm, str]:
    """Three trials of SWEEP as one array throttled to 1; the runner then goes, Slurm's array
    carries on: (the Slurm, the array's id)."""
    fake = FakeSlurm(default=SlurmScript(runs_s=100.0), gpus=4)
    await nursery.start(fake.simulate)
    async with trio.open_nursery() as first_life:
        node, seen = await node_with(first_life, tmp_path, fake)
        for i in range(3):
            await node.link.dispatch(trial(i, throttle=1))
        await seen.until(lambda: all(seen.last(f"trial_{i}") is not None for i in range(3)))
        first_life.cancel_scope.cancel()
    [array_id] = fake.throttles
    return fake, array_id


async def test_after_a_restart_each_trial_is_adopted_as_its_task_and_the_throttle_still_reaches_its_array(
        nursery, tmp_path, autojump_clock):
    fake, array_id = await three_trials_then_the_runner_goes(nursery, tmp_path)
    link = MemoryNodeLink(active=tuple(ActiveJob(f"trial_{i}", 1, f"run_trial_{i}_1") for i in range(3)))
    node, seen = await node_with(nursery, tmp_path, fake, link)
    await seen.until(lambda: all(seen.last(f"trial_{i}") is not None for i in range(3)))
    assert sorted(seen.last(f"trial_{i}").status for i in range(3)) == ["RUNNING", "WAITING", "WAITING"]
    await link.inbox.send(SweepThrottle(SWEEP, 3))  # the adopted array is the sweep's still
    await seen.until(lambda: seen.ended(*(f"trial_{i}" for i in range(3))))
    assert {seen.last(f"trial_{i}").status for i in range(3)} == {"SUCCEEDED"}
    assert ("scontrol", "update", f"JobId={array_id}", "ArrayTaskThrottle=3") in fake.commands
    assert fake.most_running[array_id] == 3  # once raised, the two held ran beside the first
    assert len(sbatches(fake)) == 1  # adopted, never submitted again


async def test_a_limit_changed_while_the_runner_was_away_reaches_the_array_on_adoption_once(
        nursery, tmp_path, autojump_clock):
    fake, array_id = await three_trials_then_the_runner_goes(nursery, tmp_path)  # before the new limit (3) was sent
    # No SweepThrottle this time: the hello's active jobs carry the sweep's limit as it is now.
    link = MemoryNodeLink(active=tuple(ActiveJob(f"trial_{i}", 1, f"run_trial_{i}_1", sweep_id=SWEEP,
                                                 sweep_max_parallel=3) for i in range(3)))
    node, seen = await node_with(nursery, tmp_path, fake, link)
    await seen.until(lambda: seen.ended(*(f"trial_{i}" for i in range(3))))
    assert {seen.last(f"trial_{i}").status for i in range(3)} == {"SUCCEEDED"}
    updates = [c for c in fake.commands if c[:2] == ("scontrol", "update")]
    assert updates == [("scontrol", "update", f"JobId={array_id}", "ArrayTaskThrottle=3")]  # once, not per trial
    assert fake.most_running[array_id] == 3


async def test_a_preempted_trial_is_requeued_by_slurm_as_its_task_and_that_task_alone_cancelled(
        nursery, tmp_path, autojump_clock):
    fake = FakeSlurm(default=SlurmScript(runs_s=HOUR, stops_after_s=2.0), gpus=4, requeue_delay_s=10.0)
    node, seen = await node_with(nursery, tmp_path, fake)  # [slurm] requeue = true (the default)
    for i in range(2):
        await node.link.dispatch(trial(i, throttle=0))
    await seen.until(lambda: all((s := seen.last(f"trial_{i}")) is not None and s.status == "RUNNING"
                                 for i in range(2)))
    [array_id] = fake.throttles
    [first, second] = fake.array_tasks(array_id)
    fake.preempt(first.slurm_id)
    await seen.until(lambda: seen.ended("trial_0"))
    assert (seen.last("trial_0").status, seen.last("trial_0").failure_reason) == ("FAILED", "PREEMPTED")
    assert (first.state, first.restarts) == ("CANCELLED", 1)  # Slurm's rerun of task 0, cancelled as A_0
    assert ("scancel", "--full", f"{array_id}_0") in fake.commands
    assert second.state == "RUNNING" and seen.last("trial_1").status == "RUNNING"  # the other task runs on
