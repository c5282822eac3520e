"""TensorBoard's rule for steps that rewind after a restart, per series. Pure.

A resumed job opens a new event file and logs again from the step of its checkpoint, so
steps 900..1000 of the first file are followed by 900.. in the second. TensorBoard's own
reader (RustBoard) keeps the newer file's points: for each series, a newer file's points
replace the older files' from the newer file's first step on. (The Python
``EventAccumulator`` purges only on ``SessionLog.START``, which Lightning and PyTorch never
write, so it shows both.) Files are "newer" in TensorBoard's order (``EventFile.order``).

``Rewinds`` applies the rule to points as they are read, file by file and pass by pass:
``take`` says which of them to keep and from which step the points already kept for the
series must be dropped. Its state (per series, the newest file seen and its first step)
is ``state``, to be stored with the cursors so a restarted reader goes on with it.

A file read again from its start (truncated and written anew, or another file under its
name: the reader's "file replaced") is a new file to the rule: ``reopen`` drops what it gave
before (in each series it is the newest file of, its points are those from its first step
on), and its next points replace, from their first step on, what older files left.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuplaned.tensorboard.events import Columns

__all__ = ["Rewinds", "merge", "order_key"]

Order = tuple[str, str]  # (file name, folder): EventFile.order
_DIGITS = re.compile(r"(\d+)")


def order_key(order: Order) -> tuple[list[str | int], str]:
    """What orders event files: their names with the numbers in them compared as numbers, then
    their folders. TensorBoard compares names as strings, which puts PyTorch's ``.<pid>.10``
    before ``.<pid>.9``: two writers opened within one second (a quick restart) would swap.
    Splitting on digits puts text at even and numbers at odd places, so two keys compare."""
    name, folder = order
    return [int(part) if i % 2 else part for i, part in enumerate(_DIGITS.split(name))], folder


class Rewinds:
    def __init__(self, state: dict[str, tuple[Order, int]] | None = None) -> None:
        self.state: dict[str, tuple[Order, int]] = dict(state or {})
        self._reopened: set[str] = set()  # series whose newest file is read again from its start

    def reopen(self, order: Order) -> dict[str, int]:
        """The file of ``order`` is read again from its start; returns, per series it is the
        newest file of, the step from which its earlier points are to be dropped (all of
        them: its first). A series it is not the newest file of keeps the rule as it was:
        only points below the newer file's first step are taken from it."""
        cuts = {s: first for s, (o, first) in self.state.items() if o == order}
        self._reopened |= cuts.keys()
        return cuts

    def take(self, series: str, order: Order, points: Columns) -> tuple[Columns, int | None]:
        """Of ``points``, read for ``series`` from the file of ``order``, those to keep, and
        the step from which the series' earlier points are to be dropped (None: none)."""
        if not len(points):
            return points, None
        latest = self.state.get(series)
        if latest is None:
            self.state[series] = (order, int(points.steps[0]))
            return points, None
        latest_order, first = latest
        if order == latest_order:
            if series not in self._reopened:
                return points, None
            self._reopened.discard(series)
            first = int(points.steps[0])
            self.state[series] = (order, first)
            return points, first
        if order_key(order) > order_key(latest_order):
            first = int(points.steps[0])
            self.state[series] = (order, first)
            return points, first
        keep = points.steps < first  # an older file still being written: only below the cut
        return Columns(points.steps[keep], points.walls[keep], points.values[keep]), None


def merge(batches: Iterable[tuple[str, Order, Columns]]) -> dict[str, Columns]:
    """Apply the rule to whole reads: ``(series, order, points)`` in reading order -> the
    points each series ends with."""
    rewinds = Rewinds()
    kept: dict[str, list[Columns]] = {}
    for series, order, points in batches:
        points, cut = rewinds.take(series, order, points)
        parts = kept.setdefault(series, [])
        if cut is not None:
            parts[:] = [_below(p, cut) for p in parts]
        parts.append(points)
    return {series: Columns.concat(parts) for series, parts in kept.items() if parts}


def _below(points: Columns, step: int) -> Columns:
    keep = points.steps < step
    if keep.all():
        return points
    return Columns(points.steps[keep], points.walls[keep], points.values[keep])
