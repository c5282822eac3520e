"""``queue.place``'s ``held_rest``: once no slot is left, a pass reads only the jobs a hold may
concern (their group or sweep holds now, or their stored reason is a hold) and decides for them
exactly what reading on through the whole queue decides; a sweep whose limit does not bind, or
a group that holds nothing, costs a pass no read of the rest of the queue."""

from __future__ import annotations

import random

import pytest

from gpuplaned.domain.groups import Group, Holds, SweepHold
from gpuplaned.domain.queue import is_hold, place
from gpuplaned.domain.scheduling import GpuFacts, NodeCapacity, QueuedJob


def node(free=(0, 1), *, max_cpu=1):
    return NodeCapacity("nd_a", "a", (), tuple(free), 2, 0, max_cpu, gpus=tuple(GpuFacts(i) for i in range(2)))


def held_rest_of(queue, read):
    """What the store's ``job_rows.queued_held`` gives, over a list: the jobs of the groups or
    sweeps named, and those with a hold as their stored reason, but a said sweep's trials that
    show its reason (here all of the queue's; the pass skips those it has seen)."""
    def rest(groups, sweeps, said):
        found = [j for j in queue if (j.group in groups or j.sweep in sweeps
                                      or (j.stored_reason is not None and is_hold(j.stored_reason)))
                 and not (j.sweep in said and j.stored_reason == said[j.sweep])]
        read.extend(j.job_id for j in found)
        return found
    return rest


def counted(queue, read):
    for j in queue:
        read.append(j.job_id)
        yield j


def test_a_sweep_whose_limit_does_not_bind_costs_no_read_of_the_rest():
    holds = Holds(sweeps={"swp_a": SweepHold("lr", max_parallel=1000, running=0)})
    queue = [QueuedJob(f"t{i}", 0, sweep="swp_a", submitted_at=i) for i in range(500)]
    read, rest_read = [], []
    plan = place(counted(queue, read), [node(free=(), max_cpu=1)], holds=holds, held_rest=held_rest_of(queue, rest_read))
    assert [a.job_id for a in plan.assignments] == ["t0"]
    assert read == ["t0", "t1"] and rest_read == []  # t1 found no slot left; no trial is held
    assert plan.reasons == {} and plan.waiting == {}


def test_a_full_sweeps_trials_after_the_last_slot_still_get_their_reason():
    holds = Holds(sweeps={"swp_a": SweepHold("lr", max_parallel=2, running=1)},
                  groups={"g": Group("g", parallel=1, running=1), "idle": Group("idle")})
    queue = ([QueuedJob("t0", 0, sweep="swp_a"), QueuedJob("cpu", 0), QueuedJob("late", 0)]
             + [QueuedJob(f"t{i}", 0, sweep="swp_a", stored_reason="sweep max-parallel 2 reached") for i in (1, 2)]
             + [QueuedJob("t3", 0, sweep="swp_a"), QueuedJob("g1", 0, group="g"),
                QueuedJob("i1", 0, group="idle", stored_reason="group idle paused")])
    read = []
    plan = place(queue, [node(free=(), max_cpu=1)], holds=holds, held_rest=held_rest_of(queue, read))
    assert [a.job_id for a in plan.assignments] == ["t0"]
    assert plan.reasons == {"t3": "sweep max-parallel 2 reached", "g1": "group g: 1 of 1 running", "i1": None}
    assert set(read) == {"t0", "t1", "t2", "t3", "g1", "i1"}  # "cpu" and "late": nothing to say, not read


def _random_case(rng):
    groups = {name: Group(name, parallel=rng.choice([None, 1, 2]), paused=rng.random() < 0.2,
                          running=rng.randint(0, 2)) for name in ("g1", "g2")}
    sweeps = {name: SweepHold(name, paused=rng.random() < 0.2, max_parallel=rng.choice([None, 1, 2, 50]),
                              running=rng.randint(0, 2)) for name in ("s1", "s2")}
    holds = Holds(queue_paused=rng.random() < 0.1, groups=groups, sweeps=sweeps)
    reasons = [None, None, "queue paused", "group g1 paused", "group g2: 1 of 1 running", "sweep s1 paused",
               "sweep max-parallel 2 reached", "no GPU free"]
    queue = [QueuedJob(f"j{i:03d}", rng.choice([0, 0, 1, 2]), group=rng.choice([None, "g1", "g2", "gone"]),
                       sweep=rng.choice([None, "s1", "s2", "s3"]), stored_reason=rng.choice(reasons),
                       submitted_at=i) for i in range(rng.randint(0, 40))]
    return queue, [node(free=tuple(range(rng.randint(0, 2))), max_cpu=rng.randint(0, 3))], holds


@pytest.mark.parametrize("seed", range(300))
def test_the_held_rest_decides_what_reading_on_through_the_queue_decides(seed):
    queue, nodes, holds = _random_case(random.Random(seed))
    whole = place(queue, nodes, holds=holds)
    read = []
    held = place(queue, nodes, holds=holds, held_rest=held_rest_of(queue, read))
    assert (held.assignments, held.reasons) == (whole.assignments, whole.reasons)
    assert held.waiting.items() <= whole.waiting.items()  # the jobs read (a said sweep's trials are not)
