"""A request's writes (``RequestPort``) against a real store actor and SQLite file: refused,
and never applied later, when the store stops running before it takes them; the daemon's
internal writes wait for the store instead. A request's rider (its audit record) goes into the
transaction of its first write that commits, and only that one."""

from __future__ import annotations

import sqlite3
import threading

import pytest
import trio
from test_store import insert_project, start_store

from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.runtime.call import Reply
from gpuplaned.store.writer import LAZY_WAIT_S, RequestPort, Rider, Write, riding, write


def projects(tmp_path) -> list[str]:
    conn = sqlite3.connect(tmp_path / "home" / "gpuplane.db")
    try:
        return sorted(row[0] for row in conn.execute("SELECT id FROM projects"))
    finally:
        conn.close()


def request_port(sup) -> RequestPort:
    return RequestPort(sup.ports["store"], lambda: sup.state("store"))


async def test_a_request_write_still_queued_when_the_store_stops_is_refused_and_never_applied(nursery, tmp_path):
    sup, _ = await start_store(nursery, tmp_path)
    busy, release = threading.Event(), threading.Event()

    def slow(conn):  # holds the store on its worker thread
        busy.set()
        release.wait(10)
        return insert_project(1)(conn)

    refused = []

    async def request() -> None:
        with pytest.raises(ApiError) as caught:
            await request_port(sup).write(insert_project(2), small=True)
        refused.append(caught.value)
        release.set()

    async with trio.open_nursery() as inner:
        inner.start_soon(write, sup.ports["store"], slow)
        await trio.to_thread.run_sync(busy.wait)
        inner.start_soon(request)
        await trio.sleep(0)  # its write is queued behind the slow one
        inner.start_soon(sup.stop, "store")
    assert refused[0].code is ErrorCode.STORE_UNAVAILABLE and "went STOPPING" in refused[0].message

    await sup.start("store")
    # Behind the refused write, had the store kept it: once this commits, it was dropped.
    assert await write(sup.ports["store"], insert_project(3)) == 3
    assert projects(tmp_path) == ["p1", "p3"]


async def test_a_request_write_to_a_stopped_store_is_refused_at_once(nursery, tmp_path, autojump_clock):
    sup, _ = await start_store(nursery, tmp_path)
    await sup.stop("store")
    asked = trio.current_time()
    with pytest.raises(ApiError) as refused:
        await request_port(sup).write(insert_project(1), small=True)
    assert refused.value.code is ErrorCode.STORE_UNAVAILABLE and refused.value.code.http_status == 503
    assert trio.current_time() == asked
    await sup.start("store")
    assert await write(sup.ports["store"], insert_project(2)) == 2
    assert projects(tmp_path) == ["p2"]


async def test_an_internal_write_waits_for_a_stopped_store_and_is_kept(nursery, tmp_path, autojump_clock):
    sup, _ = await start_store(nursery, tmp_path)
    await sup.stop("store")
    done = trio.Event()

    async def report() -> None:
        await write(sup.ports["store"], insert_project(3))
        done.set()

    nursery.start_soon(report)
    await trio.sleep(60)
    assert not done.is_set()
    await sup.start("store")
    await done.wait()
    assert projects(tmp_path) == ["p3"]


async def test_a_request_cancelled_once_its_write_is_taken_still_gets_the_outcome(nursery, tmp_path):
    sup, _ = await start_store(nursery, tmp_path)
    outcome = []
    with trio.CancelScope() as scope:
        def apply(conn):
            scope.cancel()  # the client hangs up while the store applies the write
            return insert_project(4)(conn)

        outcome.append(await request_port(sup).write(apply, small=True))
        await trio.sleep(0)
    assert outcome == [4] and scope.cancelled_caught
    assert projects(tmp_path) == ["p4"]


async def test_a_rider_commits_with_the_first_write_that_commits_and_never_again(nursery, tmp_path):
    sup, _ = await start_store(nursery, tmp_path)
    port = request_port(sup)
    rider = Rider(insert_project(100))

    def refused(conn):
        insert_project(1)(conn)
        raise ValueError("the write's own check fails")

    with riding(rider):
        with pytest.raises(ValueError):
            await port.write(refused, small=True)
        assert not rider.carried and projects(tmp_path) == []  # undone with the write that failed
        assert await port.write(insert_project(2), small=True) == 2
        assert rider.carried and projects(tmp_path) == ["p100", "p2"]
        assert await port.write(insert_project(3), small=True) == 3
    assert projects(tmp_path) == ["p100", "p2", "p3"]
    # A write once the block has ended (a task the handler left running) takes nothing.
    late = Rider(insert_project(200))
    with riding(late):
        pass
    with riding(late):  # even inside another block: the rider was closed with the first
        assert await port.write(insert_project(4), small=True) == 4
    assert not late.carried and "p200" not in projects(tmp_path)


async def test_a_rider_that_fails_leaves_the_write_alone(nursery, tmp_path):
    sup, _ = await start_store(nursery, tmp_path)
    rider = Rider(insert_project(1))  # the same row as the write's: its insert fails
    with riding(rider):
        assert await request_port(sup).write(insert_project(1), small=True) == 1
    assert not rider.carried and projects(tmp_path) == ["p1"]


async def test_a_lazy_write_waits_for_company_and_is_committed_at_a_stop(nursery, tmp_path, autojump_clock):
    """A lazy write (a job's start) shares the transaction of the next write that comes within
    ``LAZY_WAIT_S``, commits alone after that, and is committed, not dropped, when the store is
    stopped while it waits."""
    sup, _ = await start_store(nursery, tmp_path)
    handle = sup.handle("store")
    port = sup.ports["store"]
    lazy = Reply()
    before = handle.batches
    port.send_nowait(Write(insert_project(1), lazy, small=True, lazy=True))
    await trio.sleep(LAZY_WAIT_S / 2)
    assert await write(port, insert_project(2), small=True) == 2
    assert await lazy.wait() == 1 and handle.batches == before + 1  # one transaction for both

    alone = Reply()
    port.send_nowait(Write(insert_project(3), alone, small=True, lazy=True))
    asked = trio.current_time()
    assert await alone.wait() == 3
    assert trio.current_time() - asked == pytest.approx(LAZY_WAIT_S)

    stopped = Reply()
    port.send_nowait(Write(insert_project(4), stopped, small=True, lazy=True))
    await trio.sleep(0)
    await sup.stop("store")
    assert await stopped.wait() == 4
    assert projects(tmp_path) == ["p1", "p2", "p3", "p4"]
