from gpuplaned.domain.queue import assign
from gpuplaned.domain.scheduling import Assignment, NodeCapacity, QueuedJob, can_ever_fit


def node(name="a", gpus=(0, 1), total=None, cpu=0, max_cpu=2, labels=(), **kw):
    return NodeCapacity(f"nd_{name}", name, tuple(labels), tuple(gpus), total if total is not None else len(gpus),
                        cpu, max_cpu, **kw)


def test_queue_order_and_lowest_indexes():
    jobs = [QueuedJob("j1", 1), QueuedJob("j2", 1), QueuedJob("j3", 1)]
    assert assign(jobs, [node()]) == [Assignment("j1", "nd_a", (0,)), Assignment("j2", "nd_a", (1,))]


def test_multi_gpu_job_and_best_fit():
    nodes = [node("big", gpus=(0, 1, 2, 3)), node("small", gpus=(1,), total=2)]
    assert assign([QueuedJob("j", 1)], nodes) == [Assignment("j", "nd_small", (1,))]
    assert assign([QueuedJob("j", 3)], nodes) == [Assignment("j", "nd_big", (0, 1, 2))]


def test_blocked_gpu_job_reserves_its_nodes():
    jobs = [QueuedJob("big", 2), QueuedJob("small", 1), QueuedJob("cpu", 0)]
    out = assign(jobs, [node(gpus=(1,), total=2)])
    assert out == [Assignment("cpu", "nd_a", ())]


def test_reservation_only_covers_matching_nodes():
    jobs = [QueuedJob("pinned", 2, node="a"), QueuedJob("any", 1)]
    out = assign(jobs, [node("a", gpus=(0,), total=2), node("b", gpus=(0,))])
    assert out == [Assignment("any", "nd_b", (0,))]


def test_cpu_jobs_bounded_per_node():
    jobs = [QueuedJob(f"c{i}", 0) for i in range(4)]
    assert [a.job_id for a in assign(jobs, [node(gpus=(), cpu=1, max_cpu=2)])] == ["c0"]


def test_selectors_offline_and_not_accepting():
    jobs = [QueuedJob("lab", 1, labels=("a100",))]
    assert assign(jobs, [node(labels=("h100",))]) == []
    assert assign(jobs, [node(labels=("a100", "linux"))]) == [Assignment("lab", "nd_a", (0,))]
    assert assign([QueuedJob("j", 1)], [node(online=False)]) == []
    assert assign([QueuedJob("j", 1)], [node(accepting=False)]) == []


def test_can_ever_fit():
    nodes = [node("a", gpus=(), total=2)]
    assert can_ever_fit(QueuedJob("j", 2), nodes)
    assert not can_ever_fit(QueuedJob("j", 3), nodes)
    assert not can_ever_fit(QueuedJob("j", 1, node="zz"), nodes)
    assert can_ever_fit(QueuedJob("j", 0), nodes)
    assert not can_ever_fit(QueuedJob("j", 0), [node(gpus=(), max_cpu=0)])
