"""Scheduling across nodes, with plain numbers: selectors, GPU constraints, pack and spread,
drained nodes, max_cpu_jobs, reservations that only cover nodes that could run the job, and
the reason a job waits."""

from gpuplaned.domain.queue import assign, place
from gpuplaned.domain.scheduling import (
    Assignment,
    GpuFacts,
    NodeCapacity,
    QueuedJob,
    can_ever_fit,
    waiting_reason,
)


def node(name, free=(0, 1), total=None, *, model="Fake GPU 80GB", memory=81920, models=None, labels=(), cpu=0,
         max_cpu=2, **kw):
    """A node whose GPUs 0..total-1 all have ``model``/``memory`` (``models``: index -> (model, memory))."""
    total = total if total is not None else len(free)
    facts = tuple(GpuFacts(i, *(models or {}).get(i, (model, memory))) for i in range(total))
    return NodeCapacity(f"nd_{name}", name, tuple(labels), tuple(free), total, cpu, max_cpu, gpus=facts, **kw)


def job(job_id="j", gpu=1, **kw):
    return QueuedJob(job_id, gpu, **kw)


# --- selectors ---------------------------------------------------------------


def test_node_name_and_labels_select():
    nodes = [node("a", labels=("x",)), node("b", labels=("x", "y"))]
    assert assign([job(node="b")], nodes) == [Assignment("j", "nd_b", (0,))]
    assert assign([job(labels=("y",))], nodes) == [Assignment("j", "nd_b", (0,))]
    assert assign([job(labels=("x", "z"))], nodes) == []


# --- constraints ---------------------------------------------------------------


def test_gpu_model_is_a_case_insensitive_substring_of_every_gpu_taken():
    mixed = node("m", free=(0, 1, 2), models={0: ("NVIDIA A100-SXM4-40GB", 40960), 1: ("RTX 4090", 24564),
                                             2: ("NVIDIA A100-SXM4-80GB", 81920)})
    assert assign([job(gpu=2, gpu_model="a100")], [mixed]) == [Assignment("j", "nd_m", (0, 2))]
    assert assign([job(gpu=1, gpu_model="4090")], [mixed]) == [Assignment("j", "nd_m", (1,))]
    assert assign([job(gpu=2, gpu_model="4090")], [mixed]) == []
    assert assign([job(gpu=1, gpu_model="h100")], [mixed]) == []


def test_min_gpu_memory_holds_for_each_gpu():
    mixed = node("m", free=(0, 1, 2), models={0: ("A", 40960), 1: ("B", 24564), 2: ("C", 81920)})
    assert assign([job(gpu=2, min_gpu_memory_mb=40960)], [mixed]) == [Assignment("j", "nd_m", (0, 2))]
    assert assign([job(gpu=1, min_gpu_memory_mb=40961)], [mixed]) == [Assignment("j", "nd_m", (2,))]
    assert assign([job(gpu=2, min_gpu_memory_mb=40961)], [mixed]) == []
    both = job(gpu=1, gpu_model="a", min_gpu_memory_mb=50000)
    assert assign([both], [mixed]) == []  # A is too small; C is not an "a"


def test_unknown_gpu_facts_meet_no_constraint():
    bare = NodeCapacity("nd_b", "b", (), (0,), 1, 0, 2)  # no GpuFacts
    assert assign([job()], [bare]) == [Assignment("j", "nd_b", (0,))]
    assert assign([job(gpu_model="fake")], [bare]) == []
    assert assign([job(min_gpu_memory_mb=1)], [bare]) == []


def test_constraint_picks_the_node_that_meets_it():
    nodes = [node("small", free=(0,), model="RTX 4090", memory=24564), node("big", free=(0, 1, 2, 3))]
    assert assign([job(min_gpu_memory_mb=32768)], nodes) == [Assignment("j", "nd_big", (0,))]
    assert assign([job(gpu_model="rtx")], nodes) == [Assignment("j", "nd_small", (0,))]


# --- placement ---------------------------------------------------------------


def test_pack_takes_the_fewest_free_and_spread_the_most():
    nodes = [node("a", free=(0, 1, 2), total=4), node("b", free=(1,), total=4), node("c", free=(0, 1), total=4)]
    assert assign([job()], nodes) == [Assignment("j", "nd_b", (1,))]
    assert assign([job()], nodes, "pack") == [Assignment("j", "nd_b", (1,))]
    assert assign([job()], nodes, "spread") == [Assignment("j", "nd_a", (0,))]
    assert assign([job(placement="spread")], nodes, "pack") == [Assignment("j", "nd_a", (0,))]
    assert assign([job(placement="pack")], nodes, "spread") == [Assignment("j", "nd_b", (1,))]
    # pack: a 2-GPU job goes where exactly 2 are free; spread spreads jobs one per node.
    assert assign([job(gpu=2)], nodes) == [Assignment("j", "nd_c", (0, 1))]
    three = [job(f"j{i}") for i in range(3)]
    assert assign(three, [node("a"), node("b")], "spread") == [
        Assignment("j0", "nd_a", (0,)), Assignment("j1", "nd_b", (0,)), Assignment("j2", "nd_a", (1,))]
    assert assign(three, [node("a"), node("b")], "pack") == [
        Assignment("j0", "nd_a", (0,)), Assignment("j1", "nd_a", (1,)), Assignment("j2", "nd_b", (0,))]


def test_ties_go_to_the_first_name():
    nodes = [node("b"), node("a")]
    assert assign([job()], nodes, "pack") == [Assignment("j", "nd_a", (0,))]
    assert assign([job()], nodes, "spread") == [Assignment("j", "nd_a", (0,))]


def test_cpu_jobs_pack_on_the_first_node_and_spread_to_the_least_busy():
    nodes = [node("a", free=(), cpu=1, max_cpu=3), node("b", free=(), cpu=0, max_cpu=3)]
    two = [job("c1", gpu=0), job("c2", gpu=0)]
    assert [a.node_id for a in assign(two, nodes, "pack")] == ["nd_a", "nd_a"]
    assert [a.node_id for a in assign(two, nodes, "spread")] == ["nd_b", "nd_a"]


# --- max_cpu_jobs ---------------------------------------------------------------


def test_max_cpu_jobs_per_node():
    nodes = [node("a", free=(), cpu=1, max_cpu=2), node("b", free=(), cpu=0, max_cpu=1)]
    out = assign([job(f"c{i}", gpu=0) for i in range(5)], nodes)
    assert [(a.job_id, a.node_id) for a in out] == [("c0", "nd_a"), ("c1", "nd_b")]
    assert assign([job(gpu=0)], [node("z", free=(), max_cpu=0)]) == []
    assert not can_ever_fit(job(gpu=0), [node("z", free=(), max_cpu=0)])


# --- drained ---------------------------------------------------------------


def test_a_drained_node_gets_no_new_job():
    nodes = [node("a", drained=True), node("b", free=(0,), total=2)]
    assert assign([job(), job("k")], nodes) == [Assignment("j", "nd_b", (0,))]
    assert assign([job(gpu=0)], [node("a", drained=True)]) == []
    assert assign([job(node="a")], nodes) == []
    assert can_ever_fit(job(node="a"), nodes)  # undrained, it could


# --- reservations -------------------------------------------------------------


def test_a_job_no_node_could_run_reserves_nothing():
    # A 2-GPU A100 job ahead of a 1-GPU job: no node has A100s, so it must not hold the node.
    out = assign([job("a100", gpu=2, gpu_model="a100"), job("small")], [node("a", free=(0,), total=2)])
    assert out == [Assignment("small", "nd_a", (0,))]
    # One it could run when idle keeps reserving it (the 4-GPU rule).
    out = assign([job("big", gpu=2), job("small")], [node("a", free=(0,), total=2)])
    assert out == []


# --- reasons ---------------------------------------------------------------


def test_waiting_reasons_name_the_constraint():
    nodes = [node("a", labels=("x",)), node("b", model="RTX 4090", memory=24564)]
    assert waiting_reason(job(node="zz"), nodes) == "no node named 'zz'"
    assert waiting_reason(job(labels=("y",)), nodes) == "no node has the label(s) y"
    assert waiting_reason(job(node="b", labels=("x",)), nodes) == "node 'b' lacks the label(s) x"
    assert waiting_reason(job(gpu=2, gpu_model="a100"), nodes) == (
        "no node has 2 GPU(s) whose model contains 'a100' (the most on one matching node: 0)")
    assert waiting_reason(job(gpu=2, min_gpu_memory_mb=90000), nodes) == (
        "no node has 2 GPU(s) with at least 90000 MiB of memory (the most on one matching node: 0)")
    assert waiting_reason(job(gpu=2, min_gpu_memory_mb=40000), nodes) is None  # a's 80 GB GPUs
    assert waiting_reason(job(gpu=3, gpu_model="rtx", min_gpu_memory_mb=20000), nodes) == (
        "no node has 3 GPU(s) whose model contains 'rtx' and with at least 20000 MiB of memory "
        "(the most on one matching node: 2)")
    assert waiting_reason(job(gpu=3), nodes) == "the job asks for 3 GPU(s) but the largest matching node has 2"
    assert waiting_reason(job(gpu=0), [node("z", max_cpu=0)]) == "no matching node runs CPU jobs (max_cpu_jobs = 0)"
    assert waiting_reason(job(), nodes) is None
    assert waiting_reason(job(), [node("a", free=(), total=2)]) is None  # busy: it waits its turn


def test_waiting_reasons_for_drained_and_offline_nodes():
    assert waiting_reason(job(), [node("a", drained=True), node("b", drained=True)]) == (
        "every node that could run it is drained: a, b")
    assert waiting_reason(job(), [node("a", drained=True), node("b", online=False)]) == (
        "every node that could run it is drained, offline or not accepting jobs: a, b")
    # A drained node that could not run it anyway is not the reason.
    assert waiting_reason(job(gpu=2), [node("a", drained=True), node("b", free=(0,), total=2)]) is None


def test_place_reports_each_job_it_left_waiting():
    nodes = [node("a", free=(0,), total=2)]
    out = place([job("ok"), job("busy"), job("never", gpu_model="h100"), job("cpu", gpu=0)], nodes)
    assert out.assignments == [Assignment("ok", "nd_a", (0,)), Assignment("cpu", "nd_a", ())]
    assert out.waiting == {"busy": None, "never": "no node has 1 GPU(s) whose model contains 'h100' "
                                                  "(the most on one matching node: 0)"}


def test_place_stops_reading_once_nothing_is_left():
    read = []

    def queue():
        for i in range(5):
            read.append(i)
            yield job(f"j{i}")

    out = place(queue(), [node("a", free=(0,), total=1, max_cpu=0)])
    assert [a.job_id for a in out.assignments] == ["j0"] and read == [0, 1]
    assert out.waiting == {}
