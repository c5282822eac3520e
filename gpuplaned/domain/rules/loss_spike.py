"""LOSS_SPIKE's arithmetic (the rule's fold: ``gpuplaned.domain.run_summary``).

A jump is a loss value above the median + ``mads`` x MAD of the ``window`` finite values
before it: large against the recent noise. A jump alone is no spike: a minibatch loss has
a heavy upper tail, and a warm restart or a warm-up makes the loss climb and then fall on
purpose (``tests/alarm_corpus``: the quick start alone made seven such jumps). A jump is a
spike when it is either

- isolated-and-extreme (``extreme``): above the median by more than ``extreme`` times the
  window's own largest excursion above it (its max - its median), raised at once; or
- persistent (``verdict``): the first third of the ``hold`` finite values after it still
  stands above the jump's threshold (their median), and their last third either has come
  back down (a burst) or keeps at least ``KEEP`` of the first third's rise (the loss stayed
  up or went on rising); raised once the ``hold`` values are in. A jump still up at the end
  but falling back is a warm restart's or a warm-up's climb and raises nothing; one whose
  first ``QUICK`` values are back down (their median within ``mads`` / 2 MADs of the window's
  median) is noise, and the next jump is judged afresh. An extreme jump among the values a
  jump is followed for is a spike there.

A divergence climbs with its own window, so no jump shows it: ``climbing`` looks at the
window's median every ``hold`` values instead (``CLIMB`` rises in a row, each by more than
``CLIMB_MADS`` of the MADs before; ``levels`` samples a big batch at once).

Finding the jumps: a batch of a million points cannot pay a Python step per point, so
``candidates`` finds, over the whole batch at once in numpy, the few points that could be
jumps, and only those are judged exactly (``judge``, the rule's own median and MAD). It
never drops a jump:

1. The points are cut into blocks of ``BLOCK``; the windows of a block's points all lie in
   the block's *union* (``window + BLOCK - 1`` values), sorted once per block. A window's
   j-th smallest value is at least its union's, so the median is at least ``lo``, the
   union's median at the window's ranks. The a + 1 values (a: the median's lower rank)
   within the a-th smallest deviation of the median are a run of the sorted union, so the
   MAD is at least half the union's shortest run of a + 1 values. A point at or under
   ``lo + mads x that`` is no spike.
2. The points left (about one in a hundred on a noisy loss) get their window's threshold
   computed in float64, as the rule does; a point at or under it, or whose MAD is 0, is no
   spike.

Both floors are lowered by a margin thousands of times what float rounding could move them;
values at or past 2**53 (where floats no longer hold every integer) or not numbers go the
per-point way instead. A point left after both is judged by the rule itself: about one in
thousands on a noisy loss.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from statistics import median
from typing import TYPE_CHECKING

import attrs

# numpy is imported in the functions that use it: only a batch of VECTOR_MIN values or more
# needs it, and a daemon's start does not load it (~0.1 s).
if TYPE_CHECKING:
    import numpy as np

WINDOW = 64  # the rolling window's finite values
MIN_WINDOW = 20  # no spike before this many are known
MADS = 6.0  # a jump is above the median + this many MADs
HOLD = 100  # the finite values after a jump that tell a persistent one from noise or a restart
EXTREME = 8.0  # a jump this many times the window's largest excursion above its median is a spike at once
CLIMB = 2  # a divergence: the window's median rose this many times in a row, every hold values
CLIMB_MADS = 1.0  # ...each time by more than this many of the MADs before
QUICK = 5  # a followed jump whose first this many values are back down (their median: within mads / 2) is over
KEEP = 0.8  # a persistent jump's last third keeps at least this much of its first third's rise
BLOCK = 16  # points per block: a smaller one bounds tighter (fewer to recheck) and sorts more
CHUNK = 128  # blocks whose unions are sorted at once
VECTOR_MIN = 256  # fewer full-window points than this: the caller's per-point loop is cheaper
_MARGIN = 1e-12  # of the magnitudes: thousands of times what float64 rounding moves a threshold
_TINY = 1e-318  # thousands of the smallest subnormal
_EXACT = 2.0**53


@attrs.frozen
class SpikePolicy:
    """``[detector] spike_window``, ``spike_mads``, ``spike_hold`` and ``spike_extreme``."""

    window: int = WINDOW
    mads: float = MADS
    hold: int = HOLD
    extreme: float = EXTREME


def is_extreme(value: float, mid: float, top: float, extreme: float) -> bool:
    """Whether a jump to ``value`` is above the window's median ``mid`` by more than
    ``extreme`` times the window's largest excursion (its max ``top`` - ``mid``)."""
    return value - mid > extreme * (top - mid)


def climbing(levels: Sequence[Sequence[float]], policy: SpikePolicy) -> bool:
    """Whether the window's ``[median, mad]`` sampled every ``hold`` values (``levels``,
    oldest first) rose ``CLIMB`` times in a row, each time by more than ``mads`` of the MADs
    before: a loss that diverges (a restart's or a warm-up's climb turns back within one)."""
    return len(levels) > CLIMB and all(b[0] - a[0] > CLIMB_MADS * a[1] for a, b in zip(levels, levels[1:]))


def levels(values: np.ndarray, ends: Sequence[int], size: int) -> list[tuple[float, float]]:
    """``(median, MAD)`` of ``values[k + 1 - size:k + 1]`` for each ``k`` in ``ends`` (each
    ``>= size - 1``), all at once (a big batch samples hundreds); ``values``: ``floats``'."""
    import numpy as np

    rows = values[np.asarray(ends)[:, None] - size + 1 + np.arange(size)]
    a, b = (size - 1) // 2, size // 2  # the median's ranks, as ``statistics.median`` takes them
    mids = _rank_mean(np.partition(rows, sorted({a, b}), axis=1), a, b)
    mads = _rank_mean(np.partition(np.abs(rows - mids[:, None]), sorted({a, b}), axis=1), a, b)
    return list(zip(mids.tolist(), mads.tolist()))


def verdict(mid: float, mad: float, after: Sequence[float], policy: SpikePolicy) -> bool:
    """Whether the jump over the window ``(mid, mad)`` persisted: the first and the last third
    of the ``hold`` finite values ``after`` it stand above its threshold (by their medians),
    and the last keeps ``KEEP`` of the first's rise (one that falls back is noise, a warm-up
    or a restart)."""
    third = max(1, len(after) // 3)
    early, late = median(after[:third]), median(after[-third:])
    bar = mid + policy.mads * mad
    return early > bar and (late <= bar or late - mid >= KEEP * (early - mid))


def judge(window: Sequence[float], value: float, mads: float) -> tuple[float, float] | None:
    """``(median, mad)`` when ``value`` is a spike over ``window`` (the rule, computed as it
    says), else None."""
    ordered = sorted(window)
    n = len(ordered)
    h = n // 2
    mid = ordered[h] if n & 1 else (ordered[h - 1] + ordered[h]) / 2
    if not value > mid:
        return None
    mad = median(abs(v - mid) for v in ordered)
    return (mid, mad) if mad > 0 and value > mid + mads * mad else None


def floats(seen: Sequence[float]) -> np.ndarray | None:
    """``seen`` as float64, or None when the values do not fit float64 or lie past 2**53,
    where a float no longer holds every integer (the caller then goes point by point)."""
    import numpy as np

    try:  # struct unboxes the floats faster than numpy's own conversions do
        values = np.frombuffer(struct.pack(f"{len(seen)}d", *seen), np.float64)
    except (struct.error, TypeError, ValueError, OverflowError):
        return None
    if len(values) and not (values.max() < _EXACT and values.min() > -_EXACT):  # NaN, or at or past it
        return None
    return values


def candidates(seen: Sequence[float], start: int, window: int, mads: float,
               values: np.ndarray | None = None) -> list[int] | None:
    """The positions ``p >= start`` of ``seen`` (each judged against ``seen[p - window:p]``;
    ``start >= window``) that could be spikes, in order; None when ``floats`` finds them no
    floats (the caller then judges every point). ``values``: ``floats(seen)`` if known."""
    import numpy as np

    values = floats(seen) if values is None else values
    if values is None:
        return None
    points = len(values) - start
    if points <= 0:
        return []
    block = BLOCK
    blocks = -(-points // block)
    # The last block padded with copies of the last value (a superset bounds the same way).
    padded = np.concatenate((values, np.full(blocks * block - points, values[-1])))
    # A few hundred blocks at a time: their sorted unions stay in the CPU's cache.
    floors = np.concatenate([_floors(padded, start + first * block, min(CHUNK, blocks - first), window, mads)
                             for first in range(0, blocks, CHUNK)])
    bound = np.repeat(floors, block)[:points]
    maybe = np.flatnonzero(values[start:] > bound) + start
    return _closer(values, maybe, window, mads).tolist()


def _floors(padded: np.ndarray, start: int, blocks: int, window: int, mads: float) -> np.ndarray:
    """For each of ``blocks`` blocks of points from ``start`` on, a value its points' spike
    thresholds are all above."""
    import numpy as np
    from numpy.lib.stride_tricks import as_strided

    block = BLOCK
    span = window + block - 1
    # Block b's windows all lie in padded[start + b*block - window:][:span], the block's union.
    unions = as_strided(padded[start - window:], shape=(blocks, span),
                        strides=(block * padded.itemsize, padded.itemsize), writeable=False)
    unions = np.sort(unions, axis=1)
    a, b = (window - 1) // 2, window // 2  # the median's ranks (equal for an odd window)
    with np.errstate(over="ignore", invalid="ignore"):
        lo = _rank_mean(unions, a, b)  # a window's j-th smallest is at least its union's
        # The MAD is at least the deviation at rank a, and the a + 1 values that close to the
        # median are a run of the sorted union spanning at most twice it.
        if a:  # rank-major: the minimum over the runs is then a pass of pairwise minima, not a row-by-row one
            ranks = np.ascontiguousarray(unions.T)
            shortest = (ranks[a:] - ranks[:span - a]).min(axis=0)
        else:
            shortest = np.zeros(blocks)
        return _widened(lo + mads * (shortest / 2), lo)


def _closer(values: np.ndarray, maybe: np.ndarray, window: int, mads: float) -> np.ndarray:
    """Of the positions ``maybe``, those whose value is above its window's threshold
    computed in float64 (less the margin: integers near 2**53 may round), with a MAD above 0."""
    import numpy as np

    if len(maybe) == 0:
        return maybe
    windows = np.sort(values[maybe[:, None] - window + np.arange(window)], axis=1)
    a, b = (window - 1) // 2, window // 2
    with np.errstate(over="ignore", invalid="ignore"):
        mid = _rank_mean(windows, a, b)
        deviations = np.partition(np.abs(windows - mid[:, None]), sorted({a, b}), axis=1)
        mad = _rank_mean(deviations, a, b)
        floor = _widened(mid + mads * mad, mid)
    return maybe[(values[maybe] > floor) & ((mad > 0) | (np.abs(mid) >= _EXACT / 2))]


def _widened(floor: np.ndarray, mid: np.ndarray) -> np.ndarray:
    """``floor`` lowered by far more than float rounding could move it (-inf where it overflowed)."""
    import numpy as np

    floor = floor - (_MARGIN * (np.abs(mid) + np.abs(floor)) + _TINY)
    return np.where(np.isfinite(floor), floor, -np.inf)


def _rank_mean(rows: np.ndarray, a: int, b: int) -> np.ndarray:
    """Per row, the mean of its (sorted) a-th and b-th values, as the rule's median takes it;
    a rank under 0 is unbounded below."""
    import numpy as np

    if a < 0:
        return np.full(len(rows), -np.inf)
    if a == b:
        return rows[:, a].copy()
    return (rows[:, a] + rows[:, b]) / 2
