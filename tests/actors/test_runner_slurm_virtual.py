"""The runner with ``[node] runner = "slurm"`` in virtual time: the real Slurm backend
(gpuplaned/backends/slurm.py, gpuplaned/slurm/) against a FakeSlurm cluster whose jobs follow
their ``SlurmScript`` and whose "shim" writes real runtime.json/exit.json records, a
MemoryNodeLink as the server, ``autojump_clock``. Hours of Slurm in milliseconds."""

from __future__ import annotations

import sys

import attrs
import pytest
import trio
from runnerkit import SLURM, job, start_runner

from gpuplaned.domain.node_conditions import NODE_CONDITION_CLEARED, NODE_CONDITION_RAISED
from gpuplaned.launching.job_files import read_exit, read_runtime
from gpuplaned.protocol.agent import ActiveJob, JobSpecWire
from gpuplaned.slurm.batch_job import shim_argv, write_spec
from gpuplaned.slurm.commands import SlurmNotInstalled
from gpuplaned.slurm.parsing import parse_scontrol_jobs, parse_squeue
from gpuplaned.slurm.polling import poll, read_ends
from gpuplaned.slurm.submission import SubmitSpec, find_by_name, submit
from gpuplaned.testing.launcher import FakeLauncher
from gpuplaned.testing.node_link import MemoryNodeLink
from gpuplaned.testing.slurm import FakeSlurm, SlurmScript

PERIOD = SLURM["poll_interval_s"]
HOUR = 3600.0


def pooled(job_id: str = "job_1", attempt: int = 1, gpus: int = 1, **fields: object) -> JobSpecWire:
    """A job dispatched to a pooled node: a GPU count, no GPU index (Slurm places them)."""
    return attrs.evolve(job(job_id, attempt, gpus=()), gpus=gpus, **fields)


async def slurm_node(nursery, tmp_path, fake, link=None, **settings):
    return await start_runner(nursery, tmp_path, FakeLauncher(), link, slurm=fake, **settings)


async def reports(link, n):
    return [await link.next_report() for _ in range(n)]


def sbatches(fake):
    return [command for command in fake.commands if command[0] == "sbatch"]


# -- the fake itself speaks the text the real parsers read -------------------------------------


async def test_the_fake_answers_the_slurm_library_as_slurm_does(nursery, tmp_path, autojump_clock):
    fake = FakeSlurm(gpus=1, default=SlurmScript(runs_s=30.0, exit_code=3))
    await nursery.start(fake.simulate)
    spec = SubmitSpec("j", 1, ("true",), tmp_path, tmp_path, gpus=1, extra_args=("--time=5", "--requeue"))
    first = await submit(fake, spec)
    second = await submit(fake, SubmitSpec("k", 1, ("true",), tmp_path, tmp_path, gpus=1))
    rows = await poll(fake, [first.slurm_id, second.slurm_id])
    assert (rows[first.slurm_id].state.name, rows[first.slurm_id].nodes) == ("RUNNING", "fake-node1")
    assert (rows[second.slurm_id].state.name, rows[second.slurm_id].reason) == ("PENDING", "Resources")
    assert await find_by_name(fake, "gp-k-1") == [second.slurm_id]
    await trio.sleep(31.0)
    ends = await read_ends(fake, [first.slurm_id])
    assert (ends[first.slurm_id].state.name, ends[first.slurm_id].exit_code.status) == ("FAILED", 3)
    [detail] = parse_scontrol_jobs((await fake.run("scontrol", "-o", "show", "job", first.slurm_id)).stdout)
    assert (detail.name, detail.gpus_per_node, detail.fields["TimeLimit"]) == ("gp-j-1", 1, "00:05:00")
    assert parse_squeue((await fake.run("squeue", "-h", "-o", "%A|%F|%K|%i|%T|%r|%N|%j")).stdout)[0].name == "gp-k-1"
    assert await fake.version() == (22, 5, 8)
    with pytest.raises(SlurmNotInstalled):
        await fake.run("make")
    # What sbatch refuses, it refuses as sbatch does.
    with pytest.raises(Exception, match="Requested node configuration is not available"):
        await submit(fake, SubmitSpec("big", 1, ("true",), tmp_path, tmp_path, gpus=2))
    with pytest.raises(Exception, match="unrecognized option '--ntasks-per-node=1'"):
        await submit(fake, SubmitSpec("n", 1, ("true",), tmp_path, tmp_path, extra_args=("--ntasks-per-node=1",)))


async def attempt_spec(tmp_path, job_id, **fields):
    """An attempt as the backend submits it: its spec.json written, the batch script exec'ing our shim."""
    attempt_dir = tmp_path / job_id / "attempt-1"
    write_spec(attempt_dir, argv=["train"], cwd="/", env={}, job_id=job_id, attempt=1, timeout_s=None, grace_s=5.0)
    return attempt_dir, SubmitSpec(job_id, 1, shim_argv(sys.executable, attempt_dir), attempt_dir, tmp_path, **fields)


async def test_a_preempted_job_is_recorded_by_its_shim_and_requeued_or_ended_by_slurm(nursery, tmp_path,
                                                                                     autojump_clock):
    fake = FakeSlurm(default=SlurmScript(runs_s=HOUR, stops_after_s=2.0), requeue_delay_s=10.0)
    await nursery.start(fake.simulate)
    requeued_dir, spec = await attempt_spec(tmp_path, "rq", extra_args=("--requeue",))
    requeued = (await submit(fake, spec)).slurm_id
    ended_dir, spec = await attempt_spec(tmp_path, "np")
    ended = (await submit(fake, spec)).slurm_id
    assert read_runtime(requeued_dir, ("rq", 1)).slurm_job_id == requeued
    await trio.sleep(5.0)
    fake.preempt(requeued)
    fake.preempt(ended)
    await trio.sleep(3.0)
    for attempt_dir, job_id in ((requeued_dir, "rq"), (ended_dir, "np")):
        record = read_exit(attempt_dir, (job_id, 1))
        assert (record.reason, record.signal_name) == ("cancelled", "SIGTERM")
    [detail] = parse_scontrol_jobs((await fake.run("scontrol", "-o", "show", "job", requeued)).stdout)
    assert (detail.state.name, detail.reason, detail.restarts) == ("PENDING", "BeginTime", 1)
    assert (await read_ends(fake, [ended]))[ended].state.name == "PREEMPTED"
    await trio.sleep(10.0)  # the rerun: our shim does nothing, and touches no file
    assert (await read_ends(fake, [requeued]))[requeued].state.name == "COMPLETED"
    assert sorted(p.name for p in requeued_dir.iterdir()) == ["exit.json", "runtime.json", "spec.json"]


async def test_a_held_job_stays_pending(nursery, tmp_path, autojump_clock):
    fake = FakeSlurm()
    await nursery.start(fake.simulate)
    held = await submit(fake, SubmitSpec("h", 1, ("true",), tmp_path, tmp_path, extra_args=("-H",)))
    await trio.sleep(HOUR)
    row = (await poll(fake, [held.slurm_id]))[held.slurm_id]
    assert (row.state.name, row.reason) == ("PENDING", "JobHeldUser")


# -- a job's life ----------------------------------------------------------------------------------


async def test_a_job_waits_with_each_of_slurms_reasons_once_then_runs_and_fails_with_its_exit_code(
        nursery, tmp_path, autojump_clock):
    fake = FakeSlurm({"job_1": SlurmScript(pending=(("Priority", 20.0),), runs_s=100.0, exit_code=3)}, gpus=1)
    await nursery.start(fake.simulate)
    fake.submit_foreign("someone-elses", gpus=1, runs_s=40.0)  # holds the one GPU for 40 s
    node = await slurm_node(nursery, tmp_path, fake)
    t0 = trio.current_time()
    await node.link.dispatch(pooled(gpus=1))
    priority, resources, running, failed = await reports(node.link, 4)
    assert [(r.status, r.message) for r in (priority, resources)] == [
        ("WAITING", "Slurm: Priority"), ("WAITING", "Slurm: Resources")]  # one report a change of reason
    assert running.status == "RUNNING"
    assert 40.0 <= trio.current_time() - t0  # it ran once the other user's job had freed the GPU
    assert (failed.status, failed.failure_reason, failed.exit_code) == ("FAILED", "EXIT_CODE", 3)
    assert trio.current_time() - t0 <= 140.0 + 2 * PERIOD
    [sbatch] = sbatches(fake)
    assert "--job-name=gp-job_1-1" in sbatch and "--gres=gpu:1" in sbatch and "--export=NIL" in sbatch
    [ours] = fake.named("gp-job_1-1")
    assert (ours.state, ours.exit_code) == ("FAILED", (3, 0))
    assert node.handle.live == {} and (node.handle.started, node.handle.ended) == (1, 1)


async def test_a_cancel_while_slurm_holds_the_job_is_an_scancel(nursery, tmp_path, autojump_clock):
    fake = FakeSlurm(default=SlurmScript(pending=(("Priority", HOUR),)))
    node = await slurm_node(nursery, tmp_path, fake)
    await node.link.dispatch(pooled())
    assert (await node.link.next_report()).message == "Slurm: Priority"
    await node.link.cancel("job_1", 1)
    cancelled = await node.link.next_report()
    assert cancelled.status == "CANCELLED"
    assert [c for c in fake.commands if c[0] == "scancel"] == [("scancel", "--full", "1")]
    assert fake.jobs["1"].state == "CANCELLED" and fake.jobs["1"].started_at is None  # it never ran


async def test_a_cancel_while_the_job_runs_is_an_scancel_and_its_shim_records_it(nursery, tmp_path,
                                                                                 autojump_clock):
    fake = FakeSlurm(default=SlurmScript(runs_s=600.0, stops_after_s=3.0))
    node = await slurm_node(nursery, tmp_path, fake)
    await node.link.dispatch(pooled())
    assert (await node.link.next_report()).status == "RUNNING"
    await trio.sleep(10.0)
    await node.link.cancel("job_1", 1)
    cancelled = await node.link.next_report()
    assert (cancelled.status, cancelled.signal) == ("CANCELLED", "SIGTERM")  # from the shim's exit.json
    assert fake.count("scancel") == 1
    assert (fake.jobs["1"].state, fake.free_gpus) == ("CANCELLED", fake.gpus)


async def test_a_job_that_scancels_sigterm_kills_before_its_shim_does_is_still_cancelled(nursery, tmp_path,
                                                                                        autojump_clock):
    fake = FakeSlurm(default=SlurmScript(runs_s=600.0, stops_after_s=3.0, term_kills_first=True))
    node = await slurm_node(nursery, tmp_path, fake)
    await node.link.dispatch(pooled())
    assert (await node.link.next_report()).status == "RUNNING"
    await trio.sleep(10.0)
    await node.link.cancel("job_1", 1)
    cancelled = await node.link.next_report()  # exit.json says "signaled SIGTERM": we asked, so a cancel
    assert (cancelled.status, cancelled.signal, cancelled.failure_reason) == ("CANCELLED", "SIGTERM", None)


async def test_a_job_past_its_timeout_is_stopped_by_its_shim_before_slurms_limit(nursery, tmp_path,
                                                                                 autojump_clock):
    fake = FakeSlurm(default=SlurmScript(runs_s=HOUR, stops_after_s=1.0))
    node = await slurm_node(nursery, tmp_path, fake)
    t0 = trio.current_time()
    await node.link.dispatch(pooled(timeout_s=90.0))
    running, failed = await reports(node.link, 2)
    assert (failed.status, failed.failure_reason, failed.message) == ("FAILED", "TIMEOUT", "timed out")
    assert 91.0 <= trio.current_time() - t0 <= 91.0 + PERIOD
    [sbatch] = sbatches(fake)
    assert "--time=3" in sbatch  # Slurm's limit is the backstop: the timeout, its grace, a minute more


# -- sbatch's answer lost, Slurm down ----------------------------------------------------------------


async def test_sbatch_whose_answer_was_lost_makes_exactly_one_slurm_job(nursery, tmp_path, autojump_clock):
    fake = FakeSlurm(default=SlurmScript(runs_s=30.0))
    fake.lose_sbatch_answers(1)  # slurmctld made the job; its answer never came back
    node = await slurm_node(nursery, tmp_path, fake)
    await node.link.dispatch(pooled())
    assert [r.status for r in await reports(node.link, 2)] == ["RUNNING", "SUCCEEDED"]
    assert len(fake.named("gp-job_1-1")) == 1 and len(fake.jobs) == 1
    assert len(sbatches(fake)) == 1  # looked up by its name, never submitted again


async def test_sbatch_while_slurm_is_down_waits_as_a_node_condition_and_makes_one_job(nursery, tmp_path,
                                                                                      autojump_clock):
    fake = FakeSlurm(default=SlurmScript(runs_s=30.0))
    node = await slurm_node(nursery, tmp_path, fake)
    fake.pause()
    await node.link.dispatch(pooled())
    await trio.sleep(120.0)
    assert "slurm_unreachable" in node.shared.conditions.current()
    assert fake.jobs == {}
    fake.resume()
    assert [r.status for r in await reports(node.link, 2)] == ["RUNNING", "SUCCEEDED"]
    assert len(fake.jobs) == 1 and node.shared.conditions.current() == {}


async def test_slurm_down_mid_run_is_a_node_condition_and_the_job_ends_right(nursery, tmp_path, autojump_clock):
    fake = FakeSlurm({"job_a": SlurmScript(runs_s=60.0, exit_code=0), "job_b": SlurmScript(runs_s=300.0,
                                                                                            exit_code=2)})
    node = await slurm_node(nursery, tmp_path, fake)
    await node.link.dispatch(pooled("job_a"))
    await node.link.dispatch(pooled("job_b"))
    assert [r.status for r in await reports(node.link, 2)] == ["RUNNING", "RUNNING"]
    await trio.sleep(20.0)
    fake.pause()  # slurmctld stopped: every command hangs until its timeout
    # job_a ends meanwhile: its shim's exit.json tells, Slurm or not.
    a_done = await node.link.next_report()
    assert (a_done.job_id, a_done.status) == ("job_a", "SUCCEEDED")
    await trio.sleep(120.0)
    assert list(node.shared.conditions.current()) == ["slurm_unreachable"]
    assert "job_b" in node.handle.live  # it carries on
    fake.resume()
    b_done = await node.link.next_report()
    assert (b_done.job_id, b_done.status, b_done.exit_code, b_done.failure_reason) == ("job_b", "FAILED", 2,
                                                                                      "EXIT_CODE")
    assert node.shared.conditions.current() == {}
    changes = [(e.type, e.context["name"]) for e in node.shared.conditions.pending()]
    assert changes == [(NODE_CONDITION_RAISED, "slurm_unreachable"), (NODE_CONDITION_CLEARED, "slurm_unreachable")]
    await trio.sleep(600.0)
    said = {j: [r.status for r in node.link.reports if r.job_id == j] for j in ("job_a", "job_b")}
    assert said == {"job_a": ["RUNNING", "SUCCEEDED"], "job_b": ["RUNNING", "FAILED"]}  # nothing LOST or twice
    assert len(fake.jobs) == 2


async def test_a_job_that_starts_just_before_slurm_stops_answering_is_reported_running_from_its_files(
        nursery, tmp_path, autojump_clock):
    fake = FakeSlurm(default=SlurmScript(pending=(("Priority", 5.0),), runs_s=600.0))
    node = await slurm_node(nursery, tmp_path, fake)
    await node.link.dispatch(pooled())
    await trio.sleep(PERIOD)  # a poll round sees it pending
    while not any(j.state == "RUNNING" for j in fake.jobs.values()):
        await trio.sleep(0.001)
    fake.pause()  # between its start and the next round: no squeue will say it runs
    with trio.fail_after(60.0):
        while (running := await node.link.next_report()).status == "WAITING":
            pass
    assert (running.job_id, running.status) == ("job_1", "RUNNING")
    assert "slurm_unreachable" in node.shared.conditions.current()


# -- a job that leaves squeue without its exit.json ----------------------------------------------------


async def test_a_job_whose_shim_left_no_exit_record_ends_as_scontrol_says(nursery, tmp_path, autojump_clock):
    fake = FakeSlurm(default=SlurmScript(runs_s=50.0, exit_code=3, exit_record=False))
    node = await slurm_node(nursery, tmp_path, fake)
    await node.link.dispatch(pooled())
    running, failed = await reports(node.link, 2)
    assert (failed.status, failed.failure_reason, failed.exit_code) == ("FAILED", "EXIT_CODE", 3)
    assert any(c[0] == "scontrol" for c in fake.commands) and fake.count("sacct") == 0


async def test_a_job_gone_from_slurm_with_no_record_anywhere_is_lost_only_after_lost_after_s(
        nursery, tmp_path, autojump_clock):
    fake = FakeSlurm(default=SlurmScript(runs_s=50.0, exit_record=False), min_job_age_s=0.0)
    node = await slurm_node(nursery, tmp_path, fake, lost_after_s=100.0)
    await node.link.dispatch(pooled())
    assert (await node.link.next_report()).status == "RUNNING"
    with trio.fail_after(600.0):  # trio time: the backend's grace must pass in it
        lost = await node.link.next_report()
    gone_at = fake.jobs["1"].ended_at
    assert (lost.status, lost.failure_reason) == ("FAILED", "LOST")
    assert "neither scontrol nor sacct" in lost.message
    assert 100.0 <= trio.current_time() - gone_at <= 100.0 + 2 * PERIOD
    assert fake.count("sacct") >= 1  # asked, and it has no accounting


async def test_a_job_gone_from_squeue_ends_as_sacct_says_where_there_is_accounting(nursery, tmp_path,
                                                                                  autojump_clock):
    fake = FakeSlurm(default=SlurmScript(runs_s=50.0, exit_code=4, exit_record=False), min_job_age_s=0.0,
                     accounting=True)
    node = await slurm_node(nursery, tmp_path, fake)
    await node.link.dispatch(pooled())
    running, failed = await reports(node.link, 2)
    assert (failed.status, failed.failure_reason, failed.exit_code) == ("FAILED", "EXIT_CODE", 4)


# -- adoption after a restart ----------------------------------------------------------------------


async def test_after_a_restart_a_pending_a_running_and_an_ended_job_are_adopted(nursery, tmp_path,
                                                                                autojump_clock):
    fake = FakeSlurm({"job_p": SlurmScript(pending=(("Priority", HOUR),)), "job_r": SlurmScript(runs_s=300.0),
                      "job_e": SlurmScript(runs_s=20.0, exit_code=5)})
    await nursery.start(fake.simulate)
    async with trio.open_nursery() as first_life:
        node = await slurm_node(first_life, tmp_path, fake)
        for job_id in ("job_p", "job_r", "job_e"):
            await node.link.dispatch(pooled(job_id))
        first = {r.job_id: r.status for r in await reports(node.link, 3)}
        assert first == {"job_p": "WAITING", "job_r": "RUNNING", "job_e": "RUNNING"}
        first_life.cancel_scope.cancel()  # the runner goes; Slurm's jobs carry on
    await trio.sleep(60.0)  # job_e ends meanwhile
    link = MemoryNodeLink(active=tuple(ActiveJob(j, 1, f"run_{j}_1") for j in ("job_p", "job_r", "job_e")))
    node = await slurm_node(nursery, tmp_path, fake, link)
    adopted = {r.job_id: r for r in await reports(link, 3)}
    assert (adopted["job_p"].status, adopted["job_p"].message) == ("WAITING", "Slurm: Priority")
    assert adopted["job_r"].status == "RUNNING" and "job_r" in node.handle.live
    assert (adopted["job_e"].status, adopted["job_e"].exit_code) == ("FAILED", 5)
    assert (await link.next_report()).job_id == "job_r"  # its end, as it comes
    await link.cancel("job_p", 1)
    assert ((await link.next_report()).job_id, fake.jobs["1"].state) == ("job_p", "CANCELLED")
    assert len(sbatches(fake)) == 3  # adopted, never submitted again


# -- the polling cost ----------------------------------------------------------------------------------


async def test_a_hundred_queued_jobs_cost_one_squeue_a_poll_round(nursery, tmp_path, autojump_clock):
    fake = FakeSlurm(default=SlurmScript(pending=(("Priority", 10 * HOUR),)))
    node = await slurm_node(nursery, tmp_path, fake)
    for i in range(100):
        await node.link.dispatch(pooled(f"job_{i}"))
    waiting = await reports(node.link, 100)
    assert {r.message for r in waiting} == {"Slurm: Priority"}
    before = list(fake.commands)
    await trio.sleep(60.0)
    minute = fake.commands[len(before):]
    squeues = [c for c in minute if c[0] == "squeue"]
    assert len(minute) == len(squeues)  # nothing but squeue while they wait
    assert abs(len(squeues) - 60.0 / PERIOD) <= 1  # one a round (every PERIOD s), for all hundred jobs
    assert all(len(c[c.index("-j") + 1].split(",")) == 100 for c in squeues)


async def test_a_preempted_and_requeued_job_is_reported_preempted_and_slurms_rerun_cancelled(
        nursery, tmp_path, autojump_clock):
    fake = FakeSlurm(default=SlurmScript(runs_s=3600.0, stops_after_s=2.0))
    node = await slurm_node(nursery, tmp_path, fake)  # [slurm] requeue = true (the default): --requeue
    await node.link.dispatch(pooled())
    assert (await node.link.next_report()).status == "RUNNING"
    await trio.sleep(27.0)  # 27 + 2 s of stopping: the shim's record lands between a look and a poll
    fake.preempt("1")
    preempted = await node.link.next_report()
    assert (preempted.status, preempted.failure_reason) == ("FAILED", "PREEMPTED")
    assert fake.jobs["1"].state == "CANCELLED" and fake.jobs["1"].restarts == 1  # the rerun never ran


async def test_a_preempted_job_without_requeue_is_reported_preempted(nursery, tmp_path, autojump_clock):
    fake = FakeSlurm(default=SlurmScript(runs_s=3600.0, stops_after_s=2.0))
    node = await slurm_node(nursery, tmp_path, fake, requeue=False)
    await node.link.dispatch(pooled())
    assert (await node.link.next_report()).status == "RUNNING"
    await trio.sleep(30.0)
    fake.preempt("1")
    preempted = await node.link.next_report()
    assert (preempted.status, preempted.failure_reason) == ("FAILED", "PREEMPTED")
    assert fake.jobs["1"].state == "PREEMPTED"
