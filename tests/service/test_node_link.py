"""The node link's server half in role all (``LocalNodeLink``) over a real store actor and
SQLite file: log tails kept, live followers fed, the logs actor told who follows; and
dispatch woken, never run, by a submit and a job's end."""

from __future__ import annotations

import pytest
import trio
from inprocess import passes_by_hand


from gpuplaned.http.app import create_app
from gpuplaned.protocol.agent import GpuInfo, Hello, JobStatus, LogChunk, LogFollow, LogLines, LogOffsets
from gpuplaned.service.api import jobs
from gpuplaned.service.link.nodes import LocalNodeLink
from gpuplaned.service.passes.dispatch import WAKE, deliver, run_pass
from gpuplaned.store.writer import write


@pytest.fixture
async def shared(tmp_path, nursery):
    async with passes_by_hand(tmp_path, nursery, ready=False) as ctx:
        yield ctx


def stored(shared, job_id):
    return shared.readers.run(lambda conn: conn.execute(
        "SELECT stream, offset, line FROM job_logs WHERE job_id = ? ORDER BY stream, offset", (job_id,)).fetchall())


async def test_log_lines_keep_the_tail_and_feed_only_live_followers(shared):
    link = LocalNodeLink(shared)
    lines = tuple((i * 10, f"line {i}") for i in range(1, 6))
    async with shared.log_feeds.subscribe("job_a", 1, maxlen=10) as followed:
        await link.log_lines(LogLines(3, (
            LogChunk("job_a", 1, "stdout", 0, 60, lines, complete=True),  # followed: every line
            LogChunk("job_b", 1, "stderr", 0, 60, lines[-3:]),  # not followed: its tail only
        ), served=(("job_a", 1),)))
        batch = followed.pending and await followed.__anext__()
        assert batch.stream == "stdout" and (batch.start, batch.end) == (0, 60)
        assert batch.lines == lines
        assert batch.frames[0] == b"id: 10\nevent: stdout\ndata: line 1\n\n"
        assert shared.log_feeds.served_within(("job_a", 1), 1.0)
        assert not followed.pending  # one batch per stream per pass
    # The store keeps the last tail_lines of each stream, whichever way they came.
    assert [tuple(r) for r in await stored(shared, "job_a")] == [
        ("stdout", 30, "line 3"), ("stdout", 40, "line 4"), ("stdout", 50, "line 5")]
    assert [r[2] for r in await stored(shared, "job_b")] == ["line 3", "line 4", "line 5"]
    await link.log_lines(LogLines(3, (LogChunk("job_a", 1, "stdout", 60, 70, ((60, "line 6"),)),)))
    assert [r[2] for r in await stored(shared, "job_a")] == ["line 4", "line 5", "line 6"]
    reply = await link.log_offsets(LogOffsets((("job_a", 1), ("job_c", 1))))
    assert reply.offsets == (("job_a", 1, "stdout", 60),)  # a restarted tailer resumes there


async def test_the_logs_actor_hears_who_follows_and_a_new_one_learns_it_all(shared):
    link = LocalNodeLink(shared)
    send, inbox = trio.open_memory_channel(10)
    async with shared.log_feeds.subscribe("job_a", 1):
        link.follow_logs(send)  # a (re)started logs actor: told what is followed already
        assert inbox.receive_nowait() == LogFollow("job_a", 1, True)
        async with shared.log_feeds.subscribe("job_b", 2):
            assert inbox.receive_nowait() == LogFollow("job_b", 2, True)
        assert inbox.receive_nowait() == LogFollow("job_b", 2, False)
    assert inbox.receive_nowait() == LogFollow("job_a", 1, False)


async def test_a_submit_and_a_jobs_end_wake_the_scheduler_whose_pass_places_the_job(shared):
    link = LocalNodeLink(shared)
    runner_send, runner_inbox = trio.open_memory_channel(10)
    wakes = shared.supervisor._children["scheduler"].inbox_receive
    ok = await link.hello(Hello("n1", "0", (GpuInfo(0, "fake", 1024),)), runner_send)
    assert wakes.receive_nowait() is WAKE  # a node came: its slots may take queued work
    shared.lifecycle.ready()
    response = await create_app(shared)[0].test_client().post("/api/v1/jobs", json={
        "command": ["true"], "cwd": "/", "gpu": 1})
    assert response.status_code == 201
    job = await jobs.get_job(shared, (await response.get_json())["job"]["id"])
    assert job.status == "QUEUED"  # placing it is the scheduler's pass, not the submit's
    assert wakes.receive_nowait() is WAKE
    with pytest.raises(trio.WouldBlock):
        runner_inbox.receive_nowait()  # nothing was dispatched
    # What the woken scheduler does (actors/scheduler.py _pass).
    placed = await write(shared.supervisor.ports["store"], lambda conn: run_pass(shared.nodes, conn))
    assert await deliver(shared, placed) == 1
    dispatch = runner_inbox.receive_nowait()
    assert (dispatch.job.job_id, dispatch.job.attempt, dispatch.job.gpu_indexes) == (job.id, 1, (0,))
    await link.report(ok.node_id, JobStatus(job.id, 1, "RUNNING", pid=1))
    with pytest.raises(trio.WouldBlock):
        wakes.receive_nowait()  # a start frees nothing
    await link.report(ok.node_id, JobStatus(job.id, 1, "SUCCEEDED", exit_code=0))
    assert wakes.receive_nowait() is WAKE  # its slot is free for the next job
    assert (await jobs.get_job(shared, job.id)).status == "SUCCEEDED"
