"""One source per run series: a script that logs with the SDK and writes TensorBoard events
of the same tags (``examples/train.py`` does both) has each point stored once, not twice.

The SDK wins a name it logs: its points carry the script's own steps and times, and it
logs them first-hand. The tailer stores a series only while the SDK has not logged that
name (``for_tensorboard``, which claims the names it takes); the first SDK batch with a name
the tailer fed takes it over (``claim_for_sdk``): the tailer's points of it are dropped, the
run summary's view of it made again, and from then on only the SDK's points are kept. Both
run inside the write transaction that stores the points, so which source a point came from
never depends on which arrived first. ``run_series_sources`` keeps the claims.
"""

from __future__ import annotations

from collections.abc import Collection

from gpuplaned import tsdb
from gpuplaned.domain import run_summary
from gpuplaned.store import project_rows, run_rows, series_source_rows, tb_cursor_rows
from gpuplaned.store.connection import Connection

SDK, TENSORBOARD = "sdk", "tensorboard"
_EVERY_STEP = -(2 ** 63)


def for_tensorboard(conn: Connection, run_id: str, names: Collection[str]) -> set[str]:
    """Of ``names``, those the tailer may store for ``run_id`` (not the SDK's); claims them."""
    claims = series_source_rows.sources(conn, run_id, names)
    taken = {name for name in names if claims.get(name) != SDK}
    series_source_rows.claim_new(conn, run_id, [name for name in taken if name not in claims], TENSORBOARD)
    return taken


def claim_for_sdk(conn: Connection, run_id: str, names: Collection[str]) -> list[str]:
    """The SDK logs ``names`` for ``run_id``: they are its from now on. Returns those the tailer
    had fed, whose points were dropped."""
    claims = series_source_rows.sources(conn, run_id, names)
    new = [name for name in names if claims.get(name) != SDK]
    if not new:
        return []  # the common case: one indexed read per batch
    series_source_rows.claim(conn, run_id, new, SDK)
    taken_over = [name for name in new if claims.get(name) == TENSORBOARD]
    for name in taken_over:
        removed = tsdb.drop_from_step(conn, run_id, name, _EVERY_STEP)
        tb_cursor_rows.count_points(conn, run_id, -removed)
        recount(conn, run_id, name)
    return taken_over


def recount(conn: Connection, run_id: str, name: str) -> None:
    """The run summary's view of ``name`` once some of its points were dropped."""
    before = run_rows.summary(conn, run_id)
    left = tsdb.remaining(conn, run_id, name, finite=run_summary.WINDOW if run_summary.is_loss(name) else 0)
    direction = ((before or {}).get("metrics") or {}).get(name, {}).get("direction")
    best = project_rows.best_point(conn, left.series_id, direction) if left.series_id is not None else None
    extremes = ((project_rows.best_point(conn, left.series_id, "minimize"),
                 project_rows.best_point(conn, left.series_id, "maximize"))
                if left.series_id is not None else (None, None))
    after = run_summary.after_rewind(before, name, left.count, left.latest, best, left.last_finite, extremes)
    if after is not None:
        run_rows.set_summary(conn, run_id, after)
