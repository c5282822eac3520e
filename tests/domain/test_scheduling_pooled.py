"""Placement onto pooled nodes (issue 32 item 1): a Slurm node offers job slots, not GPU indexes.
A job fits when it matches the node's selectors, asks for at most ``gpus_per_job`` GPUs, names no
GPU model or memory, and the node holds fewer than ``max_jobs`` of our jobs (CPU jobs count too)."""

import pytest

from gpuplaned.domain.queue import assign, place, refusal
from gpuplaned.domain.scheduling import (
    Assignment,
    GpuFacts,
    NodeCapacity,
    QueuedJob,
    can_ever_fit,
    waiting_reason,
)
from gpuplaned.protocol.agent import PooledCapacity


def pooled(name, gpus_per_job=4, max_jobs=2, in_flight=0, labels=(), **kw):
    return NodeCapacity(f"nd_{name}", name, tuple(labels), (), 0, 0, 0,
                        pooled=PooledCapacity(gpus_per_job, max_jobs), jobs_in_flight=in_flight, **kw)


def local(name, free=(0, 1), total=None, max_cpu=2, cpu=0, labels=()):
    total = total if total is not None else len(free)
    facts = tuple(GpuFacts(i, "Fake GPU 80GB", 81920) for i in range(total))
    return NodeCapacity(f"nd_{name}", name, tuple(labels), tuple(free), total, cpu, max_cpu, gpus=facts)


def jobs(n, gpu=1, **kw):
    return [QueuedJob(f"j{i}", gpu, **kw) for i in range(n)]


def test_a_pooled_node_takes_up_to_max_jobs_books_no_gpu_and_lets_slurm_queue():
    """Four 4-GPU jobs ask more than Slurm may have free: GPUPlane hands over max_jobs of them anyway."""
    plan = place(jobs(4, gpu=4), [pooled("hpc", max_jobs=3)])
    assert plan.assignments == [Assignment(f"j{i}", "nd_hpc", ()) for i in range(3)]
    assert plan.waiting == {}  # no job slot left: the pass reads no further (j3 waits for capacity)


def test_jobs_in_flight_count_against_max_jobs():
    assert assign(jobs(3), [pooled("hpc", max_jobs=3, in_flight=2)]) == [Assignment("j0", "nd_hpc", ())]
    assert assign(jobs(1), [pooled("hpc", max_jobs=3, in_flight=3)]) == []


def test_cpu_jobs_count_against_max_jobs_not_max_cpu_jobs():
    """The pooled node's max_cpu_jobs (0 here) does not bound it: Slurm runs CPU jobs too."""
    mixed = [QueuedJob("cpu0", 0), QueuedJob("gpu1", 2), QueuedJob("cpu2", 0)]
    assert assign(mixed, [pooled("hpc", max_jobs=2)]) == [Assignment("cpu0", "nd_hpc", ()),
                                                          Assignment("gpu1", "nd_hpc", ())]


def test_a_job_asking_more_than_gpus_per_job_never_fits_and_says_so():
    nodes = [pooled("hpc", gpus_per_job=2)]
    big = QueuedJob("big", 3)
    assert not can_ever_fit(big, nodes)
    assert waiting_reason(big, nodes) == "the job asks for 3 GPU(s) but pooled node 'hpc' takes at most 2 GPU(s) a job"
    refused = refusal(big, nodes)
    assert refused is not None and refused.message == (
        "gpu: the job asks for 3 GPU(s) but pooled node 'hpc' takes at most 2 GPU(s) a job")
    assert refused.details["largest_matching_node"] == 2
    assert assign([big], nodes) == []


def test_the_largest_of_a_local_and_a_pooled_node_is_named():
    nodes = [pooled("hpc", gpus_per_job=2), local("box", free=(0, 1, 2), total=3)]
    assert waiting_reason(QueuedJob("big", 5), nodes) == "the job asks for 5 GPU(s) but the largest matching node has 3"
    assert refusal(QueuedJob("big", 5), nodes).details["largest_matching_node"] == 3


@pytest.mark.parametrize("constraint, words", [
    ({"gpu_model": "A100"}, "whose model contains 'A100'"),
    ({"min_gpu_memory_mb": 40960}, "with at least 40960 MiB of memory"),
])
def test_a_gpu_model_or_memory_never_fits_a_pooled_node_and_the_reason_names_node_and_constraint(constraint, words):
    nodes = [pooled("hpc")]
    wanting = QueuedJob("j", 1, **constraint)
    assert not can_ever_fit(wanting, nodes)
    assert assign([wanting], nodes) == []
    reason = waiting_reason(wanting, nodes)
    assert reason == (f"pooled node 'hpc' cannot promise GPUs {words}: Slurm places its GPUs, whose model and "
                      "memory GPUPlane does not know")
    assert place([wanting], nodes).waiting == {"j": reason}


def test_a_constrained_job_names_the_local_nodes_best_and_the_pooled_nodes():
    nodes = [pooled("hpc"), pooled("hpc2"), local("box", free=(0,), total=1)]
    reason = waiting_reason(QueuedJob("j", 2, gpu_model="Fake"), nodes)
    assert reason == ("no node has 2 GPU(s) whose model contains 'Fake' (the most on one matching node: 1); "
                      "pooled nodes 'hpc', 'hpc2' cannot promise GPUs whose model contains 'Fake': Slurm places "
                      "their GPUs, whose model and memory GPUPlane does not know")


def test_selectors_hold_for_pooled_nodes():
    nodes = [pooled("hpc", labels=("slurm",)), pooled("other")]
    assert assign([QueuedJob("j", 1, labels=("slurm",))], nodes) == [Assignment("j", "nd_hpc", ())]
    assert assign([QueuedJob("j", 1, node="other")], nodes) == [Assignment("j", "nd_other", ())]
    assert waiting_reason(QueuedJob("j", 1, labels=("gpu-x",)), nodes) == "no node has the label(s) gpu-x"


def test_an_unusable_pooled_node_takes_nothing():
    for away in (pooled("hpc", drained=True), pooled("hpc", online=False), pooled("hpc", accepting=False)):
        assert assign(jobs(1), [away]) == []
    assert waiting_reason(QueuedJob("j", 1), [pooled("hpc", drained=True)]) == \
        "every node that could run it is drained: hpc"


@pytest.mark.parametrize("how, first", [("pack", "nd_few"), ("spread", "nd_many")])
def test_pack_takes_the_pooled_node_with_fewest_free_job_slots_and_spread_the_most(how, first):
    nodes = [pooled("many", max_jobs=5), pooled("few", max_jobs=5, in_flight=3)]
    assert assign(jobs(1), nodes, how)[0] == Assignment("j0", first, ())
    # Spread evens them out: 5 and 2 free, then alternate once they are level.
    spread = [a.node_id for a in assign(jobs(5), nodes, "spread")]
    assert spread == ["nd_many", "nd_many", "nd_many", "nd_few", "nd_many"]


def test_local_and_pooled_nodes_mix_in_one_pass_a_local_node_first_while_it_has_room():
    """A local node starts a job at once; a pooled node hands it to Slurm, which may queue it."""
    nodes = [pooled("hpc", gpus_per_job=8, max_jobs=2), local("box", free=(0, 1))]
    plan = place([QueuedJob("a", 2), QueuedJob("b", 1), QueuedJob("c", 8), QueuedJob("d", 0), QueuedJob("e", 0)],
                 nodes)
    assert plan.assignments == [Assignment("a", "nd_box", (0, 1)), Assignment("b", "nd_hpc", ()),
                                Assignment("c", "nd_hpc", ()), Assignment("d", "nd_box", ()),
                                Assignment("e", "nd_box", ())]


def test_a_waiting_big_job_reserves_no_pooled_node():
    """The 2-GPU job waits for the busy local node (and reserves it): the 1-GPU jobs behind it still go
    to the pooled node, but not to the local node's last free GPU."""
    nodes = [local("box", free=(1,), total=2), pooled("hpc", gpus_per_job=1, max_jobs=1)]
    plan = place([QueuedJob("big", 2), QueuedJob("s1", 1), QueuedJob("s2", 1)], nodes)
    assert plan.assignments == [Assignment("s1", "nd_hpc", ())]
    assert plan.waiting == {"big": None, "s2": None}


def test_a_pass_reads_on_while_a_pooled_node_has_a_free_job_slot():
    """The local node is full; the pooled node's slot still takes the job further down."""
    nodes = [local("box", free=(), total=1, max_cpu=0), pooled("hpc", max_jobs=1)]
    queue = iter([QueuedJob("a", 1, gpu_model="Fake"), QueuedJob("b", 1)])
    assert place(queue, nodes).assignments == [Assignment("b", "nd_hpc", ())]
