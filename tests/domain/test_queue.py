"""The queue's decisions with plain values: its one order, a newcomer's place in it, admission,
and a pass's placements, checked by example and, with hypothesis, over many queues and
nodes: no slot booked twice, none beyond a node's free slots, the queue's order kept."""

from __future__ import annotations

from collections import Counter, defaultdict

import attrs
import hypothesis
import pytest
from hypothesis import strategies as st

from gpuplaned.domain.queue import ORDER, Placement, admit, as_queued, in_line, order_key, place, refusal
from gpuplaned.domain.scheduling import (
    Assignment,
    GpuFacts,
    NodeCapacity,
    QueuedJob,
    could_run,
    gpu_suits,
    waiting_reason,
)
from gpuplaned.protocol.errors import ApiError
from gpuplaned.protocol.job_wire import JobSpec

# Derandomized: the same examples on every run (no flaky failure), and no time limits, which a
# loaded machine could trip.
SETTINGS = hypothesis.settings(max_examples=300, derandomize=True, database=None, deadline=None,
                               suppress_health_check=[hypothesis.HealthCheck.too_slow])


def node(name, free=(0, 1), total=None, *, cpu=0, max_cpu=2, labels=(), **kw):
    total = total if total is not None else len(free)
    return NodeCapacity(f"nd_{name}", name, tuple(labels), tuple(free), total, cpu, max_cpu,
                        gpus=tuple(GpuFacts(i, "RTX 4090", 24564) for i in range(total)), **kw)


def job(job_id, gpu=1, *, priority=0, at=0, reason=None, **kw):
    return QueuedJob(job_id, gpu, priority=priority, submitted_at=at, stored_reason=reason, **kw)


# --- the order ---------------------------------------------------------------


def test_the_order_is_priority_then_submit_time_then_id():
    assert [(k.field, k.descending) for k in ORDER] == [("priority", True), ("submitted_at", False), ("job_id", False)]
    jobs = [job("job_b", priority=0, at=5), job("job_a", priority=0, at=5), job("job_c", priority=3, at=9),
            job("job_d", priority=0, at=1), job("job_e", priority=-2, at=0)]
    assert [j.job_id for j in sorted(jobs, key=order_key)] == ["job_c", "job_d", "job_a", "job_b", "job_e"]


@SETTINGS
@hypothesis.given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 5), st.text("abc", min_size=1, max_size=3)),
                           max_size=30, unique_by=lambda t: t[2]))
def test_sorting_by_the_key_puts_higher_priority_first_and_older_first_within_one(rows):
    ordered = sorted((job(i, priority=p, at=t) for p, t, i in rows), key=order_key)
    for ahead, behind in zip(ordered, ordered[1:]):
        assert ahead.priority >= behind.priority
        if ahead.priority == behind.priority:
            assert (ahead.submitted_at, ahead.job_id) < (behind.submitted_at, behind.job_id)


def test_a_newcomer_goes_behind_its_priority_and_higher_and_ahead_of_lower():
    queued = sorted([job("job_1", priority=5, at=1), job("job_2", priority=0, at=2), job("job_3", priority=0, at=3),
                     job("job_4", priority=-1, at=0)], key=order_key)
    line, place_ = in_line(queued, job("planned", priority=0, at=3))
    assert [j.job_id for j in line] == ["job_1", "job_2", "job_3", "planned", "job_4"] and place_ == 4
    line, place_ = in_line(queued, job("planned", priority=9, at=10))
    assert line[0].job_id == "planned" and place_ == 1
    assert in_line([], job("planned"))[1] == 1


@SETTINGS
@hypothesis.given(st.lists(st.integers(-3, 3), max_size=20), st.integers(-3, 3))
def test_a_newcomer_submitted_last_lands_where_sorting_puts_it(priorities, priority):
    queued = sorted((job(f"job_{i:02}", priority=p, at=i) for i, p in enumerate(priorities)), key=order_key)
    newcomer = job("job_99", priority=priority, at=len(priorities))
    line, position = in_line(queued, newcomer)
    assert line == sorted([*queued, newcomer], key=order_key)
    assert position == sum(1 for p in priorities if p >= priority) + 1


# --- admission ---------------------------------------------------------------


def _spec(**kw):
    return JobSpec(**{"name": "j", "command": ("true",), "cwd": "/", "env": {}, "gpu": 1, **kw})


def test_admission_refuses_what_no_known_node_could_ever_run_naming_why():
    nodes = [node("a", total=2), node("b", free=(), total=1, max_cpu=0, labels=("cpu",))]
    cases = [
        (_spec(node="zz"), "node: no node named 'zz'", {"field": "node", "nodes": ["a", "b"]}),
        (_spec(gpu=3), "gpu: the job asks for 3 GPU(s) but the largest matching node has 2", {"field": "gpu"}),
        (_spec(gpu=2, labels=("cpu",), node="b"), "the largest matching node has 1", None),
        (_spec(gpu=0, labels=("cpu",)), "no matching node runs CPU jobs", {"field": "gpu"}),
    ]
    for spec, message, details in cases:
        refused = refusal(as_queued(spec, "new"), nodes)
        assert refused is not None and message in refused.message, spec
        if details:
            assert details.items() <= refused.details.items()
        with pytest.raises(ApiError) as raised:
            admit(as_queued(spec, "new"), nodes)
        assert raised.value.message == refused.message
    assert refusal(as_queued(_spec(gpu=2), "new"), nodes) is None


def test_admission_queues_a_gpu_constraint_no_node_meets_with_its_reason():
    nodes = [node("a", total=2)]
    assert admit(as_queued(_spec(gpu_model="A100"), "new"), nodes) == (
        "no node has 1 GPU(s) whose model contains 'A100' (the most on one matching node: 0)")
    assert admit(as_queued(_spec(), "new"), nodes) is None
    drained = [node("a", total=2, drained=True)]
    assert admit(as_queued(_spec(), "new"), drained) == "every node that could run it is drained: a"


def test_as_queued_keeps_what_the_queue_orders_and_places_by():
    spec = _spec(gpu=2, labels=("x",), node="a", gpu_model="a100", min_gpu_memory_mb=4, placement="spread",
                 priority=7)
    assert as_queued(spec, "job_1", 123) == QueuedJob("job_1", 2, ("x",), "a", "a100", 4, "spread", 7, 123)


# --- a pass: examples --------------------------------------------------------


def test_a_pass_reads_the_queue_only_until_nothing_is_left_to_give():
    read = []

    def lazily():
        for i in range(100):
            read.append(i)
            yield job(f"job_{i:03}")

    plan = place(lazily(), [node("a", free=(0, 1), max_cpu=0)])
    assert [a.job_id for a in plan.assignments] == ["job_000", "job_001"]
    assert read == [0, 1, 2]  # the third is read, finds nothing left, and the pass stops


def test_a_pass_says_which_queue_reasons_changed():
    nodes = [node("a", free=(0,), total=1), node("d", free=(0,), total=1, labels=("d",), drained=True)]
    drained = "every node that could run it is drained: d"
    jobs = [job("placed", reason="stale words"), job("busy", reason=None), job("still", labels=("d",), reason=drained),
            job("newly", labels=("d",), reason=None), job("freed", reason="old words")]
    plan = place(jobs, nodes)
    assert plan.assignments == [Assignment("placed", "nd_a", (0,))]
    assert plan.waiting == {"busy": None, "still": drained, "newly": drained, "freed": None}
    assert plan.reasons == {"placed": None, "newly": drained, "freed": None}
    assert place([job("x", reason=None)], nodes) == Placement([Assignment("x", "nd_a", (0,))], {}, {})


# --- a pass: properties ------------------------------------------------------

LABELS = ("a100", "big")
MODELS = (("RTX 4090", 24564), ("NVIDIA A100-SXM4-80GB", 81920), (None, None))


@st.composite
def cluster(draw):
    nodes = []
    for i in range(draw(st.sampled_from((1, 2, 3, 4)))):
        total = draw(st.integers(0, 4))
        free = [g for g in range(total) if draw(st.sampled_from((True, True, False)))]
        nodes.append(NodeCapacity(
            f"nd_{i}", f"n{i}", draw(st.sampled_from(((), (), ("a100",), ("a100", "big")))), tuple(free), total,
            draw(st.integers(0, 2)), draw(st.integers(0, 3)), online=draw(st.sampled_from((True,) * 5 + (False,))),
            accepting=draw(st.sampled_from((True,) * 5 + (False,))), drained=draw(st.sampled_from((False,) * 5 + (True,))),
            gpus=tuple(GpuFacts(g, *draw(st.sampled_from(MODELS))) for g in range(total))))
    return nodes


@st.composite
def needs(draw):
    """What a job asks for; a queue draws from a few of these, so equal jobs are common."""
    return {"gpu": draw(st.sampled_from((0, 1, 1, 2, 3))), "labels": draw(st.sampled_from(((), (), ("a100",), ("big",)))),
            "node": draw(st.sampled_from((None, None, None, "n0", "n1", "n7"))),
            "gpu_model": draw(st.sampled_from((None, None, None, "a100", "4090"))),
            "min_gpu_memory_mb": draw(st.sampled_from((None, None, None, 40000))),
            "placement": draw(st.sampled_from((None, "pack", "spread")))}


@st.composite
def queues(draw):
    kinds = draw(st.lists(needs(), min_size=1, max_size=4))
    picks = draw(st.lists(st.integers(0, len(kinds) - 1), min_size=3, max_size=25))
    return [QueuedJob(f"job_{i:02}", **kinds[k]) for i, k in enumerate(picks)]


def _by_id(jobs):
    return {j.job_id: j for j in jobs}


@SETTINGS
@hypothesis.given(cluster(), queues(), st.sampled_from(("pack", "spread")))
def test_a_pass_never_books_a_slot_twice_nor_beyond_a_nodes_free_slots(nodes, jobs, default):
    plan = place(jobs, nodes, default)
    capacity = {n.node_id: n for n in nodes}
    booked = [(a.node_id, i) for a in plan.assignments for i in a.gpu_indexes]
    assert len(booked) == len(set(booked)), "a slot booked twice"
    for node_id, index in booked:
        assert index in capacity[node_id].free_gpus, "a slot that was not free"
    cpu_jobs = Counter(a.node_id for a in plan.assignments if not a.gpu_indexes and _by_id(jobs)[a.job_id].gpu == 0)
    for node_id, count in cpu_jobs.items():
        assert capacity[node_id].cpu_jobs + count <= capacity[node_id].max_cpu_jobs, "more CPU jobs than allowed"
    jobs_by_id = _by_id(jobs)
    for a in plan.assignments:
        wanted, where = jobs_by_id[a.job_id], capacity[a.node_id]
        assert where.usable and could_run(wanted, where)
        assert len(a.gpu_indexes) == wanted.gpu
        assert all(gpu_suits(wanted, g) for g in where.gpus if g.index in a.gpu_indexes)


@SETTINGS
@hypothesis.given(cluster(), queues(), st.sampled_from(("pack", "spread")))
def test_a_pass_keeps_the_queues_order(nodes, jobs, default):
    plan = place(jobs, nodes, default)
    position = {j.job_id: i for i, j in enumerate(jobs)}
    placed = [position[a.job_id] for a in plan.assignments]
    assert placed == sorted(placed), "placements out of queue order"
    # Of jobs that ask for the same, the earlier ones are placed first: those placed are a prefix.
    alike = defaultdict(list)
    for j in jobs:
        alike[(j.gpu, j.labels, j.node, j.gpu_model, j.min_gpu_memory_mb, j.placement)].append(j.job_id)
    got = {a.job_id for a in plan.assignments}
    for same in alike.values():
        flags = [i in got for i in same]
        assert flags == sorted(flags, reverse=True), f"a later equal job placed before an earlier one: {same}"
    # A GPU job that waits for capacity is not passed by a later GPU job on a node it could run on.
    capacity = {n.node_id: n for n in nodes}
    for waiting_id, why in plan.waiting.items():
        first = jobs[position[waiting_id]]
        if first.gpu == 0 or why is not None:
            continue
        for a in plan.assignments:
            later = jobs[position[a.job_id]]
            if position[a.job_id] > position[waiting_id] and later.gpu > 0:
                assert not could_run(first, capacity[a.node_id]), f"{a.job_id} passed {waiting_id} on {a.node_id}"


@SETTINGS
@hypothesis.given(cluster(), queues(), st.sampled_from(("pack", "spread")))
def test_each_job_looked_at_is_placed_or_waits_and_its_reason_is_written_only_when_it_changed(nodes, jobs, default):
    plan = place(jobs, nodes, default)
    placed = {a.job_id for a in plan.assignments}
    assert not placed & set(plan.waiting)
    looked_at = placed | set(plan.waiting)
    assert [j.job_id for j in jobs if j.job_id in looked_at] == [j.job_id for j in jobs][: len(looked_at)]
    for job_id, why in plan.waiting.items():
        wanted = _by_id(jobs)[job_id]
        assert (why is None) == any(n.usable and could_run(wanted, n) for n in nodes)
    # The jobs drawn here hold no reason yet: every waiting one with a reason is written, once.
    assert plan.reasons == {j: why for j, why in plan.waiting.items() if why is not None}
    again = place([attrs.evolve(j, stored_reason=plan.waiting.get(j.job_id)) for j in jobs], nodes, default)
    assert again.reasons == {}  # same queue, same nodes, reasons already on the rows: nothing to write


def _plain_pass(jobs, nodes, default):
    """The pass as it was written before the queue had a module of its own (one fit per job,
    no shortcut for alike jobs): what ``place`` must still decide."""
    facts = {n.node_id: {g.index: g for g in n.gpus} for n in nodes}
    free = {n.node_id: sorted(n.free_gpus) for n in nodes}
    cpu = {n.node_id: n.cpu_jobs for n in nodes}
    usable = [n for n in nodes if n.usable]
    reserved, out, waiting = set(), [], {}
    for job in jobs:
        if not any(free[n.node_id] or cpu[n.node_id] < n.max_cpu_jobs for n in usable):
            break
        how = job.placement or default
        candidates = [n for n in usable if could_run(job, n)]
        if job.gpu == 0:
            roomy = [n for n in candidates if cpu[n.node_id] < n.max_cpu_jobs]
            if roomy:
                node = min(roomy, key=lambda n: (cpu[n.node_id], n.name)) if how == "spread" else roomy[0]
                cpu[node.node_id] += 1
                out.append(Assignment(job.job_id, node.node_id, ()))
            else:
                waiting[job.job_id] = None if candidates else waiting_reason(job, nodes)
            continue
        suitable = {n.node_id: [i for i in free[n.node_id] if gpu_suits(job, facts[n.node_id].get(i))]
                    for n in candidates if n.node_id not in reserved}
        fitting = [n for n in candidates if len(suitable.get(n.node_id, ())) >= job.gpu]
        if not fitting:
            reserved.update(n.node_id for n in candidates)
            waiting[job.job_id] = None if candidates else waiting_reason(job, nodes)
            continue
        sign = -1 if how == "spread" else 1
        node = min(fitting, key=lambda n: (sign * len(free[n.node_id]), n.name))
        taken = tuple(suitable[node.node_id][: job.gpu])
        free[node.node_id] = [i for i in free[node.node_id] if i not in taken]
        out.append(Assignment(job.job_id, node.node_id, taken))
    return out, waiting


@SETTINGS
@hypothesis.given(cluster(), queues(), st.sampled_from(("pack", "spread")))
def test_a_pass_decides_what_the_plain_one_fit_per_job_pass_decides(nodes, jobs, default):
    plan = place(jobs, nodes, default)
    assert (plan.assignments, plan.waiting) == _plain_pass(jobs, nodes, default)
