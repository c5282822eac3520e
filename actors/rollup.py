"""The rollup actor: node metrics raw -> 1m -> 5m, compaction, and retention, once a minute
(``retention.pass_interval_s``).

Owns: nothing but its timer.
Inputs: none.
Outputs: one store write per pass (one transaction): closed 1m and 5m buckets (min, max,
avg, last, count) built from the finer data, small chunks merged, and node data older
than ``retention.*`` deleted (training metrics are never deleted here).
Restart: permanent. A pass is idempotent (per-series watermarks) and all-or-nothing (one
transaction), so a pass that is repeated or cut short leaves correct data.
Ready: immediately; the first pass runs one period after start. Compaction rewrites a bounded
number of points a pass; while a backlog is left, passes follow every ``BACKLOG_PAUSE_S``.
"""

from __future__ import annotations

import logging
import time

import attrs
import trio

from gpuplaned import tsdb
from gpuplaned.runtime.context import ActorContext
from gpuplaned.service.context import Configured
from gpuplaned.store.writer import write

log = logging.getLogger("gpuplaned.rollup")

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
BACKLOG_PAUSE_S = 0.25  # between passes while compaction has a backlog: other writes go in between


@attrs.frozen
class RollupStats:
    passes: int
    last_pass_ms: float
    last_built: dict[str, int]
    last_deleted: dict[str, int]


@attrs.define
class RollupHandle:
    passes: int = 0
    last_pass_ms: float = 0.0
    last_built: dict[str, int] = attrs.field(factory=dict)
    last_deleted: dict[str, int] = attrs.field(factory=dict)

    def statistics(self) -> RollupStats:
        return RollupStats(self.passes, round(self.last_pass_ms, 3), dict(self.last_built), dict(self.last_deleted))


async def run(ctx: ActorContext[Configured], *, task_status: trio.TaskStatus[RollupHandle] = trio.TASK_STATUS_IGNORED) -> None:
    handle = RollupHandle()
    keep = ctx.shared.config.retention
    limits = {"raw_ms": int(keep.node_raw_hours * HOUR_MS), "m1_ms": int(keep.node_1m_days * DAY_MS),
              "m5_ms": int(keep.node_5m_days * DAY_MS)}
    task_status.started(handle)
    pause = keep.pass_interval_s
    while True:
        await trio.sleep(pause)
        started = time.perf_counter()
        built, deleted = await write(ctx.ports["store"], lambda conn: one_pass(conn, int(time.time() * 1000), limits))
        pause = next_pause(built, keep.pass_interval_s)
        handle.passes += 1
        handle.last_pass_ms = (time.perf_counter() - started) * 1000
        handle.last_built, handle.last_deleted = built, deleted
        log.debug("rollup pass: built %s, deleted %s in %.1f ms", built, deleted, handle.last_pass_ms)


def next_pause(built: dict[str, int], interval_s: float) -> float:
    """Compaction does a bounded share a pass (one transaction must not hold the store long):
    with a backlog left, the next pass comes soon rather than a whole period later."""
    return min(BACKLOG_PAUSE_S, interval_s) if built.get("more") else interval_s


def one_pass(conn, now_ms: int, limits: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:  # type: ignore[no-untyped-def]
    """Rollups, compaction and retention in the caller's (the store's) transaction."""
    return tsdb.rollup_pass(conn, now_ms), tsdb.retention_pass(conn, now_ms, **limits)
