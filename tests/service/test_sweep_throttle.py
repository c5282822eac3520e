"""A sweep's new max-parallel reaches the nodes holding its trials (issue 32 item 4), on the
server's side of the node link over a real store actor and SQLite file: PATCH
/api/v1/sweeps/{id}, or the sweep submitted again under its name with another --max-parallel,
sends each such node SweepThrottle after the commit; a node holding none of its trials gets none."""

from __future__ import annotations

import pytest
import trio
from inprocess import passes_by_hand

from gpuplaned.http.app import create_app
from gpuplaned.protocol.agent import Dispatch, Hello, PooledCapacity, SweepThrottle
from gpuplaned.service.link.nodes import LocalNodeLink
from gpuplaned.service.passes.dispatch import deliver, run_pass
from gpuplaned.store.writer import write


@pytest.fixture
async def shared(tmp_path, nursery):
    async with passes_by_hand(tmp_path, nursery) as ctx:
        yield ctx


async def slurm_node(shared, name):
    send, inbox = trio.open_memory_channel(64)
    hello = Hello(name, "0", (), labels=(name,), runner="slurm", pooled=PooledCapacity(1, 8))
    await LocalNodeLink(shared).hello(hello, send)
    return inbox


def drained(inbox):
    out = []
    while True:
        try:
            out.append(inbox.receive_nowait())
        except trio.WouldBlock:
            return out


async def test_patch_and_a_resubmit_send_the_new_limit_to_the_node_holding_the_trials(shared):
    hpc, other = await slurm_node(shared, "hpc"), await slurm_node(shared, "other")
    client = create_app(shared)[0].test_client()
    body = {"name": "lr", "job": {"command": ["train", "{x}"], "cwd": "/", "gpu": 1, "labels": ["hpc"]},
            "grid": {"x": [1, 2, 3]}, "max_parallel": 1}
    made = await client.post("/api/v1/sweeps", json=body)
    assert made.status_code == 201, await made.get_data()
    sweep_id = (await made.get_json())["sweep"]["id"]
    placed = await write(shared.supervisor.ports["store"], lambda conn: run_pass(shared.nodes, conn))
    assert await deliver(shared, placed) == 3  # past max-parallel 1: the Slurm node throttles them
    dispatched = drained(hpc)
    assert [(m.job.array.sweep_id, m.job.array.index, m.job.array.throttle) for m in dispatched
            if isinstance(m, Dispatch)] == [(sweep_id, i, 1) for i in range(3)]

    patched = await client.patch(f"/api/v1/sweeps/{sweep_id}", json={"max_parallel": 2})
    assert patched.status_code == 200, await patched.get_data()
    assert drained(hpc) == [SweepThrottle(sweep_id, 2)]
    again = await client.post("/api/v1/sweeps", json={**body, "max_parallel": None})
    assert again.status_code == 201 and (await again.get_json())["created"] == 0
    assert drained(hpc) == [SweepThrottle(sweep_id, 0)]  # no limit
    same = await client.post("/api/v1/sweeps", json={**body, "max_parallel": None})
    assert same.status_code == 201 and drained(hpc) == []  # nothing changed: nothing sent
    assert drained(other) == []
