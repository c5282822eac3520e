"""The scheduling pass on a real SQLite file (``dispatch.schedule``): GPU facts and drained
flags read from the node rows, constraints and placement kept with the job, and the
queue reason written, refreshed and cleared."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio

from gpuplaned.config import load_config
from gpuplaned.protocol.agent import GpuInfo, Hello
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.service.link.registry import NodeRegistry
from gpuplaned.service.passes.dispatch import placement_of, run_pass, schedule
from gpuplaned.store import job_rows

NOW = 1_700_000_000_000


def _node(conn, name, gpus, model="RTX 4090", memory=24564):
    node_id, _ = job_rows.register_node(conn, Hello(name, "0", tuple(GpuInfo(i, model, memory) for i in range(gpus))),
                                        NOW)
    return node_id


def _submit(conn, connected, **spec):
    spec = JobSpec(**{"name": "j", "command": ("true",), "cwd": "/", "env": {}, "gpu": 1, **spec})
    return job_rows.insert_job(conn, spec, NOW, job_rows.capacities(conn, connected))


def _placed(conn, connected, **kw):
    return {d.job.job_id: (d.node_id, d.job.gpu_indexes) for d in schedule(conn, NOW, connected, **kw)}


def test_a_constraint_no_node_meets_waits_with_its_reason_until_a_node_does(conn):
    small = _node(conn, "small", 2)
    job_id = _submit(conn, {small}, gpu_model="A100", min_gpu_memory_mb=40960)
    job = job_rows.get_job(conn, job_id)
    assert job.status == "QUEUED" and (job.gpu_model, job.min_gpu_memory_mb) == ("A100", 40960)
    reason = ("no node has 1 GPU(s) whose model contains 'A100' and with at least 40960 MiB of memory "
              "(the most on one matching node: 0)")
    assert job.queue_reason == reason
    other = _submit(conn, {small})
    assert _placed(conn, {small}) == {other: (small, (0,))}  # the waiting job holds nothing
    assert job_rows.get_job(conn, job_id).queue_reason == reason

    big = _node(conn, "big", 2, model="NVIDIA A100-SXM4-80GB", memory=81920)
    assert _placed(conn, {small, big}) == {job_id: (big, (0,))}
    row = conn.execute("SELECT status, queue_reason FROM jobs WHERE id = ?", (job_id,)).fetchone()
    assert row == ("DISPATCHING", None)


def test_the_reason_follows_the_nodes(conn):
    a = _node(conn, "a", 1)
    conn.execute("UPDATE nodes SET drained = 1 WHERE id = ?", (a,))
    job_id = _submit(conn, {a})
    assert job_rows.get_job(conn, job_id).queue_reason == "every node that could run it is drained: a"
    assert _placed(conn, {a}) == {}
    conn.execute("UPDATE nodes SET drained = 0 WHERE id = ?", (a,))
    blocker = _submit(conn, {a}, priority=10)  # takes the GPU first: the job now waits its turn
    assert _placed(conn, {a}) == {blocker: (a, (0,))}
    assert job_rows.get_job(conn, job_id).queue_reason is None


def test_a_drained_node_keeps_its_flag_across_hellos(conn):
    a = _node(conn, "a", 1)
    conn.execute("UPDATE nodes SET drained = 1 WHERE id = ?", (a,))
    _node(conn, "a", 1)  # it says hello again (a restart)
    assert [n.drained for n in job_rows.capacities(conn, {a})] == [True]


def test_placement_default_and_per_job(conn):
    one = _node(conn, "one", 4)
    two = _node(conn, "two", 4)
    _submit(conn, {one, two}, gpu=3)
    _placed(conn, {one, two})  # "one" has 1 free now, "two" 4
    packed = _submit(conn, {one, two})
    assert _placed(conn, {one, two}) == {packed: (one, (3,))}
    spread = _submit(conn, {one, two}, placement="spread")
    assert job_rows.get_job(conn, spread).placement == "spread"
    assert _placed(conn, {one, two}) == {spread: (two, (0,))}
    by_default = _submit(conn, {one, two})
    # "two" has 3 free, "one" none: either way it is "two"; add a node with 2 free to tell them apart.
    three = _node(conn, "three", 2)
    assert _placed(conn, {one, two, three}, placement="spread") == {by_default: (two, (1,))}
    last = _submit(conn, {one, two, three})
    assert _placed(conn, {one, two, three}, placement="pack") == {last: (three, (0,))}


def test_cpu_jobs_honour_max_cpu_jobs(conn):
    node_id, _ = job_rows.register_node(conn, Hello("cpu", "0", (), max_cpu_jobs=1), NOW)
    both = {_submit(conn, {node_id}, gpu=0) for _ in range(2)}
    placed = _placed(conn, {node_id})  # ids made in the same millisecond: either may go first
    assert len(placed) == 1 and set(placed) < both and list(placed.values()) == [(node_id, ())]
    assert _placed(conn, {node_id}) == {}
    assert job_rows.get_job(conn, (both - set(placed)).pop()).status == "QUEUED"


@pytest.mark.parametrize(("configured", "expected"), [("pack", "one"), ("spread", "two"), (None, "one")])
def test_the_scheduler_pass_places_by_the_configured_default(conn, tmp_path, configured, expected):
    one = _node(conn, "one", 4)
    two = _node(conn, "two", 4)
    registry = NodeRegistry()
    for node_id in (one, two):
        registry.attach(node_id, trio.open_memory_channel(1)[0])
    _submit(conn, {one, two}, gpu=2)
    assert _placed(conn, {one, two}) != {}  # "one" has 2 free now, "two" 4
    path = tmp_path / "gpuplaned.toml"
    path.write_text(f'[scheduler]\nplacement = "{configured}"\n' if configured else "")
    daemon = SimpleNamespace(config=load_config({"config": str(path)}, env={}))
    job_id = _submit(conn, {one, two})
    placed = {d.job.job_id: d.node_id for d in run_pass(registry, conn, placement_of(daemon))}
    assert placed == {job_id: {"one": one, "two": two}[expected]}
