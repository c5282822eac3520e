"""Broadcast: order, exact lag accounting, no blocking, no leaks (virtual time)."""

from __future__ import annotations

import gc
import weakref

import pytest
import trio
import trio.testing

from gpuplaned.runtime.broadcast import Broadcast, BroadcastStatistics, Lagged


async def collect(sub, into: list) -> None:
    async for item in sub:
        into.append(item)


async def test_order_preserved_and_close_drains():
    bc: Broadcast[int] = Broadcast()
    got: list = []
    async with bc.subscribe() as sub, trio.open_nursery() as nursery:
        nursery.start_soon(collect, sub, got)
        await trio.testing.wait_all_tasks_blocked()
        for i in range(100):
            bc.publish(i)
            if i % 7 == 0:
                await trio.testing.wait_all_tasks_blocked()
        bc.close()
    assert got == list(range(100))
    assert bc.statistics() == BroadcastStatistics(subscribers=0, published=100, dropped=0)


async def test_lagged_marker_counts_exactly():
    bc: Broadcast[int] = Broadcast()
    async with bc.subscribe(maxlen=4) as sub:
        for i in range(10):
            bc.publish(i)
        assert sub.pending == 4
        assert await sub.__anext__() == Lagged(skipped=6)
        assert [await sub.__anext__() for _ in range(2)] == [6, 7]
        # Lag again while two are still queued: the marker covers only the new drops.
        for i in range(10, 15):
            bc.publish(i)
        bc.close()
        rest = [item async for item in sub]
    assert rest == [Lagged(skipped=3), 11, 12, 13, 14]
    assert bc.statistics().dropped == 9


async def test_each_subscriber_lags_on_its_own(autojump_clock):
    bc: Broadcast[int] = Broadcast()
    fast: list = []
    slow: list = []

    async def slow_reader(sub) -> None:
        async for item in sub:
            slow.append(item)
            await trio.sleep(1)

    async with trio.open_nursery() as nursery:
        async with bc.subscribe(maxlen=8) as a, bc.subscribe(maxlen=8) as b:
            nursery.start_soon(collect, a, fast)
            nursery.start_soon(slow_reader, b)
            await trio.testing.wait_all_tasks_blocked()
            for i in range(1000):
                bc.publish(i)
                await trio.sleep(0.1)
            bc.close()
            await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(100)
    assert fast == list(range(1000))
    values = [x for x in slow if not isinstance(x, Lagged)]
    skipped = sum(x.skipped for x in slow if isinstance(x, Lagged))
    assert values == sorted(values) and values[-1] == 999
    assert len(values) + skipped == 1000  # every item was either received or counted
    assert bc.statistics().dropped == skipped


async def test_publisher_is_never_blocked_by_a_reader_that_never_reads():
    bc: Broadcast[int] = Broadcast()
    async with bc.subscribe(maxlen=16) as sub, trio.open_nursery() as nursery:
        # A subscriber that is parked forever, and one that is never iterated at all.
        nursery.start_soon(sub.__anext__)
        async with bc.subscribe(maxlen=16) as idle:
            await trio.testing.wait_all_tasks_blocked()
            with trio.testing.assert_no_checkpoints():
                for i in range(100_000):
                    bc.publish(i)
            assert idle.pending == 16
            stats = bc.statistics()
        nursery.cancel_scope.cancel()
    # The parked reader was woken but could not run (publish never yields), so both
    # queues simply stayed at their bound.
    assert stats.published == 100_000
    assert stats.dropped == 2 * (100_000 - 16)
    assert sub.pending == 0  # freed when its block exited


async def test_receive_is_cancel_safe(autojump_clock):
    bc: Broadcast[str] = Broadcast()
    async with bc.subscribe() as sub:
        with trio.move_on_after(5) as scope:
            await sub.__anext__()
        assert scope.cancelled_caught
        bc.publish("a")
        with trio.CancelScope() as cancelled:
            cancelled.cancel()
            await sub.__anext__()  # cancelled before taking anything
        assert await sub.__anext__() == "a"


async def test_close_wakes_parked_subscribers_and_later_subscribers_end_at_once():
    bc: Broadcast[int] = Broadcast()
    got: list = []
    async with bc.subscribe() as sub, trio.open_nursery() as nursery:
        nursery.start_soon(collect, sub, got)
        await trio.testing.wait_all_tasks_blocked()
        bc.close()
    assert got == []
    async with bc.subscribe() as late:
        assert [x async for x in late] == []
    with pytest.raises(trio.ClosedResourceError):
        bc.publish(1)
    bc.close()  # idempotent


async def test_iterating_after_the_block_is_our_bug():
    bc: Broadcast[int] = Broadcast()
    async with bc.subscribe() as sub:
        bc.publish(1)
    with pytest.raises(trio.ClosedResourceError):
        await sub.__anext__()
    with pytest.raises(ValueError):
        async with bc.subscribe(maxlen=0):
            pass


async def test_thousand_subscribers_vanish_without_a_trace(autojump_clock):
    bc: Broadcast[bytes] = Broadcast()
    refs: list[weakref.ref] = []
    received = [0] * 1000

    async def follower(k: int) -> None:
        async with bc.subscribe(maxlen=32) as sub:
            refs.append(weakref.ref(sub))
            async for _ in sub:
                received[k] += 1

    async with trio.open_nursery() as nursery:
        for k in range(1000):
            nursery.start_soon(follower, k)
        await trio.testing.wait_all_tasks_blocked()
        assert bc.statistics().subscribers == 1000
        for _ in range(10):
            bc.publish(b"x" * 100)
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(50):  # queued, not yet received, when they vanish
            bc.publish(b"y" * 100)
        nursery.cancel_scope.cancel()  # mid-iteration

    # Each follower was woken by the first "y" before the cancel, and takes that one item.
    assert received == [11] * 1000
    assert bc.statistics().subscribers == 0
    gc.collect()
    assert len(refs) == 1000
    assert [r for r in refs if r() is not None] == []
    assert bc._subs == {}
    bc.publish(b"z")  # nobody to deliver to; costs nothing
