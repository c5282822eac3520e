"""The job path in virtual time: the store, scheduler and runner actors under a supervisor,
over memory channels (the runner's node link is the real ``LocalNodeLink``), jobs played by
a ``FakeLauncher``, ``autojump_clock``. Minutes of queueing, retries and timeouts run in
milliseconds, with the same SQL, state table and scheduling passes as the daemon's."""

from __future__ import annotations

import contextlib
import functools
import math
import sqlite3
from types import SimpleNamespace

import attrs
import pytest
import trio
from runnerkit import config

from gpuplaned.actors import runner, scheduler, store
from gpuplaned.config import Config
from gpuplaned.node_context import LogsPort, NodeContext
from gpuplaned.protocol.agent import Cancel
from gpuplaned.protocol.converter import structure
from gpuplaned.protocol.job_wire import JobSpec, JobSubmit
from gpuplaned.runtime.broadcast import Broadcast
from gpuplaned.runtime.spec import ActorSpec
from gpuplaned.runtime.supervisor import Supervisor
from gpuplaned.service.api import jobs
from gpuplaned.service.link.log_feeds import LogFeeds
from gpuplaned.service.link.nodes import LocalNodeLink
from gpuplaned.service.link.registry import NodeRegistry, now_ms
from gpuplaned.service.passes.dispatch import wake_scheduler
from gpuplaned.store import job_rows
from gpuplaned.store.writer import LAZY_WAIT_S, Rider, riding, write
from gpuplaned.testing.launcher import FakeLauncher, Script, inline


@attrs.define
class Server:
    """The server side's capabilities that the store, the scheduler and the node link use."""

    config: Config
    nodes: NodeRegistry = attrs.Factory(NodeRegistry)
    event_feed: Broadcast = attrs.Factory(Broadcast)
    changes: Broadcast = attrs.Factory(Broadcast)  # the store publishes what each commit changed
    log_feeds: LogFeeds = attrs.Factory(LogFeeds)
    readers: None = None
    supervisor: Supervisor | None = None

    async def submit(self, name: str, *, max_attempts: int = 1, timeout_s: float | None = None) -> str:
        spec = JobSpec(name=name, command=("train", name), cwd="/", env={}, gpu=1, max_attempts=max_attempts,
                       timeout_s=timeout_s)
        job_id = await self.write(lambda conn: job_rows.insert_job(conn, spec, now_ms(), job_rows.capacities(conn)))
        wake_scheduler(self)
        return job_id

    async def job(self, job_id: str) -> job_rows.Job:
        return await self.write(lambda conn: job_rows.get_job(conn, job_id))

    async def runs(self, job_id: str) -> list[tuple[int, str, str | None]]:
        return await self.write(lambda conn: conn.execute(
            "SELECT attempt, status, failure_reason FROM runs WHERE job_id = ? ORDER BY attempt", (job_id,)).fetchall())

    async def cancel(self, job_id: str) -> None:
        outcome = await self.write(lambda conn: job_rows.cancel_job(conn, job_id, now_ms()))
        if outcome.node_id is not None:
            await self.nodes.send(outcome.node_id, Cancel(job_id, outcome.job.attempt))

    async def write(self, apply):
        assert self.supervisor is not None
        return await write(self.supervisor.ports["store"], apply, small=True)


@pytest.fixture(autouse=True)
def no_checkpoints(monkeypatch):
    # The store checkpoints on a worker thread, and while a thread runs the autojump clock
    # jumps on (every task is blocked): writes on the job path are small, committed on the
    # event loop's thread, so without checkpoints nothing here waits on a thread and the
    # times below are exact.
    monkeypatch.setattr(store, "CHECKPOINT_INTERVAL_S", math.inf)


async def start(nursery, tmp_path, launcher: FakeLauncher, gpus: int = 1) -> Server:
    cfg = config(tmp_path, gpus)
    server = Server(cfg)
    run_runner = functools.partial(runner.run, launcher=launcher.open, blocking=inline)
    specs = [
        ActorSpec("store", store.run, frozenset({"all"}), graceful_stop=True, inbox_size=1024),
        ActorSpec("scheduler", scheduler.run, frozenset({"all"}), depends_on=("store",)),
        ActorSpec("runner", run_runner, frozenset({"all"}), depends_on=("store", "scheduler"), inbox_size=256),
    ]
    server.supervisor = Supervisor(specs, server)
    logs_send, _ = trio.open_memory_channel[object](math.inf)  # no logs actor: what it is told is dropped
    endpoint = SimpleNamespace(portfile=lambda: SimpleNamespace(endpoint="unix:/nonexistent/gpuplaned.sock"))
    server.supervisor.shared_for["runner"] = NodeContext(cfg, endpoint, LocalNodeLink(server), LogsPort(logs_send))
    await nursery.start(server.supervisor.run)
    while not server.nodes.connected():  # the runner's hello
        await trio.sleep(0.01)
    return server


def by_name(**scripts: Script):
    """A FakeLauncher script by the job's name (its command is ``train <name>``), by attempt:
    ``name=Script`` for every attempt, ``name_2=Script`` for the second."""
    def script(request):
        name = request.argv[1]
        return scripts.get(f"{name}_{request.attempt}") or scripts.get(name) or Script()
    return script


async def test_a_job_queued_behind_another_starts_when_its_gpu_comes_free(nursery, tmp_path, autojump_clock):
    server = await start(nursery, tmp_path, FakeLauncher(script=by_name(a=Script(runs_s=1800.0),
                                                                          b=Script(runs_s=600.0))))
    t0 = trio.current_time()
    a = await server.submit("a")
    await trio.sleep(1.0)
    b = await server.submit("b")
    await trio.sleep(1.0)
    assert ((await server.job(a)).status, (await server.job(b)).status) == ("RUNNING", "QUEUED")
    await trio.sleep_until(t0 + 1799.0)  # half an hour in the queue
    assert (await server.job(b)).status == "QUEUED"
    await trio.sleep_until(t0 + 1801.0)
    assert ((await server.job(a)).status, (await server.job(b)).status) == ("SUCCEEDED", "RUNNING")
    await trio.sleep_until(t0 + 1800.0 + 601.0)
    assert (await server.job(b)).status == "SUCCEEDED"


async def test_a_failed_attempt_is_retried_as_a_new_attempt(nursery, tmp_path, autojump_clock):
    server = await start(nursery, tmp_path, FakeLauncher(script=by_name(flaky_1=Script(runs_s=30.0, exit_code=1),
                                                                          flaky_2=Script(runs_s=30.0))))
    t0 = trio.current_time()
    job_id = await server.submit("flaky", max_attempts=2)
    await trio.sleep_until(t0 + 31.0)
    job = await server.job(job_id)
    assert (job.status, job.attempt) == ("RUNNING", 2)  # queued again, and placed at once
    await trio.sleep_until(t0 + 62.0)
    job = await server.job(job_id)
    assert (job.status, job.attempt) == ("SUCCEEDED", 2)
    assert await server.runs(job_id) == [(1, "FAILED", "EXIT_CODE"), (2, "SUCCEEDED", None)]


async def test_a_cancel_while_the_job_starts_is_carried_out_once_it_is_up(nursery, tmp_path, autojump_clock):
    launcher = FakeLauncher(default=Script(runs_s=3600.0, spawn_s=5.0, stops_after_s=2.0))
    server = await start(nursery, tmp_path, launcher)
    t0 = trio.current_time()
    job_id = await server.submit("slow-start")
    await trio.sleep(1.0)
    assert (await server.job(job_id)).status == "DISPATCHING"
    await server.cancel(job_id)
    await trio.sleep_until(t0 + 5.5)
    assert (await server.job(job_id)).status == "RUNNING"  # up, and its cancel is with the launcher
    assert launcher.cancels == [f"{job_id}/1"]
    await trio.sleep_until(t0 + 8.0)
    job = await server.job(job_id)
    assert (job.status, job.cancel_requested) == ("CANCELLED", True)


async def test_a_job_past_its_timeout_fails_and_frees_its_gpu(nursery, tmp_path, autojump_clock):
    launcher = FakeLauncher(script=by_name(long=Script(runs_s=86_400.0, stops_after_s=3.0), next=Script(runs_s=10.0)))
    server = await start(nursery, tmp_path, launcher)
    t0 = trio.current_time()
    long = await server.submit("long", timeout_s=3600.0)
    await trio.sleep(1.0)
    after = await server.submit("next")
    await trio.sleep_until(t0 + 3604.0)
    job = await server.job(long)
    assert (job.status, job.failure_reason, job.failure_message) == ("FAILED", "TIMEOUT", "timed out")
    assert (await server.job(after)).status == "RUNNING"
    events = await server.write(lambda conn: conn.execute("SELECT type FROM events WHERE job_id = ?",
                                                           (long,)).fetchall())
    assert events == [("JOB_TIMEOUT",)]


@pytest.mark.parametrize("gpus, jobs, expected_s", [(1, 4, 4 * 120.0), (2, 4, 2 * 120.0)])
async def test_jobs_are_run_as_the_gpus_allow(nursery, tmp_path, autojump_clock, gpus, jobs, expected_s):
    server = await start(nursery, tmp_path, FakeLauncher(default=Script(runs_s=120.0)), gpus=gpus)
    t0 = trio.current_time()
    ids = [await server.submit(f"j{i}") for i in range(jobs)]
    while [(await server.job(i)).status for i in ids] != ["SUCCEEDED"] * jobs:
        await trio.sleep(1.0)
    assert trio.current_time() - t0 == pytest.approx(expected_s, abs=1.0)


async def test_a_requests_submit_is_placed_with_its_insert_not_at_the_next_tick(nursery, tmp_path, autojump_clock):
    """A REST submit carries its audit record (``store.writer.Rider``) and still wakes the
    scheduler just before its insert is queued, so the pass lands behind it: placed at once,
    not up to a TICK later (it was, while taking the rider awaited before the insert)."""
    server = await start(nursery, tmp_path, FakeLauncher(default=Script(runs_s=60.0)))
    await trio.sleep(0.1)  # the start's passes are done: the next tick is TICK off
    body = structure({"command": ["train", "now"], "cwd": str(tmp_path), "gpu": 1}, JobSubmit)
    recorded = []
    t0 = trio.current_time()
    with riding(Rider(lambda conn: recorded.append(True))):
        job = await jobs.submit(server, body)
    while (await server.job(job.id)).status == "QUEUED":
        await trio.sleep(0.001)
    assert trio.current_time() - t0 < 0.05 < scheduler.TICK
    assert recorded == [True]


async def test_a_submit_returns_once_its_jobs_spawn_request_is_with_the_launcher(nursery, tmp_path, autojump_clock):
    """The reply's own work (the job's view, its JSON, the send) waits for the job's start: a
    submit to a free slot returns with the spawn request already written, not yielded the event
    loop to (it was, half the time: trio runs the tasks a commit wakes in either order)."""
    launcher = FakeLauncher(default=Script(runs_s=60.0))
    server = await start(nursery, tmp_path, launcher)
    await trio.sleep(0.1)  # the start's passes are done
    for i in range(20):  # each order trio may pick
        body = structure({"command": ["train", f"j{i}"], "cwd": str(tmp_path), "gpu": 1}, JobSubmit)
        job = await jobs.submit(server, body)
        assert [r.job_id for r in launcher.spawn_requests] == [job.id]
        await server.cancel(job.id)
        while (await server.job(job.id)).status != "CANCELLED":
            await trio.sleep(0.1)
        launcher.spawn_requests.clear()


def transactions(statements: list[str]) -> list[list[str]]:
    """The statements the store ran, by transaction."""
    out: list[list[str]] = []
    for sql in statements:
        if sql.startswith("BEGIN"):
            out.append([])
        elif out and sql != "COMMIT":
            out[-1].append(sql)
    return out


async def test_a_short_jobs_start_commits_in_the_transaction_of_its_end(nursery, tmp_path, autojump_clock, caplog):
    """The runner does not wait on a job's RUNNING (``NodeLink.report_soon``): queued first, it
    is applied first, however soon the job ends, and it waits for its end's transaction instead
    of taking one of its own (``Write.lazy``)."""
    server = await start(nursery, tmp_path, FakeLauncher(default=Script(runs_s=0.0)))
    statements: list[str] = []
    server.supervisor.handle("store")._conn.set_trace_callback(statements.append)
    job_id = await server.submit("instant")
    while (await server.job(job_id)).status != "SUCCEEDED":
        await trio.sleep(0.001)
    started = [t for t in transactions(statements) if any("UPDATE jobs SET status = 'RUNNING'" in s for s in t)]
    assert len(started) == 1 and any("UPDATE jobs SET status = 'SUCCEEDED'" in s for s in started[0])
    job = await server.job(job_id)
    assert job.started_at is not None and job.started_at <= job.finished_at
    assert await server.runs(job_id) == [(1, "SUCCEEDED", None)]
    assert not [r for r in caplog.records if "ignored" in r.getMessage()]


async def test_a_long_jobs_start_commits_by_itself_within_the_lazy_wait(nursery, tmp_path, autojump_clock):
    launcher = FakeLauncher(default=Script(runs_s=600.0))
    server = await start(nursery, tmp_path, launcher)
    job_id = await server.submit("long")
    while not launcher.jobs:  # no write meanwhile: it would take the start into its transaction
        await trio.sleep(0.001)
    [spawned] = launcher.jobs.values()

    def status() -> str:  # read as another process would, writing nothing
        with contextlib.closing(sqlite3.connect(tmp_path / "home" / "gpuplane.db")) as conn:
            return conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()[0]

    await trio.sleep_until(spawned.started_at + LAZY_WAIT_S / 2)
    assert status() == "DISPATCHING"  # its start waits for company...
    await trio.sleep_until(spawned.started_at + LAZY_WAIT_S + 0.005)
    assert status() == "RUNNING"  # ...for LAZY_WAIT_S at most
