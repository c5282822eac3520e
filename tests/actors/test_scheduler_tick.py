"""The scheduler actor's loop in virtual time: a pass on every wake-up and at least every TICK."""

from __future__ import annotations

import trio

from gpuplaned.actors import scheduler
from gpuplaned.runtime.context import ActorContext


async def test_wake_ups_never_push_the_tick_further_off(monkeypatch, autojump_clock):
    passes: list[float] = []

    async def counted(ctx, handle) -> None:
        passes.append(round(trio.current_time(), 3))

    monkeypatch.setattr(scheduler, "_pass", counted)
    send, inbox = trio.open_memory_channel(100)
    ctx = ActorContext("scheduler", inbox, {}, None)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run, ctx)
        for at in (0.1, 0.2, 0.3, 0.4, 0.5):  # a burst of wake-ups (hellos, snapshots, cancels)
            await trio.sleep_until(at)
            send.send_nowait("wake")  # what it is does not matter: any message asks for a pass
        await trio.sleep_until(4.6)
        nursery.cancel_scope.cancel()
    start = passes[0]
    after_burst = [t - start for t in passes if t - start > 0.5]
    # Once the burst is over, passes come every TICK from the last one: 2.5, 4.5 (they came
    # TICK per wake-up later before: the first at 10 s).
    assert after_burst == [0.5 + scheduler.TICK, 0.5 + 2 * scheduler.TICK], passes
