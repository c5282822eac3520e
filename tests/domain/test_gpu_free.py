"""When a GPU is free for a new job (issue 31 item 6), with plain values: the foreign-process
rule, the utilisation rule over the last samples, how each withheld GPU is described, and the
reason a queue pass gives a job that waits for such a GPU."""

from __future__ import annotations

import hypothesis
import pytest
from hypothesis import strategies as st

from gpuplaned.domain.gpu_free import (
    MAX_UTIL_SAMPLES,
    ForeignProcess,
    GpuUse,
    UtilRule,
    UtilWindow,
    busy_reason,
    describe_foreign,
    foreign_blocks,
    size,
    summary,
    uses_of,
    withheld,
)
from gpuplaned.domain.queue import place
from gpuplaned.domain.scheduling import GpuFacts, NodeCapacity, QueuedJob

# Derandomized: the same examples on every run; no deadline a loaded machine could trip.
SETTINGS = hypothesis.settings(max_examples=300, derandomize=True, database=None, deadline=None)

# --- foreign processes -------------------------------------------------------


def test_foreign_processes_block_a_gpu_once_they_hold_the_threshold_together():
    assert not foreign_blocks([], 1024)
    assert not foreign_blocks([ForeignProcess(1, 300)], 1024)  # a display server
    assert foreign_blocks([ForeignProcess(1, 1024)], 1024)
    assert foreign_blocks([ForeignProcess(1, 600), ForeignProcess(2, 600)], 1024)
    assert foreign_blocks([ForeignProcess(1, None)], 1024)  # an unknown size never passes for a small one
    assert foreign_blocks([ForeignProcess(1, 0)], 0)


@pytest.mark.parametrize(("mb", "said"), [(300, "300 MiB"), (1024, "1 GiB"), (1536, "1.5 GiB"), (4096, "4 GiB"),
                                          (81920, "80 GiB")])
def test_sizes_read_as_people_write_them(mb, said):
    assert size(mb) == said


def test_foreign_processes_are_named_with_their_memory_and_pids():
    assert describe_foreign([ForeignProcess(123, 4096)]) == "foreign process 4 GiB (pid 123)"
    assert describe_foreign([ForeignProcess(123, 4096), ForeignProcess(456, 1024)]) == \
        "2 foreign processes, 5 GiB (pids 123, 456)"
    assert describe_foreign([ForeignProcess(7, None)]) == "foreign process of unknown size (pid 7)"
    many = [ForeignProcess(p, 100) for p in (1, 2, 3, 4, 5)]
    assert describe_foreign(many) == "5 foreign processes, 500 MiB (pids 1, 2, 3, ...)"


# --- utilisation ---------------------------------------------------------------


def test_the_median_of_the_last_samples_must_be_under_max_free_util():
    rule = UtilRule(max_free_util=10, samples=5)
    assert busy_reason([87, 90, 85, 88, 86], rule) == \
        "busy 87% (median of the last 5 samples, over max_free_util 10%)"
    assert busy_reason([0, 0, 95, 0, 0], rule) is None  # one spike is not a busy GPU
    assert busy_reason([95, 95, 0, 0, 0, 0], rule) is None  # only the last 5 count
    assert busy_reason([10, 10, 10, 10, 10], rule) == \
        "busy 10% (median of the last 5 samples, at max_free_util 10%)"  # under it, not at it
    assert busy_reason([9.9] * 5, rule) is None
    assert busy_reason([90, 90, 90, 90], rule) is None  # four readings judge nothing yet
    assert busy_reason([90] * 5, UtilRule(None, 5)) is None  # the rule is off


def test_a_window_keeps_only_what_was_read_while_no_job_of_ours_held_the_gpu():
    window = UtilWindow()
    window.add([GpuUse(0, 50.0), GpuUse(1, 5.0)])
    window.add([GpuUse(0, 60.0), GpuUse(1, None), GpuUse(2, 70.0, error="gpu_lost: gone")])
    assert window.last(0, 5) == (50.0, 60.0) and window.last(1, 5) == (5.0,) and window.last(2, 5) == ()
    window.add([GpuUse(0, 95.0, held=True)])  # a job of ours ran there: what it did is no one's reason
    assert window.last(0, 5) == ()
    window.add([GpuUse(0, 40.0)])
    assert window.last(0, 5) == (40.0,) and window.last(0, 1) == (40.0,)
    for value in range(MAX_UTIL_SAMPLES + 10):
        window.add([GpuUse(1, float(value))])
    assert len(window.last(1, 1000)) == MAX_UTIL_SAMPLES and window.last(1, 2) == (68.0, 69.0)


# --- one node ------------------------------------------------------------------


def test_what_a_node_withholds_is_described_from_its_sample():
    uses = [GpuUse(0, error="gpu_lost: fell off the bus"),
            GpuUse(1, 0.0, foreign=(ForeignProcess(123, 4096),)),
            GpuUse(2, 0.0),
            GpuUse(3, 0.0, foreign=(ForeignProcess(9, 200),))]
    assert withheld(uses, [0, 1, 2]) == {0: "lost (fell off the bus)",
                                         1: "foreign process 4 GiB (pid 123)",
                                         2: "withheld by its node"}
    assert withheld(uses, []) == {}  # the node's verdict: GPU 3's 200 MiB block nothing


def test_busy_gpus_are_withheld_only_under_the_rule_and_never_one_a_job_holds():
    window = UtilWindow()
    rule = UtilRule(max_free_util=20, samples=3)
    for _ in range(3):
        window.add([GpuUse(0, 90.0), GpuUse(1, 5.0), GpuUse(2, 90.0)])
    uses = [GpuUse(0, 90.0), GpuUse(1, 5.0), GpuUse(2, 90.0, held=True)]
    assert withheld(uses, [], window, rule) == {0: "busy 90% (median of the last 3 samples, over max_free_util 20%)"}
    assert withheld(uses, [], window, UtilRule(None, 3)) == {}
    assert withheld(uses, [], None, rule) == {}
    lost = [GpuUse(0, 90.0, error="gpu_lost: x")]
    assert withheld(lost, [0], window, rule) == {0: "lost (x)"}  # one reason a GPU


def test_a_snapshot_s_gpus_are_read_with_our_jobs_processes_apart_from_foreign_ones():
    gpus = [
        {"index": 0, "utilization_pct": 91.5, "owner_job_id": "job_1",
         "processes": [{"pid": 10, "gpu_memory_mb": 2048, "job_id": "job_1", "foreign": False}]},
        # a job's process on a GPU it was not given (a pinning violation) is ours, not foreign
        {"index": 1, "utilization_pct": 30.0, "owner_job_id": None,
         "processes": [{"pid": 11, "gpu_memory_mb": 2048, "job_id": "job_1", "foreign": False},
                       {"pid": 12, "gpu_memory_mb": 500, "job_id": None, "foreign": True}]},
        {"index": 2, "error": "gpu_lost: x"},  # a lost GPU's sample carries little else
        {"utilization_pct": 3.0},  # no index: an agent of another version, ignored
    ]
    assert uses_of(gpus) == (GpuUse(0, 91.5, None, True, ()),
                             GpuUse(1, 30.0, None, True, (ForeignProcess(12, 500),)),
                             GpuUse(2, None, "gpu_lost: x", False, ()))


def test_a_summary_names_the_first_and_counts_the_rest():
    assert summary([]) is None
    assert summary(["GPU 1: a"]) == "GPU 1: a"
    assert summary(["GPU 0: a", "GPU 1: b"]) == "GPU 0: a; 1 more GPU not free"
    assert summary(["GPU 0: a", "GPU 1: b", "GPU 2: c"]) == "GPU 0: a; 2 more GPUs not free"


# --- the queue's reasons --------------------------------------------------------

FOREIGN = "foreign process 4 GiB (pid 123)"


def node(name, total=2, free=None, withheld=(), model="RTX 4090", max_cpu=2):
    unheld = free if free is not None else tuple(i for i in range(total) if i not in dict(withheld))
    return NodeCapacity(f"nd_{name}", name, (), tuple(unheld), total, 0, max_cpu,
                        gpus=tuple(GpuFacts(i, model, 24564) for i in range(total)), withheld=tuple(withheld))


def job(job_id, gpu=1, **kw):
    return QueuedJob(job_id, gpu, **kw)


def test_a_job_waiting_for_a_gpu_a_foreign_process_sits_on_names_it():
    solo = node("box", total=1, free=(), withheld=[(0, FOREIGN)])
    plan = place([job("job_a"), job("job_b")], [solo])
    assert plan.assignments == []
    assert plan.waiting == {"job_a": f"GPU 0: {FOREIGN}", "job_b": f"GPU 0: {FOREIGN}"}
    assert plan.reasons == plan.waiting


def test_the_gpu_that_is_free_is_taken_and_the_next_job_names_the_withheld_one():
    box = node("box", total=2, free=(0,), withheld=[(1, FOREIGN)])
    plan = place([job("job_a"), job("job_b")], [box])
    assert [a.gpu_indexes for a in plan.assignments] == [(0,)]
    assert plan.waiting == {"job_b": f"GPU 1: {FOREIGN}"}


def test_several_withheld_gpus_say_the_first_and_how_many_more():
    busy = "busy 87% (median of the last 5 samples, over max_free_util 10%)"
    box = node("box", total=4, free=(), withheld=[(0, FOREIGN), (1, busy), (3, "lost (x)")])
    plan = place([job("job_a", gpu=2)], [box])
    assert plan.waiting == {"job_a": f"GPU 0: {FOREIGN}; 2 more GPUs not free"}


def test_with_several_nodes_the_reason_names_the_node():
    one = node("one", total=1, free=(), withheld=[(0, FOREIGN)])
    two = node("two", total=1, free=(), withheld=[(0, "lost (x)")])
    plan = place([job("job_a")], [one, two])
    assert plan.waiting == {"job_a": f"GPU 0 on one: {FOREIGN}; 1 more GPU not free"}


def test_a_job_names_withheld_gpus_it_needs_and_not_those_it_can_do_without():
    # 4 GPUs: 2 held by our jobs (neither free nor withheld), GPU 2 under a foreign process, GPU 3 free.
    box = node("box", total=4, free=(3,), withheld=[(2, FOREIGN)])
    assert place([job("job_a", gpu=2)], [box]).waiting == {"job_a": f"GPU 2: {FOREIGN}"}  # it would run now
    assert place([job("job_a", gpu=4)], [box]).waiting == {"job_a": f"GPU 2: {FOREIGN}"}  # it never runs without
    # 3 GPUs fit once our jobs end, foreign process or not: it waits for ours, no GPU to name.
    assert place([job("job_a", gpu=3)], [box]).waiting == {"job_a": None}


def test_a_withheld_gpu_that_does_not_meet_the_job_s_constraints_is_not_its_reason():
    box = NodeCapacity("nd_box", "box", (), (), 2, 0, 2,
                       gpus=(GpuFacts(0, "A100", 81920), GpuFacts(1, "T4", 16384)),
                       withheld=((1, FOREIGN),))
    assert place([job("job_a", gpu_model="A100")], [box]).waiting == {"job_a": None}
    assert place([job("job_b", gpu_model="T4")], [box]).waiting == {"job_b": f"GPU 1: {FOREIGN}"}


def test_a_stale_gpu_reason_is_cleared_when_the_pass_rechecks():
    # The foreign process went; our job took the GPU. The jobs behind it still name the process
    # until a pass reads them again: the scheduler asks for that pass (recheck).
    box = node("box", total=1, free=(), max_cpu=0)
    queue = [job("job_b", stored_reason=f"GPU 0: {FOREIGN}"), job("job_c", stored_reason=f"GPU 0: {FOREIGN}")]
    assert place(queue, [box]).reasons == {}  # nothing free: the pass stops at once
    assert place(queue, [box], recheck=True).reasons == {"job_b": None, "job_c": None}


def test_cpu_jobs_are_not_held_back_by_withheld_gpus():
    box = node("box", total=1, free=(), withheld=[(0, FOREIGN)])
    plan = place([job("job_gpu"), job("job_cpu", gpu=0)], [box])
    assert [a.job_id for a in plan.assignments] == ["job_cpu"]
    assert plan.waiting == {"job_gpu": f"GPU 0: {FOREIGN}"}


def test_a_job_behind_one_that_reserved_the_node_still_names_the_withheld_gpu():
    # job_a (2 GPUs) reserves the node while it waits; job_b (1 GPU) may not take GPU 0 before it,
    # and what both lack is GPU 1.
    box = node("box", total=2, free=(0,), withheld=[(1, FOREIGN)])
    plan = place([job("job_a", gpu=2), job("job_b")], [box])
    assert plan.assignments == []
    assert plan.waiting == {"job_a": f"GPU 1: {FOREIGN}", "job_b": None}
    # With no GPU free there, the reserving job and the one behind it wait for the same one.
    box = node("box", total=2, free=(), withheld=[(1, FOREIGN)])
    plan = place([job("job_a", gpu=2), job("job_b")], [box])
    assert plan.waiting == {"job_a": f"GPU 1: {FOREIGN}", "job_b": f"GPU 1: {FOREIGN}"}


@SETTINGS
@hypothesis.given(st.lists(st.tuples(st.integers(1, 4), st.sets(st.integers(0, 3)), st.sets(st.integers(0, 3))),
                           min_size=1, max_size=3),
                  st.lists(st.integers(0, 4), max_size=12))
def test_no_job_gets_a_withheld_gpu_and_each_gpu_reason_names_one(shapes, wants):
    nodes = []
    for k, (total, held, kept_off) in enumerate(shapes):
        kept = sorted(i for i in kept_off if i < total and i not in held)
        free = tuple(i for i in range(total) if i not in held and i not in kept)
        nodes.append(node(f"n{k}", total=total, free=free, withheld=[(i, f"reason {k}.{i}") for i in kept]))
    plan = place([job(f"job_{j:02d}", gpu=g) for j, g in enumerate(wants)], nodes)
    by_id = {n.node_id: n for n in nodes}
    for a in plan.assignments:
        assert not set(a.gpu_indexes) & {i for i, _ in by_id[a.node_id].withheld}
    named = {f"GPU {i}{f' on {n.name}' if len(nodes) > 1 else ''}: {why}" for n in nodes for i, why in n.withheld}
    for why in plan.waiting.values():
        if why is not None and why.startswith("GPU "):
            assert why.split("; ")[0] in named
