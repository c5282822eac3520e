"""The queue's sweep holds with plain values (``gpuplaned.domain.groups`` through ``queue.place``):
a sweep's max-parallel counts its trials on a node and those placed in the same pass, a paused
sweep holds its trials, and both say so as the trials' wait reason."""

from __future__ import annotations

import attrs

from gpuplaned.domain.groups import Group, Holds, SweepHold
from gpuplaned.domain.queue import is_hold, place
from gpuplaned.domain.scheduling import GpuFacts, NodeCapacity, QueuedJob


def node(free=(0, 1, 2, 3), *, max_cpu=8):
    return NodeCapacity("nd_a", "a", (), tuple(free), 4, 0, max_cpu, gpus=tuple(GpuFacts(i) for i in range(4)))


def trial(job_id, sweep=None, group=None, gpu=0, reason=None):
    return QueuedJob(job_id, gpu, group=group, sweep=sweep, stored_reason=reason)


def test_max_parallel_counts_running_trials_and_those_placed_in_this_pass():
    holds = Holds(sweeps={"swp_a": SweepHold("lr", max_parallel=3, running=1)})
    queue = [trial(f"t{i}", "swp_a") for i in range(5)] + [trial("other"), trial("b0", "swp_b")]
    plan = place(queue, [node()], holds=holds)
    assert [a.job_id for a in plan.assignments] == ["t0", "t1", "other", "b0"]  # swp_b holds nothing
    assert plan.waiting == {f"t{i}": "sweep max-parallel 3 reached" for i in (2, 3, 4)}


def test_a_paused_sweep_holds_its_trials_and_says_so_before_its_groups_limit():
    holds = Holds(groups={"g": Group("g", parallel=1, running=1)},
                  sweeps={"swp_a": SweepHold("lr", paused=True), "swp_b": SweepHold("bs", max_parallel=1)})
    plan = place([trial("a0", "swp_a", "g"), trial("b0", "swp_b", "g"), trial("b1", "swp_b")], [node()], holds=holds)
    assert [a.job_id for a in plan.assignments] == ["b1"]
    assert plan.waiting == {"a0": "sweep lr paused", "b0": "group g: 1 of 1 running"}


def test_a_paused_queue_comes_first():
    plan = place([trial("a0", "swp_a")], [node()],
                 holds=Holds(queue_paused=True, sweeps={"swp_a": SweepHold("lr", paused=True)}))
    assert plan.waiting == {"a0": "queue paused"}


def test_with_no_slot_left_a_held_trial_still_gets_its_reason_and_a_lifted_one_is_cleared():
    holds = Holds(sweeps={"swp_a": SweepHold("lr", max_parallel=1, running=1)})
    queue = [trial("full", gpu=4), trial("a1", "swp_a"), trial("was", "swp_b", reason="sweep bs paused")]
    plan = place(queue, [node(max_cpu=0)], holds=holds)
    assert [a.job_id for a in plan.assignments] == ["full"]
    assert plan.reasons == {"a1": "sweep max-parallel 1 reached", "was": None}


def test_sweep_reasons_are_holds():
    assert is_hold("sweep max-parallel 4 reached") and is_hold("sweep lr paused")


def test_settled_holds_are_those_that_hold_every_trial_for_the_whole_pass():
    holds = Holds(sweeps={"p": SweepHold("lr", paused=True), "full": SweepHold("bs", max_parallel=2, running=2),
                          "room": SweepHold("wd", max_parallel=2, running=1)})
    assert holds.settled() == {"p": "sweep lr paused", "full": "sweep max-parallel 2 reached"}
    assert attrs.evolve(holds, queue_paused=True).settled() == {}  # the queue's pause says it first
