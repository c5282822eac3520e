"""The supervisor in virtual time: restarts, backoff, budget, FATAL, commands and ordered stop."""

from __future__ import annotations

import errno
import random

import pytest
import trio
import trio.testing

from gpuplaned.runtime.context import IDLE, ActorContext
from gpuplaned.runtime.spec import ActorSpec, Restart
from gpuplaned.runtime.states import ActorState
from gpuplaned.runtime.supervisor import ActorStartError, Supervisor

ROLES = frozenset({"all"})


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[float, str, str]] = []

    def note(self, name: str, what: str) -> None:
        self.events.append((trio.current_time(), name, what))

    def of(self, name: str, what: str) -> list[float]:
        return [t for t, n, w in self.events if n == name and w == what]


def crashing(rec: Recorder, name: str, crashes: int, after: float = 0.0):
    """An actor that crashes ``after`` seconds into each of its first ``crashes`` starts."""
    starts = 0

    async def run(ctx, *, task_status=trio.TASK_STATUS_IGNORED):
        nonlocal starts
        starts += 1
        rec.note(name, "start")
        task_status.started()
        try:
            if starts <= crashes:
                await trio.sleep(after)
                raise RuntimeError(f"boom {starts}")
            await trio.sleep_forever()
        finally:
            rec.note(name, "end")

    return run


def quiet(rec: Recorder, name: str):
    async def run(ctx, *, task_status=trio.TASK_STATUS_IGNORED):
        rec.note(name, "start")
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            rec.note(name, "end")

    return run


async def start_supervisor(nursery, specs):
    sup = Supervisor(specs)
    await nursery.start(sup.run)
    return sup


async def test_crashed_actor_restarts_with_doubling_backoff(nursery, autojump_clock):
    rec = Recorder()
    spec = ActorSpec("a", crashing(rec, "a", crashes=3), ROLES, backoff_initial=1.0,
                     max_restarts=5, max_seconds=60, startsecs=1.0)
    sup = await start_supervisor(nursery, [spec])
    await trio.sleep(30)
    starts = rec.of("a", "start")
    assert starts == [0.0, 1.0, 3.0, 7.0]  # delays 1, 2, 4
    snap = sup.snapshot("a")
    assert snap.state is ActorState.RUNNING
    assert snap.restarts == 3
    assert snap.last_error == "RuntimeError: boom 3"


async def test_budget_spent_means_fatal_and_others_keep_running(nursery, autojump_clock):
    rec = Recorder()
    specs = [
        ActorSpec("steady", quiet(rec, "steady"), ROLES),
        ActorSpec("bad", crashing(rec, "bad", crashes=1000), ROLES, backoff_initial=0.5,
                  max_restarts=3, max_seconds=100),
    ]
    sup = await start_supervisor(nursery, specs)
    await trio.sleep(60)
    assert len(rec.of("bad", "start")) == 4  # first start + 3 restarts
    bad = sup.snapshot("bad")
    assert bad.state is ActorState.FATAL
    assert bad.restarts == 3
    assert sup.snapshot("steady").state is ActorState.RUNNING
    assert rec.of("steady", "end") == []


async def test_budget_window_forgets_old_restarts(nursery, autojump_clock):
    rec = Recorder()
    # Crashes every 20 s of uptime, forever; 2 restarts allowed per 30 s window.
    spec = ActorSpec("slow", crashing(rec, "slow", crashes=10, after=20.0), ROLES,
                     backoff_initial=1.0, max_restarts=2, max_seconds=30)
    sup = await start_supervisor(nursery, [spec])
    await trio.sleep(300)
    # Each crash sees at most one earlier restart in its window, so it never goes FATAL.
    assert sup.snapshot("slow").state is ActorState.RUNNING
    assert sup.snapshot("slow").restarts == 10


async def test_running_only_after_startsecs(nursery, autojump_clock):
    rec = Recorder()
    spec = ActorSpec("a", quiet(rec, "a"), ROLES, startsecs=5.0)
    sup = await start_supervisor(nursery, [spec])
    assert sup.snapshot("a").state is ActorState.STARTING
    await trio.sleep(4.9)
    assert sup.snapshot("a").state is ActorState.STARTING
    await trio.sleep(0.2)
    assert sup.snapshot("a").state is ActorState.RUNNING
    assert sup.snapshot("a").uptime_s == pytest.approx(5.1)


async def test_clean_return_of_transient_and_permanent_actors(nursery, autojump_clock):
    rec = Recorder()

    def returning(name):
        async def run(ctx, *, task_status=trio.TASK_STATUS_IGNORED):
            rec.note(name, "start")
            task_status.started()
            await trio.sleep(10)

        return run

    specs = [
        ActorSpec("transient", returning("transient"), ROLES, restart=Restart.TRANSIENT),
        ActorSpec("permanent", returning("permanent"), ROLES, restart=Restart.PERMANENT,
                  backoff_initial=1.0, max_restarts=100, max_seconds=1000),
    ]
    sup = await start_supervisor(nursery, specs)
    await trio.sleep(25)
    assert sup.snapshot("transient").state is ActorState.EXITED
    assert len(rec.of("transient", "start")) == 1
    assert rec.of("permanent", "start") == [0.0, 11.0, 23.0]  # 10 s up, backoff 1 then 2


async def test_start_order_follows_dependencies_and_stop_is_reversed(nursery, autojump_clock):
    rec = Recorder()
    specs = [
        ActorSpec("http", quiet(rec, "http"), ROLES, depends_on=("store", "scheduler")),
        ActorSpec("scheduler", quiet(rec, "scheduler"), ROLES, depends_on=("store",)),
        ActorSpec("store", quiet(rec, "store"), ROLES),
    ]
    sup = await start_supervisor(nursery, specs)
    assert [n for _, n, w in rec.events if w == "start"] == ["store", "scheduler", "http"]
    await sup.stop_all()
    assert [n for _, n, w in rec.events if w == "end"] == ["http", "scheduler", "store"]
    assert all(s.state is ActorState.STOPPED for s in sup.snapshots())


async def test_graceful_stop_waits_for_the_actor_then_cancels_after_grace(nursery, autojump_clock):
    drained = []

    async def polite(ctx, *, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        await ctx.stop_requested.wait()
        await trio.sleep(2)  # finishing its work
        drained.append(trio.current_time())

    async def stubborn(ctx, *, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        await trio.sleep_forever()  # ignores stop_requested

    specs = [
        ActorSpec("polite", polite, ROLES, graceful_stop=True, stop_grace=5),
        ActorSpec("stubborn", stubborn, ROLES, graceful_stop=True, stop_grace=3),
    ]
    sup = await start_supervisor(nursery, specs)
    t0 = trio.current_time()
    await sup.stop("polite")
    assert drained == [t0 + 2]
    t1 = trio.current_time()
    await sup.stop("stubborn")
    assert trio.current_time() - t1 == pytest.approx(3)
    assert sup.snapshot("stubborn").state is ActorState.STOPPED


async def test_stop_start_restart_commands(nursery, autojump_clock):
    rec = Recorder()
    sup = await start_supervisor(nursery, [ActorSpec("a", quiet(rec, "a"), ROLES)])
    snap = await sup.stop("a")
    assert snap.state is ActorState.STOPPED
    assert (await sup.stop("a")).state is ActorState.STOPPED  # idempotent
    snap = await sup.start("a")
    assert snap.state is ActorState.STARTING
    await sup.restart("a")
    assert len(rec.of("a", "start")) == 3
    assert len(rec.of("a", "end")) == 2
    assert sup.snapshot("a").restarts == 0  # commanded restarts are not crash restarts


async def test_stop_during_backoff(nursery, autojump_clock):
    rec = Recorder()
    spec = ActorSpec("a", crashing(rec, "a", crashes=1000), ROLES, backoff_initial=10)
    sup = await start_supervisor(nursery, [spec])
    await trio.sleep(1)
    assert sup.snapshot("a").state is ActorState.BACKOFF
    snap = await sup.stop("a")
    assert snap.state is ActorState.STOPPED
    await trio.sleep(100)
    assert len(rec.of("a", "start")) == 1


async def test_start_revives_a_fatal_actor_with_a_fresh_budget(nursery, autojump_clock):
    rec = Recorder()
    spec = ActorSpec("a", crashing(rec, "a", crashes=4), ROLES, backoff_initial=0.1, max_restarts=2)
    sup = await start_supervisor(nursery, [spec])
    await trio.sleep(10)
    assert sup.snapshot("a").state is ActorState.FATAL  # crashed 3 times
    await sup.start("a")  # 4th start crashes once more, then the 5th stays up
    await trio.sleep(10)
    assert sup.snapshot("a").state is ActorState.RUNNING
    assert len(rec.of("a", "start")) == 5


async def test_failure_before_first_started_aborts_boot(autojump_clock):
    async def broken(ctx, *, task_status=trio.TASK_STATUS_IGNORED):
        raise OSError("database is locked")

    sup = Supervisor([ActorSpec("store", broken, ROLES)])
    with pytest.raises(ActorStartError, match="store.*database is locked"):
        await sup.run()


async def test_restart_failing_before_started_counts_against_budget(nursery, autojump_clock):
    starts = 0

    async def fails_on_restart(ctx, *, task_status=trio.TASK_STATUS_IGNORED):
        nonlocal starts
        starts += 1
        if starts > 1:
            raise OSError("cannot bind")
        task_status.started()
        raise RuntimeError("first crash")

    spec = ActorSpec("a", fails_on_restart, ROLES, backoff_initial=0.1, max_restarts=3)
    sup = await start_supervisor(nursery, [spec])
    await trio.sleep(10)
    snap = sup.snapshot("a")
    assert snap.state is ActorState.FATAL
    assert snap.last_error == "OSError: cannot bind"
    assert starts == 4


async def test_inbox_survives_restarts(nursery, autojump_clock):
    got = []
    starts = 0

    async def consumer(ctx, *, task_status=trio.TASK_STATUS_IGNORED):
        nonlocal starts
        starts += 1
        task_status.started()
        while True:
            msg = await ctx.inbox.receive()
            if msg == "crash" and starts == 1:
                raise RuntimeError("asked to")
            got.append((starts, msg))

    sup = await start_supervisor(nursery, [ActorSpec("c", consumer, ROLES, backoff_initial=5)])
    port = sup.ports["c"]
    await port.send("crash")
    await port.send("kept during backoff")
    await trio.sleep(1)
    assert sup.snapshot("c").state is ActorState.BACKOFF
    await trio.sleep(10)
    assert got == [(2, "kept during backoff")]


async def test_receive_or_stop(nursery, autojump_clock):
    seen = []

    async def draining(ctx, *, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        while (msg := await ctx.receive_or_stop()) is not None:
            seen.append(msg)
        seen.append("stopped")

    sup = await start_supervisor(nursery, [ActorSpec("d", draining, ROLES, graceful_stop=True)])
    await sup.ports["d"].send(1)
    await trio.testing.wait_all_tasks_blocked()
    await sup.stop("d")
    assert seen == [1, "stopped"]


async def test_receive_or_stop_with_a_deadline(autojump_clock):
    send, receive = trio.open_memory_channel(100)
    ctx = ActorContext("d", receive, {}, None)
    start = trio.current_time()
    assert await ctx.receive_or_stop(start + 5) is IDLE
    assert trio.current_time() == start + 5
    await send.send("queued")
    assert await ctx.receive_or_stop(start) == "queued"  # one already there, deadline or not

    # Messages that arrive as deadlines pass are each received once, none lost.
    got = []

    async def sender():
        for i in range(300):
            await trio.sleep(random.choice([0.001, 0.002, 0.005]))
            await send.send(i)

    async with trio.open_nursery() as n:
        n.start_soon(sender)
        while len(got) < 300:
            message = await ctx.receive_or_stop(trio.current_time() + random.choice([0.001, 0.002, 0.003]))
            if message is not IDLE:
                got.append(message)
    assert got == list(range(300))

    ctx.stop_requested.set()
    assert await ctx.receive_or_stop(trio.current_time() + 5) is None


async def test_receive_or_stop_waits_in_its_own_task(autojump_clock):
    """Waiting on an empty inbox starts no tasks (the store waits so twice a job), and a stop
    request still ends the wait, a message sent before it still comes first."""
    send, receive = trio.open_memory_channel(100)
    ctx = ActorContext("d", receive, {}, None)
    got = []
    waiter = []

    async def receiving():
        waiter.append(trio.lowlevel.current_task())
        while (message := await ctx.receive_or_stop()) is not None:
            got.append(message)
        got.append("stopped")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receiving)
        await trio.testing.wait_all_tasks_blocked()
        assert waiter[0].child_nurseries == []
        await send.send(1)
        await trio.testing.wait_all_tasks_blocked()
        assert got == [1]
        ctx.stop_requested.set()
    assert got == [1, "stopped"]
    await ctx.stop_requested.wait()  # still an event to wait on


async def test_statistics_come_from_the_started_handle(nursery, autojump_clock):
    class Handle:
        def statistics(self):
            return {"ticks": 7}

    async def with_stats(ctx, *, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started(Handle())
        await trio.sleep_forever()

    sup = await start_supervisor(nursery, [ActorSpec("s", with_stats, ROLES)])
    assert sup.snapshot("s").stats == {"ticks": 7}
    await sup.stop("s")
    assert sup.snapshot("s").stats is None


def short_of_descriptors(rec: Recorder, name: str, until: float, error):
    """An actor that fails with ``error()`` at each start before ``until``, then runs."""

    async def run(ctx, *, task_status=trio.TASK_STATUS_IGNORED):
        rec.note(name, "start")
        task_status.started()
        if trio.current_time() < until:
            raise error()
        await trio.sleep_forever()

    return run


def emfile() -> OSError:
    return OSError(errno.EMFILE, "Too many open files")


def wrapped_emfile() -> RuntimeError:
    error = RuntimeError("sampling failed")
    error.__cause__ = emfile()  # raise ... from an EMFILE
    return error


@pytest.mark.parametrize("error", [emfile, wrapped_emfile, lambda: ExceptionGroup("two", [emfile(), emfile()])],
                         ids=["EMFILE", "raised from EMFILE", "a group of EMFILE"])
async def test_a_crash_for_want_of_descriptors_spends_no_budget(nursery, autojump_clock, error):
    """Out of descriptors for two minutes: a crash loop that would be FATAL after 5 restarts,
    yet the actor is RUNNING once descriptors are back, no later than the backoff ceiling."""
    rec = Recorder()
    spec = ActorSpec("monitor", short_of_descriptors(rec, "monitor", 120.0, error), ROLES, backoff_initial=0.5,
                     backoff_max=30.0, max_restarts=5, max_seconds=60)
    sup = await start_supervisor(nursery, [spec])
    await trio.sleep(120 + 30 + 1)
    snap = sup.snapshot("monitor")
    assert snap.state is ActorState.RUNNING, snap
    assert snap.restarts > 5
    starts = rec.of("monitor", "start")
    assert all(b - a <= 30.0 for a, b in zip(starts, starts[1:]))


async def test_other_crashes_still_spend_the_budget_after_a_shortage(nursery, autojump_clock):
    rec = Recorder()
    calls = 0

    async def run(ctx, *, task_status=trio.TASK_STATUS_IGNORED):
        nonlocal calls
        calls += 1
        task_status.started()
        raise emfile() if calls <= 3 else ValueError("a real bug")

    sup = await start_supervisor(nursery, [ActorSpec("a", run, ROLES, max_restarts=2, max_seconds=1000)])
    await trio.sleep(100)
    assert sup.snapshot("a").state is ActorState.FATAL
    assert calls == 3 + 1 + 2  # three shortages, then the first bug and its two restarts
