"""A Slurm node through the server's half of the node link (role all, a real store actor and
SQLite file): its hello registers pooled capacity, the woken pass hands it jobs with their GPU
count and no GPU index, and the API, MCP and ``gpuplanectl node list|show`` show what it offers."""

from __future__ import annotations

import pytest
import trio
from inprocess import passes_by_hand

from gpuplaned.http.app import create_app
from gpuplaned.mcp import args, read_tools
from gpuplaned.mcp.table import Call
from gpuplaned.protocol.agent import GpuInfo, Hello, JobStatus, PooledCapacity
from gpuplaned.service.link.nodes import LocalNodeLink
from gpuplaned.service.passes.dispatch import deliver, run_pass
from gpuplaned.store.writer import write
from gpuplanectl.render_nodes import node_detail, node_list_table


@pytest.fixture
async def shared(tmp_path, nursery):
    async with passes_by_hand(tmp_path, nursery) as ctx:
        yield ctx


async def test_a_slurm_node_takes_jobs_by_count_and_every_view_shows_its_pooled_capacity(shared):
    link = LocalNodeLink(shared)
    runner_send, runner_inbox = trio.open_memory_channel(10)
    ok = await link.hello(Hello("hpc", "0", (), ("slurm",), runner="slurm", pooled=PooledCapacity(2, 2)),
                          runner_send)
    client = create_app(shared)[0].test_client()
    ids = []
    for gpu in (2, 0, 1):
        response = await client.post("/api/v1/jobs", json={"command": ["true"], "cwd": "/", "gpu": gpu})
        assert response.status_code == 201
        ids.append((await response.get_json())["job"]["id"])
    too_big = await client.post("/api/v1/jobs", json={"command": ["true"], "cwd": "/", "gpu": 3})
    assert too_big.status_code == 400
    assert (await too_big.get_json())["error"]["message"] == \
        "gpu: the job asks for 3 GPU(s) but pooled node 'hpc' takes at most 2 GPU(s) a job"

    placed = await write(shared.supervisor.ports["store"], lambda conn: run_pass(shared.nodes, conn))
    assert await deliver(shared, placed) == 2  # max_jobs 2: the third waits, Slurm is not asked for more
    sent = [runner_inbox.receive_nowait().job for _ in range(2)]
    assert [(j.job_id, j.gpu_indexes, j.gpus) for j in sent] == [(ids[0], (), 2), (ids[1], (), 0)]

    body = await (await client.get("/api/v1/nodes/hpc")).get_json()
    node = body["node"]
    assert (node["runner"], node["pooled"], node["gpus"]) == (
        "slurm", {"gpus_per_job": 2, "max_jobs": 2, "jobs_in_flight": 2}, [])
    listed = (await (await client.get("/api/v1/nodes")).get_json())["nodes"]
    assert [(n["name"], n["runner"], n["pooled"]["jobs_in_flight"]) for n in listed] == [("hpc", "slurm", 2)]

    detail = node_detail(node, now=0).splitlines()
    assert "runner:      slurm" in detail
    assert "pooled:      up to 2 GPUs a job, 2 jobs at once, 2 in flight" in detail
    assert "GPUs: placed by Slurm for each job" in detail
    assert not any(line.startswith("cpu jobs:") for line in detail)

    mcp = await read_tools.get_node_status(Call(shared, None, None), args.NodeArgs(node="hpc"))
    assert mcp.summary.startswith(
        "Node hpc is ONLINE with pooled (slurm): up to 2 GPUs a job, 2 jobs at once, 2 in flight")
    assert mcp.data["node"].pooled.jobs_in_flight == 2

    await link.report(ok.node_id, JobStatus(ids[1], 1, "SUCCEEDED", exit_code=0))
    placed = await write(shared.supervisor.ports["store"], lambda conn: run_pass(shared.nodes, conn))
    assert [(d.job.job_id, d.job.gpus) for d in placed] == [(ids[2], 1)]


async def test_a_local_node_shows_no_pooled_capacity_and_the_list_a_runner_column_only_beside_a_slurm_node(shared):
    link = LocalNodeLink(shared)
    send, _ = trio.open_memory_channel(10)
    await link.hello(Hello("box", "0", (GpuInfo(0, "fake", 1024),)), send)
    client = create_app(shared)[0].test_client()
    [box] = (await (await client.get("/api/v1/nodes")).get_json())["nodes"]
    assert (box["runner"], box["pooled"]) == ("local", None)
    assert "RUNNER" not in node_list_table([box], now=0)
    mcp = await read_tools.list_nodes(Call(shared, None, None), args.NoArgs())
    assert "box (ONLINE, 1 GPUs)" in mcp.summary

    await link.hello(Hello("hpc", "0", (), runner="slurm", pooled=PooledCapacity(4, 8)), send)
    nodes = (await (await client.get("/api/v1/nodes")).get_json())["nodes"]
    lines = node_list_table(nodes, now=0).splitlines()
    assert lines[0].split() == ["NODE", "STATUS", "RUNNER", "BACKEND", "GPUS", "FREE", "CPU", "JOBS", "CONDITIONS"]
    assert lines[1].split()[:7] == ["box", "ONLINE", "local", "none", "1", "1", "0/2"]
    assert lines[2].split()[:7] == ["hpc", "ONLINE", "slurm", "none", "4/job", "8", "jobs"]
    assert lines[2].split()[7] == "pooled"
    mcp = await read_tools.list_nodes(Call(shared, None, None), args.NoArgs())
    assert "hpc (ONLINE, pooled (slurm): up to 4 GPUs a job, 8 jobs at once, 0 in flight)" in mcp.summary
