"""The queue's group rules with plain values (``gpuplaned.domain.groups`` through
``queue.place``): a group's parallel limit counts its running jobs and those placed in the same
pass, a paused group or queue holds its jobs with a reason, a held job books nothing and
reserves no node, and a lifted hold's stale reason is cleared even when no slot is left."""

from __future__ import annotations

import pytest

from gpuplaned.domain.groups import Group, GroupGate, Holds, name_problem
from gpuplaned.domain.queue import is_hold, place
from gpuplaned.domain.scheduling import GpuFacts, NodeCapacity, QueuedJob


def node(free=(0, 1, 2, 3), *, max_cpu=4):
    return NodeCapacity("nd_a", "a", (), tuple(free), 4, 0, max_cpu, gpus=tuple(GpuFacts(i) for i in range(4)))


def job(job_id, group=None, gpu=1, reason=None):
    return QueuedJob(job_id, gpu, group=group, stored_reason=reason)


def test_a_group_at_its_limit_holds_the_rest_counting_jobs_placed_in_this_pass():
    holds = Holds(groups={"train": Group("train", parallel=2, running=1)})
    plan = place([job("j1", "train"), job("j2", "train"), job("j3", "train"), job("j4")], [node()], holds=holds)
    assert [a.job_id for a in plan.assignments] == ["j1", "j4"]  # one more for train, and j4 in no group
    assert plan.waiting == {"j2": "group train: 2 of 2 running", "j3": "group train: 2 of 2 running"}
    assert plan.reasons == {"j2": "group train: 2 of 2 running", "j3": "group train: 2 of 2 running"}


def test_a_paused_group_holds_its_jobs_and_lets_the_others_pass():
    holds = Holds(groups={"train": Group("train", paused=True, running=3), "eval": Group("eval", parallel=1)})
    plan = place([job("t1", "train"), job("e1", "eval"), job("e2", "eval")], [node()], holds=holds)
    assert [a.job_id for a in plan.assignments] == ["e1"]
    assert plan.waiting == {"t1": "group train paused", "e2": "group eval: 1 of 1 running"}


def test_a_paused_queue_holds_every_job():
    plan = place([job("j1"), job("j2", "train")], [node()], holds=Holds(queue_paused=True))
    assert plan.assignments == []
    assert plan.waiting == {"j1": "queue paused", "j2": "queue paused"}


def test_a_held_job_books_no_slot_and_reserves_no_node():
    # A held 4-GPU job would reserve the node if it were merely waiting for GPUs: held, it must not.
    holds = Holds(groups={"big": Group("big", paused=True)})
    plan = place([job("big1", "big", gpu=4), job("small", gpu=1)], [node(free=(0, 1))], holds=holds)
    assert [a.job_id for a in plan.assignments] == ["small"]
    assert plan.waiting == {"big1": "group big paused"}


def test_with_no_slot_left_held_jobs_still_get_their_reason_and_a_lifted_hold_is_cleared():
    holds = Holds(groups={"train": Group("train", paused=True)})
    queue = [job("full", gpu=4), job("t1", "train"), job("free", reason="group old paused"), job("x", reason=None)]
    plan = place(queue, [node(max_cpu=0)], holds=holds)
    assert [a.job_id for a in plan.assignments] == ["full"]
    assert plan.reasons == {"t1": "group train paused", "free": None}


def test_without_holds_a_pass_stops_reading_once_nothing_is_left():
    read = []

    def queue():
        for j in (job("a", gpu=4), job("b"), job("c")):
            read.append(j.job_id)
            yield j

    place(queue(), [node(max_cpu=0)])
    assert read == ["a", "b"]  # b found nothing left and the pass stopped there


def test_a_job_whose_group_has_no_row_has_no_limit():
    gate = GroupGate(Holds(groups={}))
    assert gate.held("unknown") is None and gate.held(None) is None


@pytest.mark.parametrize("name", ["train", "a", "sweep-1.lr_0", "A" * 64])
def test_group_names(name):
    assert name_problem(name) is None


@pytest.mark.parametrize("name", ["", "-x", "a b", "x/y", "A" * 65, "é"])
def test_bad_group_names_are_refused_saying_what_a_name_is(name):
    assert "is not a group name: it must be 1 to 64 letters" in name_problem(name)


def test_hold_reasons_are_told_apart_from_the_others():
    assert is_hold("queue paused") and is_hold("group train paused") and is_hold("group t: 1 of 1 running")
    assert not is_hold("after job_x (RUNNING)") and not is_hold("no node has a GPU model matching 'A100'")
