"""The scheduler's pass (``dispatch.run_pass``) on a real SQLite file and a real node registry,
fed node snapshots as the monitor makes them: a GPU a foreign process sits on, or one too busy
under ``[scheduler] max_free_util``, takes no job, and the jobs that wait for it say so in
their ``queue_reason``, until it is free again (issue 31 item 6)."""

from __future__ import annotations

from types import SimpleNamespace

import trio

from gpuplaned.config import load_config
from gpuplaned.domain.gpu_free import UtilRule
from gpuplaned.protocol.agent import GpuInfo, Hello, NodeSnapshot
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.service.link.registry import NodeRegistry
from gpuplaned.service.passes.dispatch import SAY_AGAIN_S, run_pass, util_rule_of
from gpuplaned.store import job_rows

NOW = 1_700_000_000_000
FOREIGN = "GPU 0: foreign process 4 GiB (pid 4242)"


def _node(conn, registry, gpus=1, max_cpu_jobs=0):
    hello = Hello("box", "0", tuple(GpuInfo(i, "RTX 4090", 24564) for i in range(gpus)), max_cpu_jobs=max_cpu_jobs)
    node_id, _ = job_rows.register_node(conn, hello, NOW)
    registry.attach(node_id, trio.open_memory_channel(1)[0])
    return node_id


def _gpu(index, util=0.0, owner=None, processes=()):
    return {"index": index, "utilization_pct": util, "owner_job_id": owner, "processes": list(processes)}


def _snapshot(registry, node_id, *gpus, blocked=()):
    registry.update_snapshot(node_id, NodeSnapshot(NOW, "fake", tuple(gpus), blocked_gpus=tuple(blocked)))


def _submit(conn, node_id, gpu=1):
    spec = JobSpec(name="j", command=("true",), cwd="/", env={}, gpu=gpu)
    return job_rows.insert_job(conn, spec, NOW, job_rows.capacities(conn, {node_id}))


def _reason(conn, job_id):
    job = job_rows.get_job(conn, job_id)
    return job.status, job.queue_reason


def test_a_foreign_process_keeps_its_gpu_and_the_waiting_jobs_name_it_until_it_goes(conn):
    registry = NodeRegistry()
    node_id = _node(conn, registry)
    stranger = {"pid": 4242, "gpu_memory_mb": 4096, "job_id": None, "foreign": True}
    _snapshot(registry, node_id, _gpu(0, processes=[stranger]), blocked=[0])
    first, second = _submit(conn, node_id), _submit(conn, node_id)
    assert run_pass(registry, conn) == []
    assert _reason(conn, first) == ("QUEUED", FOREIGN) and _reason(conn, second) == ("QUEUED", FOREIGN)

    _snapshot(registry, node_id, _gpu(0))  # it went
    assert [d.job.job_id for d in run_pass(registry, conn)] == [first]
    # The GPU is ours now: the pass after the foreign process went reads on to the second job,
    # which waits for capacity and no longer names a process that is gone.
    assert _reason(conn, first) == ("DISPATCHING", None) and _reason(conn, second) == ("QUEUED", None)


def test_a_job_s_own_process_on_its_gpu_is_not_foreign(conn):
    registry = NodeRegistry()
    node_id = _node(conn, registry)
    first = _submit(conn, node_id)
    assert [d.job.job_id for d in run_pass(registry, conn)] == [first]
    ours = {"pid": 10, "gpu_memory_mb": 8192, "job_id": first, "foreign": False}
    _snapshot(registry, node_id, _gpu(0, util=95.0, owner=first, processes=[ours]))
    assert registry.withheld(UtilRule(max_free_util=10, samples=1)) == {}


def test_a_busy_gpu_is_judged_on_the_median_of_the_last_samples(conn, tmp_path):
    path = tmp_path / "gpuplaned.toml"
    path.write_text("[scheduler]\nmax_free_util = 10\nfree_util_samples = 3\n")
    rule = util_rule_of(SimpleNamespace(config=load_config({"config": str(path)}, env={})))
    assert rule == UtilRule(max_free_util=10.0, samples=3)
    registry = NodeRegistry()
    node_id = _node(conn, registry)
    job_id = _submit(conn, node_id)
    for util in (80.0, 3.0, 87.0):  # someone's notebook, outside any job
        _snapshot(registry, node_id, _gpu(0, util=util))
    assert run_pass(registry, conn, util_rule=rule) == []
    assert _reason(conn, job_id) == ("QUEUED", "GPU 0: busy 80% (median of the last 3 samples, over max_free_util 10%)")
    assert [d.job.job_id for d in run_pass(registry, conn)] == [job_id]  # without the rule it would run


def test_a_busy_gpu_frees_once_its_median_falls_under_the_threshold(conn):
    registry = NodeRegistry()
    node_id = _node(conn, registry)
    rule = UtilRule(max_free_util=10, samples=3)
    job_id = _submit(conn, node_id)
    for util in (90.0, 90.0, 90.0, 2.0, 1.0):
        _snapshot(registry, node_id, _gpu(0, util=util))
        if util == 2.0:  # 90, 90, 2: still busy
            assert run_pass(registry, conn, util_rule=rule) == []
            assert _reason(conn, job_id)[1].startswith("GPU 0: busy 90%")
    assert [d.job.job_id for d in run_pass(registry, conn, util_rule=rule)] == [job_id]  # 90, 2, 1


def test_what_a_job_of_ours_did_on_a_gpu_keeps_no_later_job_off_it(conn):
    # A job of ours ran hot on GPU 0 and ended: the readings taken while it held the GPU are not
    # judged, and fewer than the samples asked for since are no verdict.
    registry = NodeRegistry()
    node_id = _node(conn, registry)
    rule = UtilRule(max_free_util=10, samples=3)
    for _ in range(5):
        _snapshot(registry, node_id, _gpu(0, util=95.0, owner="job_earlier"))
    _snapshot(registry, node_id, _gpu(0, util=45.0))  # its last kernel's tail, read after it ended
    job_id = _submit(conn, node_id)
    assert [d.job.job_id for d in run_pass(registry, conn, util_rule=rule)] == [job_id]


def test_a_node_that_detaches_takes_its_readings_along(conn):
    registry = NodeRegistry()
    node_id = _node(conn, registry)
    rule = UtilRule(max_free_util=10, samples=1)
    _snapshot(registry, node_id, _gpu(0, util=90.0))
    assert registry.withheld(rule) == {node_id: {0: "busy 90% (the last sample, over max_free_util 10%)"}}
    registry.detach(node_id)
    registry.attach(node_id, trio.open_memory_channel(1)[0])
    _snapshot(registry, node_id, _gpu(0, util=90.0))
    assert registry.withheld(UtilRule(max_free_util=10, samples=2)) == {}  # one reading since it came back


def test_while_the_same_gpus_stay_withheld_a_full_pass_reads_the_queue_only_now_and_then(conn):
    # With no slot left, a pass reads the whole queue when which GPUs are withheld changes, and
    # again once SAY_AGAIN_S have passed: a job queued in between names the GPU from then on.
    registry = NodeRegistry()
    node_id = _node(conn, registry)
    stranger = {"pid": 4242, "gpu_memory_mb": 4096, "job_id": None, "foreign": True}
    _snapshot(registry, node_id, _gpu(0, processes=[stranger]), blocked=[0])
    first = _submit(conn, node_id)
    assert run_pass(registry, conn, at=100.0) == []
    assert _reason(conn, first) == ("QUEUED", FOREIGN)
    second = _submit(conn, node_id)
    assert run_pass(registry, conn, at=100.0 + SAY_AGAIN_S / 2) == []
    assert _reason(conn, second) == ("QUEUED", None)  # not read: nothing changed, nothing free
    assert run_pass(registry, conn, at=100.0 + SAY_AGAIN_S) == []
    assert _reason(conn, second) == ("QUEUED", FOREIGN)
