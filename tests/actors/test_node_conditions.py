"""A node's conditions (issue 32, Slurm down): ``NodeContext.conditions`` raised and cleared by a
node's part, through the real monitor actor, the in-memory node link, a real store actor and
SQLite file: one event per change, the condition in every snapshot, the node not accepting new
work while it holds (a queued job stays queued), and shown by the node API, ``node show``,
``node list`` and MCP; cleared, the node takes the job."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import trio
from inprocess import passes_by_hand

from gpuplaned.actors import monitor
from gpuplaned.config import GpuSource, MonitorConfig, NodeConfig
from gpuplaned.domain.node_conditions import NODE_CONDITION_CLEARED, NODE_CONDITION_RAISED, NodeConditions
from gpuplaned.http.app import create_app
from gpuplaned.mcp import read_tools
from gpuplaned.mcp.args import NodeArgs
from gpuplaned.mcp.table import Call
from gpuplaned.node_context import NodeContext
from gpuplaned.protocol.agent import FRAMES, RECORD_BODIES, GpuInfo, Hello, JobStatus, NodeEvents, NodeSnapshot
from gpuplaned.runtime.context import ActorContext
from gpuplaned.service.link.nodes import LocalNodeLink
from gpuplaned.service.passes.dispatch import deliver, run_pass
from gpuplaned.store.writer import write
from gpuplanectl import render_nodes

UNREACHABLE = "slurmctld did not answer squeue within 10 s: timed out"


def test_each_change_makes_one_event_and_a_new_message_alone_none():
    clock = iter(range(1000, 2000))
    conditions = NodeConditions(now_ms=lambda: next(clock))
    assert conditions.raise_("slurm_unreachable", UNREACHABLE) is True
    assert conditions.raise_("slurm_unreachable", "slurmctld did not answer: connection refused") is False
    assert conditions.current() == {"slurm_unreachable": "slurmctld did not answer: connection refused"}
    events = conditions.pending()
    assert [(e.type, e.severity, e.context) for e in events] == [
        (NODE_CONDITION_RAISED, "warning", {"name": "slurm_unreachable", "message": UNREACHABLE})]
    conditions.sent(events)
    assert conditions.clear("slurm_unreachable") is True
    assert conditions.clear("slurm_unreachable") is False  # not held: nothing to clear
    assert conditions.current() == {}
    unsent = conditions.pending()
    conditions.raise_("other", "x")  # raised while the clear was being sent: kept for the next send
    conditions.sent(unsent)
    assert [(e.type, e.severity, e.context["name"]) for e in unsent] == [(NODE_CONDITION_CLEARED, "info",
                                                                          "slurm_unreachable")]
    assert [e.context["name"] for e in conditions.pending()] == ["other"]
    with pytest.raises(ValueError, match="a condition needs a name"):
        conditions.raise_("", "no name")


def test_the_new_fields_cross_the_uplink_as_they_are():
    """A remote agent sends the same messages as JSON (a snapshot as a frame, ``FRAMES``; an event or a
    job's report as a spooled record, ``RECORD_BODIES``): the snapshot's conditions, a condition's
    event and a WAITING report come out at the server as they went in."""
    conditions = NodeConditions(now_ms=lambda: 1)
    conditions.raise_("slurm_unreachable", UNREACHABLE)
    snapshot = NodeSnapshot(1, "fake", conditions=("slurm_unreachable",), accepting=False,
                            condition_messages=conditions.current())
    assert FRAMES.structure(json.loads(json.dumps(FRAMES.unstructure(snapshot)))) == snapshot
    for record in (NodeEvents(tuple(conditions.pending())), JobStatus("job_1", 1, "WAITING", message="Slurm: QOS")):
        assert RECORD_BODIES.structure(json.loads(json.dumps(RECORD_BODIES.unstructure(record)))) == record


@pytest.fixture
async def shared(tmp_path, nursery):
    async with passes_by_hand(tmp_path, nursery, node=NodeConfig(name="slurm-1", gpus=GpuSource("fake", 1)),
                              monitor=MonitorConfig(sample_interval_s=0.05, batch_interval_s=60.0)) as ctx:
        yield ctx


async def until(predicate, what: str):
    """``predicate()``'s first true value, looked at every 20 ms (the monitor samples every 50)."""
    deadline = trio.current_time() + 10
    while not (found := predicate()):
        assert trio.current_time() < deadline, f"timed out waiting for {what}"
        await trio.sleep(0.02)
    return found


def events_of(shared, node_id: str, kind: str):
    return shared.readers.run(lambda conn: conn.execute(
        "SELECT severity, message, context FROM events WHERE type = ? AND node_id = ? ORDER BY ts, id",
        (kind, node_id)).fetchall())


async def test_a_raised_condition_stops_new_work_until_cleared_with_one_event_each_way(shared, nursery):
    link = LocalNodeLink(shared)
    runner_send, runner_inbox = trio.open_memory_channel(16)
    ok = await link.hello(Hello("slurm-1", "0", (GpuInfo(0, "fake", 1024),)), runner_send)
    node_id = ok.node_id
    endpoint = SimpleNamespace(portfile=lambda: SimpleNamespace(endpoint="unix:/nonexistent/gpuplaned.sock"))
    node = NodeContext(shared.config, endpoint, link, runner=lambda: SimpleNamespace(node_id=node_id, live={}))
    _, inbox = trio.open_memory_channel(0)
    await nursery.start(monitor.run, ActorContext("monitor", inbox, {}, node))
    await until(lambda: (s := shared.nodes.snapshot(node_id)) is not None and s.accepting, "a first snapshot")
    client = create_app(shared)[0].test_client()

    node.conditions.raise_("slurm_unreachable", UNREACHABLE)
    snapshot = await until(lambda: (s := shared.nodes.snapshot(node_id)).condition_messages and s, "the condition")
    assert (snapshot.accepting, snapshot.conditions) == (False, ("slurm_unreachable",))
    raised = await events_of(shared, node_id, NODE_CONDITION_RAISED)
    assert [(severity, message, json.loads(context)) for severity, message, context in raised] == [
        ("warning", f"slurm_unreachable: {UNREACHABLE}", {"name": "slurm_unreachable", "message": UNREACHABLE})]

    response = await client.get("/api/v1/nodes/slurm-1")
    assert response.status_code == 200
    shown = (await response.get_json())["node"]
    assert (shown["status"], shown["accepting"], shown["conditions"]) == ("UNHEALTHY", False, ["slurm_unreachable"])
    assert shown["condition_messages"] == {"slurm_unreachable": UNREACHABLE}
    detail = render_nodes.node_detail(shown)
    assert "UNHEALTHY, not accepting jobs (slurm_unreachable)" in detail
    assert f"slurm_unreachable: {UNREACHABLE}" in detail
    assert "slurm_unreachable (not accepting jobs)" in render_nodes.node_list_table([shown])
    said = await read_tools.get_node_status(Call(shared, None, None), NodeArgs(node="slurm-1"))
    assert f"it takes no new work while slurm_unreachable: {UNREACHABLE}" in said.summary

    # A job waits while the condition holds; the same condition again (new words) is no new event.
    posted = await client.post("/api/v1/jobs", json={"command": ["train"], "cwd": "/", "gpu": 1})
    job_id = (await posted.get_json())["job"]["id"]
    placed = await write(shared.supervisor.ports["store"], lambda conn: run_pass(shared.nodes, conn))
    assert await deliver(shared, placed) == 0
    job = await (await client.get(f"/api/v1/jobs/{job_id}")).get_json()
    assert job["job"]["status"] == "QUEUED" and "not accepting jobs" in job["job"]["queue_reason"]
    node.conditions.raise_("slurm_unreachable", "slurmctld did not answer: connection refused")
    await until(lambda: shared.nodes.snapshot(node_id).condition_messages["slurm_unreachable"].endswith("refused"),
                "the new words")
    assert len(await events_of(shared, node_id, NODE_CONDITION_RAISED)) == 1

    node.conditions.clear("slurm_unreachable")
    snapshot = await until(lambda: (s := shared.nodes.snapshot(node_id)).accepting and s, "accepting again")
    assert (snapshot.conditions, snapshot.condition_messages) == ((), {})
    cleared = await events_of(shared, node_id, NODE_CONDITION_CLEARED)
    assert [(severity, json.loads(context)["name"]) for severity, _, context in cleared] == [
        ("info", "slurm_unreachable")]
    shown = (await (await client.get("/api/v1/nodes/slurm-1")).get_json())["node"]
    assert (shown["status"], shown["accepting"], shown["condition_messages"]) == ("ONLINE", True, {})
    placed = await write(shared.supervisor.ports["store"], lambda conn: run_pass(shared.nodes, conn))
    assert await deliver(shared, placed) == 1
    assert runner_inbox.receive_nowait().job.job_id == job_id
