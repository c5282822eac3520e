"""A node's WAITING report (issue 32: a Slurm node's pending reason), on the server's side of the
node link over a real store actor and SQLite file: the job stays DISPATCHING with the node's words
as its ``wait_reason`` (REST, ``job show``, ``job list``, MCP), one JOB_WAITING event per change of
reason, a report not about the waiting attempt on that node ignored, RUNNING clearing it, and no
dispatch timeout for an attempt its node said it holds."""

from __future__ import annotations

import json
import re

import pytest
import trio
from inprocess import passes_by_hand

from gpuplaned.domain.event_types import EVENT_TYPES, JOB_WAITING
from gpuplaned.http.app import create_app
from gpuplaned.mcp import read_tools
from gpuplaned.mcp.args import JobArgs
from gpuplaned.mcp.table import Call
from gpuplaned.protocol.agent import GpuInfo, Hello, JobStatus
from gpuplaned.service.link.nodes import LocalNodeLink
from gpuplaned.service.passes.dispatch import deliver, run_pass
from gpuplaned.store import job_rows
from gpuplaned.store.writer import write
from gpuplanectl import render


@pytest.fixture
async def shared(tmp_path, nursery):
    async with passes_by_hand(tmp_path, nursery) as ctx:
        yield ctx


class Node:
    """A node said hello over the in-memory link; its dispatches arrive in ``inbox``."""

    def __init__(self, shared, name: str, gpus: int) -> None:
        self.shared, self.name, self.gpus = shared, name, gpus
        self.link = LocalNodeLink(shared)
        self.send, self.inbox = trio.open_memory_channel(16)

    async def hello(self) -> Node:
        ok = await self.link.hello(Hello(self.name, "0", tuple(GpuInfo(i, "fake", 1024) for i in range(self.gpus))),
                                   self.send)
        self.node_id = ok.node_id
        return self

    async def report(self, job_id: str, state: str, attempt: int = 1, message: str | None = None) -> None:
        await self.link.report(self.node_id, JobStatus(job_id, attempt, state, message=message))


async def submit_and_dispatch(shared, client, node: str) -> str:
    response = await client.post("/api/v1/jobs", json={"command": ["train"], "cwd": "/", "gpu": 1, "node": node})
    assert response.status_code == 201
    job_id = (await response.get_json())["job"]["id"]
    placed = await write(shared.supervisor.ports["store"], lambda conn: run_pass(shared.nodes, conn))
    assert await deliver(shared, placed) == 1
    return job_id


async def get(client, job_id: str) -> dict:
    response = await client.get(f"/api/v1/jobs/{job_id}")
    assert response.status_code == 200
    return (await response.get_json())["job"]


def waiting_events(shared, job_id: str) -> list[tuple[str, str, str]]:
    rows = shared.readers.run(lambda conn: conn.execute(
        "SELECT severity, message, context FROM events WHERE type = ? AND job_id = ? ORDER BY ts, id",
        (JOB_WAITING, job_id)).fetchall())
    return rows


async def test_a_waiting_job_stays_dispatching_with_its_nodes_reason_and_one_event_per_change(shared):
    node = await Node(shared, "slurm-1", gpus=1).hello()
    client = create_app(shared)[0].test_client()
    job_id = await submit_and_dispatch(shared, client, "slurm-1")
    dispatch = node.inbox.receive_nowait()
    assert (dispatch.job.job_id, dispatch.job.attempt) == (job_id, 1)
    assert (await get(client, job_id))["wait_reason"] is None  # dispatched: nothing said yet

    await node.report(job_id, "WAITING", message="Slurm: Priority")
    job = await get(client, job_id)
    assert (job["status"], job["wait_reason"], job["queue_reason"]) == ("DISPATCHING", "Slurm: Priority", None)
    await node.report(job_id, "WAITING", message="Slurm: Priority")  # said again (a resend): nothing new
    await node.report(job_id, "WAITING", message="Slurm: Resources")
    job = await get(client, job_id)
    assert (job["status"], job["wait_reason"]) == ("DISPATCHING", "Slurm: Resources")
    events = await waiting_events(shared, job_id)
    assert [(severity, message) for severity, message, _ in events] == [
        ("info", f"job {job_id} attempt 1 waits to start: Slurm: Priority"),
        ("info", f"job {job_id} attempt 1 waits to start: Slurm: Resources")]
    assert json.loads(events[1][2]) == {"attempt": 1, "reason": "Slurm: Resources"}
    assert JOB_WAITING in EVENT_TYPES  # GET /api/v1/events?type=JOB_WAITING takes it

    # Where it shows: job show, job list's WAIT column, MCP's get_job and list_jobs.
    assert re.search(r"^waiting: +Slurm: Resources$", render.job_detail(job), re.M)
    header, row = render.job_table([job]).splitlines()
    assert header.split()[-1] == "WAIT" and row.rstrip().endswith("Slurm: Resources")
    said = await read_tools.get_job(Call(shared, None, None), JobArgs(job_id=job_id))
    assert "its node has not started it yet: Slurm: Resources" in said.summary
    listed = await (await client.get("/api/v1/jobs?status=DISPATCHING")).get_json()
    assert [(j["id"], j["wait_reason"]) for j in listed["jobs"]] == [(job_id, "Slurm: Resources")]

    # It starts: RUNNING clears the reason; a late WAITING after it changes nothing.
    await node.report(job_id, "RUNNING")
    job = await get(client, job_id)
    assert (job["status"], job["wait_reason"]) == ("RUNNING", None)
    await node.report(job_id, "WAITING", message="Slurm: Priority")
    job = await get(client, job_id)
    assert (job["status"], job["wait_reason"]) == ("RUNNING", None)
    assert len(await waiting_events(shared, job_id)) == 2
    assert "waiting" not in render.job_detail(job)
    await node.report(job_id, "SUCCEEDED")
    assert (await get(client, job_id))["status"] == "SUCCEEDED"


async def test_a_waiting_report_not_about_the_attempt_waiting_on_that_node_is_ignored(shared, caplog):
    node = await Node(shared, "slurm-1", gpus=1).hello()
    other = await Node(shared, "other", gpus=1).hello()
    client = create_app(shared)[0].test_client()
    job_id = await submit_and_dispatch(shared, client, "slurm-1")
    await node.report(job_id, "WAITING", message="Slurm: Priority")

    await node.report(job_id, "WAITING", attempt=2, message="Slurm: QOS")  # an attempt it does not have
    await other.report(job_id, "WAITING", message="Slurm: QOS")  # another node's word on it
    await node.report("job_nosuch", "WAITING", message="Slurm: QOS")
    job = await get(client, job_id)
    assert (job["status"], job["attempt"], job["wait_reason"]) == ("DISPATCHING", 1, "Slurm: Priority")
    assert len(await waiting_events(shared, job_id)) == 1
    ignored = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ignored WAITING report")]
    assert len(ignored) == 3 and "stale report for attempt 2" in ignored[0] and "unknown job" in ignored[2]

    # Back in the queue (the node never started it): the next attempt shows nothing of the old reason.
    await node.report(job_id, "REQUEUE", message="never started")
    job = await get(client, job_id)
    assert (job["status"], job["wait_reason"]) == ("QUEUED", None)
    await write(shared.supervisor.ports["store"], lambda conn: run_pass(shared.nodes, conn))
    assert await shared.readers.run(lambda conn: conn.execute(
        "SELECT wait_reason FROM jobs WHERE id = ?", (job_id,)).fetchone()) == (None,)
    await node.report(job_id, "WAITING", attempt=1, message="Slurm: Priority")  # the old attempt's, late
    assert len(await waiting_events(shared, job_id)) == 1


async def test_no_dispatch_timeout_takes_an_attempt_its_node_said_it_holds(shared):
    """A remote node that never acknowledges a dispatch has it requeued (``unacked_dispatches``);
    one that said WAITING has it, however long Slurm keeps it queued."""
    node = await Node(shared, "slurm-1", gpus=2).hello()
    client = create_app(shared)[0].test_client()
    waiting = await submit_and_dispatch(shared, client, "slurm-1")
    silent = await submit_and_dispatch(shared, client, "slurm-1")
    await node.report(waiting, "WAITING")  # no words: still waiting, in the daemon's words
    assert (await get(client, waiting))["wait_reason"] == job_rows.WAITING_UNSAID
    far = 2 ** 62
    unacked = await shared.readers.run(lambda conn: job_rows.unacked_dispatches(conn, node.node_id, far))
    assert [job_id for job_id, _attempt, _tries in unacked] == [silent]
