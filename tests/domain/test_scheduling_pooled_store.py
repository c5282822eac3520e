"""A pooled node (Slurm) on a real SQLite file: its hello keeps its runner and capacity (migration
0027), its capacity counts its jobs in flight, the pass books no GPU index there, and every
dispatch says how many GPUs its job asked for (``JobSpecWire.gpus``)."""

from __future__ import annotations

import pytest

from gpuplaned.protocol.agent import GpuInfo, Hello, JobStatus, PooledCapacity
from gpuplaned.protocol.errors import ApiError
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.service.passes.dispatch import schedule
from gpuplaned.store import job_rows
from gpuplaned.store.database import load_migrations

NOW = 1_700_000_000_000


def _slurm(conn, name="hpc", gpus_per_job=2, max_jobs=2, labels=()):
    hello = Hello(name, "0", (), labels, runner="slurm", pooled=PooledCapacity(gpus_per_job, max_jobs))
    return job_rows.register_node(conn, hello, NOW)[0]


def _submit(conn, **spec):
    spec = JobSpec(**{"name": "j", "command": ("true",), "cwd": "/", "env": {}, "gpu": 1, **spec})
    return job_rows.insert_job(conn, spec, NOW, job_rows.capacities(conn))


def test_migration_0027_adds_the_runner_and_pooled_capacity_to_the_nodes_table(conn):
    assert load_migrations()[26].name.startswith("0027")
    columns = {row[1]: (row[2], row[4]) for row in conn.execute("PRAGMA table_info(nodes)")}
    assert columns["runner"] == ("TEXT", "'local'")
    assert columns["pooled_gpus_per_job"][0] == columns["pooled_max_jobs"][0] == "INTEGER"


def test_a_slurm_hello_is_kept_and_a_local_hello_after_it_clears_it(conn):
    node_id = _slurm(conn, gpus_per_job=4, max_jobs=8)
    row = conn.execute("SELECT runner, pooled_gpus_per_job, pooled_max_jobs FROM nodes WHERE id = ?",
                       (node_id,)).fetchone()
    assert row == ("slurm", 4, 8)
    [cap] = job_rows.capacities(conn)
    assert (cap.pooled, cap.jobs_in_flight, cap.free_gpus, cap.total_gpus) == (PooledCapacity(4, 8), 0, (), 0)
    job_rows.register_node(conn, Hello("hpc", "0", (GpuInfo(0, "H100", 81559),)), NOW)
    assert conn.execute("SELECT runner, pooled_gpus_per_job, pooled_max_jobs FROM nodes WHERE id = ?",
                        (node_id,)).fetchone() == ("local", None, None)
    [cap] = job_rows.capacities(conn)
    assert (cap.pooled, cap.total_gpus, cap.free_gpus) == (None, 1, (0,))


def test_jobs_in_flight_are_the_nodes_dispatching_and_running_jobs_cpu_ones_too(conn):
    node_id = _slurm(conn, max_jobs=3)
    ids = [_submit(conn, gpu=gpu) for gpu in (2, 0, 1, 1)]
    dispatched = schedule(conn, NOW, {node_id})
    assert [(d.job.job_id, d.node_id, d.job.gpu_indexes, d.job.gpus) for d in dispatched] == [
        (ids[0], node_id, (), 2), (ids[1], node_id, (), 0), (ids[2], node_id, (), 1)]
    assert conn.execute("SELECT count(*) FROM gpu_slots").fetchone() == (0,)
    [cap] = job_rows.capacities(conn, {node_id})
    assert cap.jobs_in_flight == 3
    assert schedule(conn, NOW, {node_id}) == []  # max_jobs reached: the fourth waits
    assert job_rows.apply_status(conn, node_id, JobStatus(ids[0], 1, "RUNNING"), NOW).applied
    assert job_rows.capacities(conn, {node_id})[0].jobs_in_flight == 3  # RUNNING still counts
    assert job_rows.apply_status(conn, node_id, JobStatus(ids[1], 1, "SUCCEEDED", exit_code=0), NOW).applied
    assert job_rows.capacities(conn, {node_id})[0].jobs_in_flight == 2
    [last] = schedule(conn, NOW, {node_id})
    assert (last.job.job_id, last.job.gpus) == (ids[3], 1)


def test_a_local_dispatch_carries_its_gpu_count_beside_its_indexes(conn):
    box = job_rows.register_node(conn, Hello("box", "0", tuple(GpuInfo(i, "H100", 81559) for i in range(2))), NOW)[0]
    job_id = _submit(conn, gpu=2)
    [d] = schedule(conn, NOW, {box})
    assert (d.job.job_id, d.job.gpu_indexes, d.job.gpus) == (job_id, (0, 1), 2)


def test_submit_refuses_a_job_bigger_than_any_pooled_node_takes(conn):
    _slurm(conn, gpus_per_job=2)
    with pytest.raises(ApiError) as caught:
        _submit(conn, gpu=3)
    assert caught.value.message == "gpu: the job asks for 3 GPU(s) but pooled node 'hpc' takes at most 2 GPU(s) a job"


def test_a_job_naming_a_gpu_model_queues_with_the_pooled_nodes_reason(conn):
    node_id = _slurm(conn)
    job_id = _submit(conn, gpu_model="A100")
    reason = ("pooled node 'hpc' cannot promise GPUs whose model contains 'A100': Slurm places its GPUs, "
              "whose model and memory GPUPlane does not know")
    assert job_rows.get_job(conn, job_id).queue_reason == reason
    assert schedule(conn, NOW, {node_id}) == []
    assert job_rows.get_job(conn, job_id).queue_reason == reason
