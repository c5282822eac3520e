"""Buckets for charts: every point or summary lands in exactly one bucket of width ``width``.

Buckets are aligned to multiples of the width (a chart that refreshes gets the same
buckets). Each bucket keeps min, max, avg, last and counts, so a single spike in a
million points still shows as that bucket's max. Whole summaries (a chunk, a 64-point
block, a rollup bucket) go to the bucket holding their midpoint: a block across a bucket
edge shifts by less than its own span, and nothing is counted twice or lost.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from gpuplaned.tsdb import stats

_OLDEST = -(2**63)


def width_for(lo: int, hi: int, points: int, unit: int) -> int:
    """The smallest multiple of ``unit`` whose aligned buckets over ``[lo, hi]`` are <= points."""
    span = hi - lo + 1
    width = max(unit, -(-span // points))
    width = -(-width // unit) * unit
    while hi // width - lo // width + 1 > points:
        width += unit
    return width


class Buckets:
    def __init__(self, width: int) -> None:
        self.width = width
        self.acc: dict[int, list] = {}

    def add_points(self, xs, tss, values) -> None:
        acc, width = self.acc, self.width
        for x, t, v in zip(xs, tss, values):
            k = x // width
            a = acc.get(k)
            if a is None:
                a = acc[k] = [0, 0, stats.INF, -stats.INF, 0.0, stats.NAN, _OLDEST]
            a[0] += 1
            if v != v:
                a[1] += 1
            else:
                if v < a[2]:
                    a[2] = v
                if v > a[3]:
                    a[3] = v
                a[4] += v
            if t >= a[6]:
                a[5] = v
                a[6] = t

    def add_sorted_points(self, xs, tss, values) -> None:
        """Points sorted by x and by ts alike: each bucket is one slice, summed in C."""
        acc, width, n = self.acc, self.width, len(xs)
        i = 0
        while i < n:
            k = xs[i] // width
            j = bisect_left(xs, (k + 1) * width, i)
            part = values[i:j]
            nan, lo, hi, total = stats.summarize(part)
            a = acc.get(k)
            if a is None:
                a = acc[k] = [0, 0, stats.INF, -stats.INF, 0.0, stats.NAN, _OLDEST]
            stats.merge_into(a, j - i, nan, lo, hi, total, part[-1], tss[j - 1])
            i = j

    def add_sorted_summaries(self, mids, counts, nans, los, his, totals, lasts, last_tss) -> None:
        """Summaries sorted by midpoint and by ts alike, grouped per bucket with slices."""
        acc, width, n = self.acc, self.width, len(mids)
        i = 0
        while i < n:
            k = mids[i] // width
            j = bisect_left(mids, (k + 1) * width, i)
            nan = sum(nans[i:j])
            if nan:  # an all-NaN summary has NaN min/max: leave those out
                lo = min((v for v in los[i:j] if v == v), default=stats.NAN)
                hi = max((v for v in his[i:j] if v == v), default=stats.NAN)
                total = sum(t for t, c, m in zip(totals[i:j], counts[i:j], nans[i:j]) if c > m)
            else:
                lo, hi, total = min(los[i:j]), max(his[i:j]), sum(totals[i:j])
            a = acc.get(k)
            if a is None:
                a = acc[k] = [0, 0, stats.INF, -stats.INF, 0.0, stats.NAN, _OLDEST]
            stats.merge_into(a, sum(counts[i:j]), nan, lo, hi, total, lasts[j - 1], last_tss[j - 1])
            i = j

    def add_summary(self, x_lo: int, x_hi: int, count: int, nan: int, lo: float, hi: float,
                    total: float, last: float, last_ts: int) -> None:
        k = ((x_lo + x_hi) // 2) // self.width
        a = self.acc.get(k)
        if a is None:
            a = self.acc[k] = [0, 0, stats.INF, -stats.INF, 0.0, stats.NAN, _OLDEST]
        stats.merge_into(a, count, nan, lo, hi, total, last, last_ts)

    def add_rollup(self, starts, counts, nans, los, his, totals, lasts, last_tss, lo: int, hi: int) -> None:
        """Rollup rows (sorted by bucket start) whose start is in ``[lo, hi]``."""
        i, j = bisect_left(starts, lo), bisect_right(starts, hi)
        self.add_sorted_summaries(starts[i:j], counts[i:j], nans[i:j], los[i:j], his[i:j], totals[i:j],
                                  lasts[i:j], last_tss[i:j])


def columns(buckets: Buckets, keys: list[int]) -> dict[str, list]:
    """Aligned columns over ``keys``; None where the series has no point in a bucket."""
    accs = list(map(buckets.acc.get, keys))
    valid = [a is not None and a[0] > a[1] for a in accs]
    avgs = [a[4] / (a[0] - a[1]) if v else None for a, v in zip(accs, valid)]
    return {
        "min": [a[2] if v else None for a, v in zip(accs, valid)],
        "max": [a[3] if v else None for a, v in zip(accs, valid)],
        "avg": [None if m is None or m != m else m for m in avgs],  # +inf plus -inf has no average
        "last": [None if a is None else a[5] for a in accs],
        "count": [None if a is None else a[0] for a in accs],
        "nan": [None if a is None else a[1] for a in accs],
    }
