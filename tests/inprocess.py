"""A daemon context in the test's own trio run: a real config, endpoint and supervisor over
the actors a test names, for tests that drive the app, a service or an actor in process."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from gpuplaned.config import Config
from gpuplaned.daemon import DaemonContext
from gpuplaned.endpoint import claim_endpoint
from gpuplaned.lifecycle import Lifecycle
from gpuplaned.runtime.spec import ActorSpec
from gpuplaned.runtime.supervisor import Supervisor
from gpuplaned.store.readers import Readers


@asynccontextmanager
async def daemon_context(tmp_path: Path, nursery: trio.Nursery, specs: list[ActorSpec], *,
                         readers: bool = False, **settings: Any) -> AsyncIterator[DaemonContext]:
    """``specs`` running under a supervisor; ``readers``: with the store's read connections;
    ``settings``: ``Config`` fields other than its home and runtime dir (``http=HttpFront(...)``)."""
    cfg = Config(home=tmp_path / "home", runtime_dir=tmp_path / "run", **settings)
    endpoint = claim_endpoint(cfg.runtime_dir, None)
    ctx = DaemonContext(cfg, Lifecycle(), endpoint, trio.current_time(), time.time())
    if readers:
        ctx.readers = Readers(cfg.db_path)
    ctx.supervisor = Supervisor(specs, ctx)
    await nursery.start(ctx.supervisor.run)
    try:
        yield ctx
    finally:
        # The actors go before what they use, as the daemon stops them: an actor still running
        # once the readers are closed crashed, and its restart failed the test (seen under load).
        with trio.move_on_after(30) as stopping:
            stopping.shield = True
            await ctx.supervisor.stop_all()
        if ctx.readers is not None:
            ctx.readers.close()
        endpoint.release()


async def scheduler_stand_in(ctx: Any, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """A scheduler that takes nothing from its inbox: the test runs the passes itself, and may
    read the wakes left there."""
    task_status.started()
    await trio.sleep_forever()


@asynccontextmanager
async def passes_by_hand(tmp_path: Path, nursery: trio.Nursery, *, ready: bool = True,
                         **settings: Any) -> AsyncIterator[DaemonContext]:
    """A server's store (with read connections) and ``scheduler_stand_in``: the scheduling
    passes are the test's to run. ``ready``: the daemon says READY (requests are taken);
    ``settings`` as ``daemon_context``'s."""
    from gpuplaned.actors import store  # a server actor: only where a test asks for one

    async with daemon_context(tmp_path, nursery, [
        ActorSpec("store", store.run, frozenset({"all"}), graceful_stop=True, inbox_size=1024),
        ActorSpec("scheduler", scheduler_stand_in, frozenset({"all"}), inbox_size=16),
    ], readers=True, **settings) as ctx:
        if ready:
            ctx.lifecycle.ready()
        yield ctx


@attrs.define
class WallClock:
    """A daemon context's ``wall_ms`` moved by hand: expiry tested without waiting for it."""

    now_ms: int = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, seconds: float) -> None:
        self.now_ms += round(seconds * 1000)
