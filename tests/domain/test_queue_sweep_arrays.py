"""A sweep's trials bound for a pooled node are not held by the sweep's max-parallel (issue 32
item 4): Slurm's array throttle (%K) holds them there, so one pass hands the node every queued
trial its max_jobs allows. Local nodes keep the hold."""

from __future__ import annotations

from gpuplaned.domain.groups import Group, Holds, SweepHold
from gpuplaned.domain.queue import place, pooled_room
from gpuplaned.domain.scheduling import Assignment, GpuFacts, NodeCapacity, QueuedJob
from gpuplaned.protocol.agent import PooledCapacity


def pooled(max_jobs=8, in_flight=0, labels=()):
    return NodeCapacity("nd_hpc", "hpc", tuple(labels), (), 0, 0, 0, pooled=PooledCapacity(4, max_jobs),
                        jobs_in_flight=in_flight)


def local(free=(0, 1, 2, 3)):
    return NodeCapacity("nd_box", "box", (), tuple(free), 4, 0, 2, gpus=tuple(GpuFacts(i) for i in range(4)))


def trials(n, sweep="swp_a", **kw):
    return [QueuedJob(f"t{i}", 1, sweep=sweep, **kw) for i in range(n)]


def limited(max_parallel=2, running=0, **kw):
    return Holds(sweeps={"swp_a": SweepHold("lr", max_parallel=max_parallel, running=running, **kw)})


def test_one_pass_hands_a_pooled_node_every_trial_its_max_jobs_allows_past_max_parallel():
    plan = place(trials(6), [pooled(max_jobs=5)], holds=limited(2))
    assert plan.assignments == [Assignment(f"t{i}", "nd_hpc", ()) for i in range(5)]
    assert plan.waiting == {"t5": "sweep max-parallel 2 reached"}  # no job slot left: the limit holds it


def test_a_local_node_keeps_the_sweeps_hold():
    plan = place(trials(4), [local()], holds=limited(2))
    assert [a.job_id for a in plan.assignments] == ["t0", "t1"]
    assert plan.waiting == {"t2": "sweep max-parallel 2 reached", "t3": "sweep max-parallel 2 reached"}


def test_with_both_trials_fill_the_local_node_up_to_the_limit_then_go_to_the_pooled_one():
    plan = place(trials(5), [local(), pooled(max_jobs=2)], holds=limited(2))
    assert [(a.job_id, a.node_id) for a in plan.assignments] == [
        ("t0", "nd_box"), ("t1", "nd_box"), ("t2", "nd_hpc"), ("t3", "nd_hpc")]
    assert plan.waiting == {"t4": "sweep max-parallel 2 reached"}


def test_a_paused_sweep_or_a_full_group_still_holds_its_trials_from_a_pooled_node():
    paused = place(trials(2), [pooled()], holds=Holds(sweeps={"swp_a": SweepHold("lr", paused=True)}))
    assert paused.assignments == [] and set(paused.waiting.values()) == {"sweep lr paused"}
    group = Holds(groups={"g": Group("g", parallel=1, running=1)},
                  sweeps={"swp_a": SweepHold("lr", max_parallel=1, running=1)})
    held = place(trials(2, group="g"), [pooled()], holds=group)
    assert held.assignments == [] and set(held.waiting.values()) == {"group g: 1 of 1 running"}


def test_a_trial_the_pooled_node_cannot_run_keeps_the_sweeps_reason():
    plan = place(trials(2, labels=("a100",)), [pooled()], holds=limited(1, running=1))
    assert plan.assignments == []
    assert set(plan.waiting.values()) == {"sweep max-parallel 1 reached"}


def test_a_full_sweep_is_settled_only_while_no_pooled_node_has_a_free_job_slot():
    holds = limited(2, running=2)
    assert holds.settled() == {"swp_a": "sweep max-parallel 2 reached"}
    assert holds.settled(pooled_room=True) == {}
    assert Holds(sweeps={"p": SweepHold("lr", paused=True)}).settled(pooled_room=True) == {"p": "sweep lr paused"}
    assert pooled_room([local(), pooled(max_jobs=2, in_flight=1)])
    assert not pooled_room([local(), pooled(max_jobs=2, in_flight=2)])
