"""LOSS_SPIKE's vectorised filter never drops a jump, and the rule's events do not depend on
how the points were cut into batches, for any window and MAD multiple: the summary fold is
held to a straightforward rule (median and MAD recomputed at every point, the jumps
followed one value at a time)."""

from __future__ import annotations

import math
import random
from statistics import median

import pytest

from gpuplaned.domain.rules import loss_spike
from gpuplaned.domain.rules.loss_spike import SpikePolicy, candidates, judge
from gpuplaned.domain.run_summary import MIN_WINDOW, SPIKE_GAP, update


def straightforward(values, window, mads, steps=None, hold=loss_spike.HOLD, extreme=loss_spike.EXTREME):
    """The steps of LOSS_SPIKE's jumps, one value at a time, as the rule says (median and MAD
    recomputed at every point): a jump extreme in its window is a spike; another is followed
    for ``hold`` values (an extreme jump among them is the spike instead; its first QUICK
    back down end it), then judged by ``verdict``; at most one per SPIKE_GAP steps."""
    policy = SpikePolicy(window=window, mads=mads, hold=hold, extreme=extreme)
    steps = list(range(len(values))) if steps is None else steps
    out, last, pending = [], None, None
    for i, (step, value) in enumerate(zip(steps, values)):
        seen = values[max(0, i - window):i]
        jump = None
        if len(seen) >= MIN_WINDOW:
            mid = median(seen)
            mad = median(abs(v - mid) for v in seen)
            if mad > 0 and value > mid + mads * mad:
                jump = (mid, mad, value - mid > extreme * (max(seen) - mid))
        if pending is not None:
            pmid, pmad, pstep, after = pending
            if jump is not None and jump[2] and value > pmid:
                pending = None
                if last is None or step - last >= SPIKE_GAP:
                    out.append(step)
                    last = step
                continue
            after.append(value)
            if len(after) == min(loss_spike.QUICK, hold) and not median(after) > pmid + mads / 2 * pmad:
                pending = None
            elif len(after) == hold:
                pending = None
                if loss_spike.verdict(pmid, pmad, after, policy) and (last is None or pstep - last >= SPIKE_GAP):
                    out.append(pstep)
                    last = pstep
            continue  # a value in a followed jump's hold is no jump of its own
        if jump is None or last is not None and step - last < SPIKE_GAP:
            continue
        if jump[2]:
            out.append(step)
            last = step
        else:
            pending = (jump[0], jump[1], step, [])
    return out


def noisy(rng, n):
    kind = rng.choice(["gauss", "heavy", "flat", "steps", "ints", "tiny", "huge"])
    if kind == "gauss":
        return [2.0 * math.exp(-i / 3000) + rng.gauss(0, 0.02) for i in range(n)]
    if kind == "heavy":
        return [1.0 + rng.gauss(0, 0.01) * (30 if rng.random() < 0.01 else 1) for _ in range(n)]
    if kind == "flat":
        return [1.0 if rng.random() < 0.97 else rng.choice([1.5, 9.0]) for _ in range(n)]
    if kind == "steps":
        return [float(i // 500) + rng.gauss(0, 0.001) for i in range(n)]
    if kind == "ints":  # near 2**53, where sums round in floats
        return [2**52 + rng.randrange(10**6) * 10**3 * (1 if rng.random() < 0.98 else 1000) for _ in range(n)]
    if kind == "tiny":
        return [1e-300 * (1 + rng.gauss(0, 0.01)) for _ in range(n)]
    return [1e12 * (1 + rng.gauss(0, 0.01)) * (8 if rng.random() < 0.005 else 1) for _ in range(n)]


def test_the_filter_keeps_every_point_that_is_a_spike():
    rng = random.Random(11)
    for _case in range(40):
        window = rng.choice([20, 21, 33, 64, 65, 128])
        mads = rng.choice([0.5, 3.0, 6.0, 12.0])
        values = noisy(rng, rng.randint(window + 1, 1500))
        kept = candidates(values, window, window, mads)
        spikes = [p for p in range(window, len(values)) if judge(values[p - window:p], values[p], mads)]
        assert kept is not None
        assert set(spikes) <= set(kept), (window, mads)
        assert len(kept) <= len(spikes) + len(values) // 100  # and it does filter


def test_a_value_one_float_above_the_threshold_is_kept_one_below_is_not_judged_a_spike():
    rng = random.Random(5)
    for _case in range(200):
        window = rng.choice([20, 64, 65])
        base = [1.0 + rng.gauss(0, rng.choice([1e-12, 0.01, 1.0])) for _ in range(window)]
        mid = median(base)
        edge = mid + 6.0 * median(abs(v - mid) for v in base)
        for value, spike in ((edge, False), (math.nextafter(edge, math.inf), True)):
            padded = base + [value] * loss_spike.BLOCK  # the point in every position of a block
            kept = candidates(padded, window, window, 6.0)
            assert (judge(base, value, 6.0) is not None) == spike
            if spike:
                assert window in kept


def test_values_that_are_no_floats_leave_it_to_the_loop():
    assert candidates([1.0] * 30 + [10**400], 20, 20, 6.0) is None
    assert candidates([1.0] * 30 + [2**53 + 1], 20, 20, 6.0) is None  # no float holds it
    assert candidates([1.0] * 30 + [1e300], 20, 20, 6.0) is None
    assert candidates([1.0] * 30, 30, 20, 6.0) == []


def _fold(batches, policy):
    summary, events = None, []
    for steps, values in batches:
        summary, raised = update(summary, {"train/loss": (steps, [0] * len(steps), values)}, {"train/loss": None},
                                 spike=policy)
        events += [(e.step, e.context["median"], e.context["mad"]) for e in raised
                   if e.type == "LOSS_SPIKE" and e.context["kind"] != "climb"]
    return summary, events


@pytest.mark.parametrize("window, mads", [(64, 6.0), (20, 3.0), (65, 6.0), (200, 4.5)])
def test_the_events_do_not_depend_on_where_the_batches_are_cut(window, mads):
    rng = random.Random(window)
    values = [1.0 + rng.gauss(0, 0.01) * (25 if rng.random() < 0.004 else 1) for _ in range(6000)]
    steps = list(range(len(values)))
    want = straightforward(values, window, mads)
    assert want  # the data has spikes
    policy = SpikePolicy(window=window, mads=mads)
    cuts = [[len(values)],  # one batch: the vectorised way from the window's end on
            [window - 1, window, window + 1, loss_spike.VECTOR_MIN, len(values)],  # cut at the window's edges
            sorted(rng.sample(range(1, len(values)), 40)) + [len(values)]]  # small batches: the loop
    cuts += [[k * loss_spike.BLOCK + off for k in range(1, len(values) // loss_spike.BLOCK)] + [len(values)]
             for off in (0, 1)]  # at block boundaries and one past them
    results = []
    for ends in cuts:
        batches, start = [], 0
        for end in ends:
            batches.append((steps[start:end], values[start:end]))
            start = end
        summary, events = _fold(batches, policy)
        assert [step for step, _m, _d in events] == want
        assert summary["_state"]["train/loss"]["window"] == values[-window:]
        results.append(events)
    assert all(r == results[0] for r in results)


def test_a_larger_extreme_raises_fewer_spikes():
    rng = random.Random(2)
    values = [1.0 + rng.gauss(0, 0.01) * (rng.choice([5, 9, 40]) if rng.random() < 0.01 else 1) for _ in range(5000)]
    steps = list(range(len(values)))
    counts = [len(_fold([(steps, values)], SpikePolicy(extreme=extreme))[1]) for extreme in (1.0, 3.0, 8.0)]
    assert counts[0] > counts[1] > counts[2] > 0
    assert counts == [len(straightforward(values, 64, 6.0, extreme=extreme)) for extreme in (1.0, 3.0, 8.0)]


def test_columns_as_arrays_raise_what_lists_do():
    from array import array
    rng = random.Random(9)
    values = [1.0 + rng.gauss(0, 0.01) * (30 if rng.random() < 0.005 else 1) for _ in range(3000)]
    steps = list(range(len(values)))
    as_lists = _fold([(steps, values)], SpikePolicy())
    as_arrays = _fold([(array("q", steps), array("d", values))], SpikePolicy())
    assert as_arrays == as_lists and as_lists[1]


def test_a_climb_is_raised_once_wherever_the_batches_are_cut():
    rng = random.Random(3)
    values = [1.0 + rng.gauss(0, 0.05) for _ in range(3000)]
    values += [v * math.exp(k / 150) for k, v in enumerate(1.0 + rng.gauss(0, 0.05) for _ in range(800))]
    steps = list(range(len(values)))
    found = []
    for ends in ([len(values)], list(range(37, len(values), 37)) + [len(values)], [500, 1999, 3100, len(values)]):
        summary, events, start = None, [], 0
        for end in ends:
            batch = {"train/loss": (steps[start:end], [0] * (end - start), values[start:end])}
            summary, raised = update(summary, batch, {"train/loss": None})
            events += [(e.step, e.context["kind"]) for e in raised if e.type == "LOSS_SPIKE"]
            start = end
        found.append(events)
    climbs = [step for step, kind in found[0] if kind == "climb"]
    assert len(climbs) == 1 and 3000 < climbs[0] < 3400
    assert found[1] == found[0] == found[2]
