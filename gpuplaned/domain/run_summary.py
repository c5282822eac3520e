"""A run's summary, kept up to date batch by batch, and the loss rules (seed 000 sections 10.1-10.2).

Pure: ``update`` takes the summary as stored (a JSON object), a batch of points and each
metric's direction, and returns the new summary and the events the batch raised. The summary
holds, per metric: the latest point, the best by its direction, the lowest and highest finite
points (``min``, ``max``: null while none is finite; absent from a summary kept before they
were, until ``gpuplaned.service.api.workspace`` fills them from the stored points), how many
points; the run's
progress (highest step); a trend over the recent window; and warnings. No LLM, no history
scan: everything is incremental. When a metric's direction is edited, its "best" in every
run is recomputed from the stored points instead (``gpuplaned.store.project_rows``).

- LOSS_NAN (critical): a loss-like metric (its name holds "loss") got NaN or infinity; once
  per metric.
- LOSS_SPIKE (warning): a loss-like value jumps above the rolling median +
  ``SpikePolicy.mads`` (6) x MAD of the last ``SpikePolicy.window`` (64) finite values (once
  ``MIN_WINDOW`` are known) and is either extreme or stays up (``gpuplaned.domain.rules.
  loss_spike`` says which: a jump waits ``SpikePolicy.hold`` values for its verdict in
  ``state["pending"]``), or the window's median keeps climbing (a divergence, ``_climbs``);
  at most once per ``SPIKE_GAP`` steps per metric.
- OVERFITTING_SUSPECTED (warning): ``gpuplaned.domain.rules.overfitting``, over each eval
  loss's points, judged against its train loss's trend once the batch is folded in.

Cost: a batch is folded in with C loops (``max``, ``min``, ``sum``, ``count``) over its
columns. A loss metric's big batch goes through numpy (``loss_spike.candidates`` leaves
about one point in thousands to judge exactly); a small one pays a Python step per point
to slide its window: a sorted
copy of the window gives the median at once, and the MAD (a sort of 64 deviations) is
computed only for a point that could be a spike, which two bisections rule out for nearly
every point (``_could_spike``). The events are the same as computing both medians for
every point (tests/domain/test_run_summary.py holds the two to each other).
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right, insort
from collections.abc import Mapping, Sequence
from operator import le
from statistics import median
from typing import Any

import attrs

from gpuplaned.domain import run_progress
from gpuplaned.domain.rules import loss_spike, overfitting
from gpuplaned.domain.rules.loss_spike import SpikePolicy
from gpuplaned.domain.rules.overfitting import OverfitPolicy
from gpuplaned.protocol.run_replies import PRIMARY_SOURCES

WINDOW = loss_spike.WINDOW  # [detector] spike_window's default
MIN_WINDOW = loss_spike.MIN_WINDOW
SPIKE_MADS = loss_spike.MADS  # [detector] spike_mads's default
SPIKE_GAP = 100
TREND_MIN = 8
DIRECTIONS = ("minimize", "maximize")
_MINIMIZE = ("loss", "error", "err", "perplexity", "ppl", "wer", "cer", "mse", "mae", "rmse", "nll")
_MAXIMIZE = ("acc", "accuracy", "f1", "ndcg", "mrr", "bleu", "rouge", "reward", "auc", "precision", "recall",
             "map", "iou", "dice")


@attrs.frozen
class SummaryEvent:
    type: str
    severity: str
    message: str
    step: int | None
    context: dict[str, Any]


def direction_for(name: str) -> str | None:
    """minimize or maximize by the metric's last name part (``eval/top1_acc`` -> maximize); when
    it tells nothing, by the part before it (``acc/train``: the line ``train`` of TensorBoard's
    ``add_scalars("acc", ...)`` chart, as the tailer names it)."""
    for part in reversed(name.lower().split("/")[-2:]):
        words = re.split(r"[^a-z0-9]+", part)  # ndcg@10, top1_acc, val-loss
        if any(w in _MINIMIZE for w in words):
            return "minimize"
        if any(w in _MAXIMIZE for w in words):
            return "maximize"
    return None


def is_loss(name: str) -> bool:
    return "loss" in name.lower()


def update(summary: Mapping[str, Any] | None, points: Mapping[str, tuple[Sequence[int], Sequence[int], Sequence[float]]],
           directions: Mapping[str, str | None],
           overfit: OverfitPolicy = OverfitPolicy(),
           spike: SpikePolicy = SpikePolicy()) -> tuple[dict[str, Any], list[SummaryEvent]]:
    """The summary after ``points`` ({name: (steps, ts, values)}), and the events they raised;
    ``spike``: LOSS_SPIKE's window and MAD multiple (``[detector]``)."""
    out: dict[str, Any] = {"metrics": {}, "progress": {"step": None}, "warnings": [], "_state": {}}
    if summary:
        out.update({k: v for k, v in summary.items()})
        out["metrics"] = dict(out.get("metrics") or {})
        out["_state"] = dict(out.get("_state") or {})
        out["warnings"] = list(out.get("warnings") or [])
    events: list[SummaryEvent] = []
    for name, (steps, ts, values) in points.items():
        metric = dict(out["metrics"].get(name) or {"count": 0, "min": None, "max": None})
        metric["direction"] = directions.get(name)
        metric["count"] = metric.get("count", 0) + len(values)
        finite = _all_finite(values)
        top = max(steps) if steps else None
        _latest(metric, steps, ts, values, top)
        _best(metric, steps, values, directions.get(name), finite)
        if "min" in metric:  # else kept before min and max were: filled from the stored points
            _extremes(metric, steps, values, finite)
        if is_loss(name):
            state = dict(out["_state"].get(name) or {"window": [], "nan_reported": False, "last_spike": None})
            events += _loss_rules(name, state, steps, values, out["warnings"], finite, spike)
            metric["trend"] = _trend(state["window"])
            out["_state"][name] = state
        out["metrics"][name] = metric
        if top is not None and (out["progress"].get("step") is None or top > out["progress"]["step"]):
            out["progress"] = {"step": top}
    events += _overfitting(out, points, overfit)
    out["_rate"] = run_progress.track(out.get("_rate"), out["metrics"])
    return out, events


def _overfitting(out: dict[str, Any], points: Mapping[str, tuple[Sequence[int], Sequence[int], Sequence[float]]],
                 policy: OverfitPolicy) -> list[SummaryEvent]:
    """OVERFITTING_SUSPECTED over the batch's eval losses, once every metric is folded in (the
    train loss's trend is the one after this batch)."""
    events: list[SummaryEvent] = []
    for name, (steps, _ts, values) in points.items():
        if not overfitting.is_eval_loss(name):
            continue
        train = overfitting.train_loss_for(name, out["metrics"])
        falling = train is not None and out["metrics"][train].get("trend") == "decreasing"
        window = (out["_state"].get(train) or {}).get("window") if train is not None else None
        level = median(window) if window else None
        state = dict(out["_state"].get(name) or {"window": [], "nan_reported": False, "last_spike": None})
        state["overfit"], raised = overfitting.update(state.get("overfit"), name, steps, values, train, falling, policy,
                                                      level)
        out["_state"][name] = state
        events += [SummaryEvent(overfitting.OVERFITTING_SUSPECTED, "warning", message, step, context)
                   for step, message, context in raised]
    return events


def public(summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """The summary as the API shows it (without the rules' working state)."""
    if not summary:
        return {"metrics": {}, "progress": {"step": None}, "warnings": []}
    return {k: v for k, v in summary.items() if not k.startswith("_")}


def resolve_primary(experiment: str | None, project: str | None,
                    global_: str | None) -> tuple[str | None, str | None]:
    """The primary metric and where it was set: the experiment's, else the project's, else the
    global one (seed 000 section 9); ``(None, None)`` when none is set anywhere."""
    for name, source in zip((experiment, project, global_), PRIMARY_SOURCES):
        if name is not None:
            return name, source
    return None, None


def primary_view(summary: Mapping[str, Any] | None, name: str | None, source: str | None,
                 direction: str | None) -> dict[str, Any] | None:
    """The primary metric as a run shows it: its latest and best point from the summary (null
    until the run logs it), with ``direction`` from its metric definition."""
    if name is None:
        return None
    metric = ((summary or {}).get("metrics") or {}).get(name) or {}
    return {"name": name, "source": source, "direction": direction,
            "count": metric.get("count", 0), "latest": metric.get("latest"), "best": metric.get("best")}


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _all_finite(values: Sequence[float]) -> bool:
    """Whether every value is a finite number, in one C loop: a NaN or an infinity makes the
    sum NaN or infinite (so does an overflow, which only sends the caller the slow way)."""
    try:
        total = sum(values)
    except TypeError:
        return False
    return total - total == 0


def _json_value(value: float) -> float | str:
    return value if _finite(value) else ("NaN" if value != value else ("Infinity" if value > 0 else "-Infinity"))


def _latest(metric: dict[str, Any], steps: Sequence[int], ts: Sequence[int], values: Sequence[float],
            top: int | None) -> None:
    """The point with the greatest (step, ts); ``top`` is ``max(steps)`` (None: no points)."""
    if top is None:
        return
    i = steps.index(top)
    if steps.count(top) > 1:  # several points at the top step: the greatest ts, the first of equals
        i = max((k for k in range(i, len(steps)) if steps[k] == top), key=ts.__getitem__)
    old = metric.get("latest")
    if old is None or (steps[i], ts[i]) >= (old["step"], old["ts"]):
        metric["latest"] = {"step": steps[i], "ts": ts[i], "value": _json_value(values[i])}


def best_of(steps: Sequence[int], values: Sequence[float], direction: str | None,
            finite: bool | None = None) -> tuple[float, int] | None:
    """``(value, step)`` of the best finite value by ``direction`` (on a tie, the lowest step);
    None without a direction or a finite value. ``finite``: whether every value is known to
    be finite (None: find out)."""
    if direction not in DIRECTIONS:
        return None
    if not values:
        return None
    if finite is None:
        finite = _all_finite(values)
    lo, hi = (min(values), max(values)) if finite else (0, 0)
    if not finite or lo < -_EXACT or hi > _EXACT:
        # Compared as floats: values are floats there, and two integers past 2**53 can be
        # the same float (equal, then the lowest step wins).
        sign = 1.0 if direction == "minimize" else -1.0
        found = min(((sign * v, s) for v, s in zip(values, steps) if _finite(v)), default=None)
        return None if found is None else (sign * found[0], found[1])
    target = lo if direction == "minimize" else hi
    i = values.index(target)
    if values.count(target) > 1:  # equal values: the lowest step, the first of equals
        i = min((k for k in range(i, len(values)) if values[k] == target), key=steps.__getitem__)
    return float(values[i]), steps[i]


_EXACT = 2**53  # every integer up to this converts to a float exactly


def better(direction: str, value: float, than: float) -> bool:
    return value < than if direction == "minimize" else value > than


def _best(metric: dict[str, Any], steps: Sequence[int], values: Sequence[float], direction: str | None,
          finite: bool | None = None) -> None:
    found = best_of(steps, values, direction, finite)
    if found is None:
        return
    value, step = found
    old = metric.get("best")
    if old is None or better(direction, value, old["value"]):  # type: ignore[arg-type]
        metric["best"] = {"step": step, "value": value}


def _extremes(metric: dict[str, Any], steps: Sequence[int], values: Sequence[float], finite: bool) -> None:
    """Fold the batch's lowest and highest finite points into ``metric["min"]`` and ``["max"]``
    (on a tie, the lowest step, as ``best_of``)."""
    for key, direction in (("min", "minimize"), ("max", "maximize")):
        found = best_of(steps, values, direction, finite)
        old = metric.get(key)
        if found is not None and (old is None or better(direction, found[0], old["value"])
                                  or (found[0] == old["value"] and found[1] < old["step"])):
            metric[key] = {"step": found[1], "value": found[0]}


def _loss_rules(name: str, state: dict[str, Any], steps: Sequence[int], values: Sequence[float],
                warnings: list[str], finite: bool | None = None,
                spike: SpikePolicy = SpikePolicy()) -> list[SummaryEvent]:
    """LOSS_NAN and LOSS_SPIKE over the batch's points in step order (equal steps keep their
    order); the window slides over the finite values only. ``finite``: whether every value
    is known to be finite (None: find out)."""
    # In step order already? For a list, a C sort (linear on sorted steps) and compare.
    if sorted(steps) != steps if isinstance(steps, list) else not all(map(le, steps[:-1], steps[1:])):
        order = sorted(range(len(steps)), key=steps.__getitem__)
        steps, values = [steps[k] for k in order], [values[k] for k in order]
    if finite is None:
        finite = _all_finite(values)
    if finite:
        return [event for _k, event in _spikes(name, state, steps, values, spike)]
    keep = [k for k, v in enumerate(values) if _finite(v)]
    spikes = _spikes(name, state, [steps[k] for k in keep], [values[k] for k in keep], spike)
    events = [event for _k, event in spikes]
    first = next((k for k, v in enumerate(values) if not _finite(v)), None)  # None: the sum overflowed
    if first is not None and not state["nan_reported"]:
        state["nan_reported"] = True
        value, step = _json_value(values[first]), steps[first]
        warnings.append(f"{name} was {value} at step {step}")
        before = sum(1 for k, _event in spikes if keep[k] < first)  # the events in step order
        events.insert(before, SummaryEvent("LOSS_NAN", "critical", f"{name} is {value} at step {step}", step,
                                           {"metric": name}))
    return events


def _spikes(name: str, state: dict[str, Any], steps: Sequence[int], values: Sequence[float],
            spike: SpikePolicy = SpikePolicy()) -> list[tuple[int, SummaryEvent]]:
    """LOSS_SPIKE over finite values in step order: the jumps (``_jumps``), and a loss that
    climbs for good (``_climbs``), in step order."""
    before = list(state["window"])
    # A big batch goes through numpy: its values as float64 once, for both.
    packed = loss_spike.floats(before + list(values)) if len(values) >= loss_spike.VECTOR_MIN else None
    found = (_jumps(name, state, steps, values, spike, packed)
             + _climbs(name, state, before, steps, values, spike, None if packed is None else packed[len(before):]))
    return sorted(found, key=lambda e: e[0])


def _climbs(name: str, state: dict[str, Any], before: Sequence[float], steps: Sequence[int],
            values: Sequence[float], spike: SpikePolicy, packed: Any = None) -> list[tuple[int, SummaryEvent]]:
    """LOSS_SPIKE for a divergence, which no single jump shows (the window climbs with it):
    the window's median and MAD every ``hold`` finite values (``state["levels"]``, the last
    ``loss_spike.CLIMB`` + 1), judged by ``loss_spike.climbing``; once per climb. ``before``:
    the window before the batch; ``packed``: ``values`` as float64 (a big batch), else None."""
    found: list[tuple[int, SummaryEvent]] = []
    count = state.get("count", 0)
    levels = [list(level) for level in state.get("levels", [])]
    size, hold = spike.window, spike.hold
    samples = range((hold - 1 - count) % hold, len(values), hold)
    inside = [k for k in samples if k + 1 >= size]  # their windows lie in the batch
    known = dict(zip(inside, loss_spike.levels(packed, inside, size))) if packed is not None and inside else {}
    for k in samples:
        if k in known:
            mid, mad = known[k]
        else:
            window = values[k + 1 - size:k + 1] if k + 1 >= size else (list(before) + list(values[:k + 1]))[-size:]
            if len(window) < size:
                continue
            mid = median(window)
            mad = median(abs(v - mid) for v in window)
        levels = (levels + [[mid, mad]])[-(loss_spike.CLIMB + 1):]
        if loss_spike.climbing(levels, spike):
            if not state.get("climbing"):
                state["climbing"] = True
                (low, low_mad), (high, _high_mad) = levels[0], levels[-1]
                found.append((k, SummaryEvent(
                    "LOSS_SPIKE", "warning",
                    f"{name} keeps climbing: its rolling median went from {low:.6g} to {high:.6g} by step {steps[k]}",
                    steps[k], {"metric": name, "value": values[k], "median": low, "mad": low_mad, "kind": "climb"})))
        elif len(levels) > 1 and levels[-1][0] < levels[-2][0]:
            state["climbing"] = False  # the median fell: the climb is over
    state["count"] = count + len(values)
    state["levels"] = levels
    return found


def _jumps(name: str, state: dict[str, Any], steps: Sequence[int], values: Sequence[float],
           spike: SpikePolicy = SpikePolicy(), packed: Any = None) -> list[tuple[int, SummaryEvent]]:
    """LOSS_SPIKE over finite values in step order, as ``(index in values, event)``; slides
    ``state["window"]`` (``spike.window`` values) over them.

    ``seen`` is the window before the batch, then the batch's values: the window at a point
    is the ``len(ordered)`` values before it, and ``ordered`` holds those sorted, equal values
    oldest first (``insort`` adds after its equals, the oldest is the first of its equals):
    element for element what ``sorted()`` makes of the window, so its median is the
    straightforward rule's. The MAD is computed, as the rule says, only for a point that
    ``value > median`` and the bisections of ``_could_spike`` leave in doubt. A batch with
    many points past a full window skips the per-point loop: ``loss_spike.candidates``
    finds the few points that could be spikes, in numpy (``packed``: the window and the
    values as float64, else None), and only those are judged.
    """
    found: list[tuple[int, SummaryEvent]] = []
    size, mads = spike.window, spike.mads
    window = state["window"]
    base = len(window)
    seen = list(window)
    seen += values
    ordered = sorted(window)
    last = state["last_spike"]
    busy = base - 1  # the jumps up to this position belong to an episode already judged

    def raise_spike(p: int, step: int, value: float, mid: float, mad: float, kind: str) -> None:
        nonlocal last
        last = state["last_spike"] = step
        how = f"and stayed up for {spike.hold} values" if kind == "persistent" else "far past its recent range"
        found.append((max(0, p - base), SummaryEvent(
            "LOSS_SPIKE", "warning",
            f"{name} jumped to {value:.6g} at step {step} (rolling median {mid:.6g}, MAD {mad:.3g}), {how}",
            step, {"metric": name, "value": value, "median": mid, "mad": mad, "kind": kind})))

    def follow(pending: dict[str, Any], at: int) -> None:
        """Feed ``pending`` the values from ``seen[at]`` on, one at a time, as they came: an
        extreme jump (in its own window) is a spike there; its first ``loss_spike.QUICK``
        back down (their median within half the jump's threshold) end it, so that a jump
        right after is judged; ``hold`` values in, ``loss_spike.verdict`` judges it."""
        nonlocal busy
        after = pending["after"]
        mid, mad = pending["median"], pending["mad"]
        quick = min(loss_spike.QUICK, spike.hold)
        for j in range(at, len(seen)):
            busy = j
            value = seen[j]
            own = seen[max(0, j - size):j]  # an extreme jump in its own window: a spike there
            judged = loss_spike.judge(own, value, mads) if len(own) >= MIN_WINDOW and value > mid else None
            if judged is not None and loss_spike.is_extreme(value, judged[0], max(own), spike.extreme):
                state.pop("pending", None)
                if last is None or steps[j - base] - last >= SPIKE_GAP:
                    raise_spike(j, steps[j - base], value, *judged, "isolated")
                return
            after.append(value)
            if len(after) == quick and not median(after) > mid + mads / 2 * mad:
                state.pop("pending", None)
                return  # back down at once: noise
            if len(after) == spike.hold:
                state.pop("pending", None)
                if loss_spike.verdict(mid, mad, after, spike) and (last is None or pending["step"] - last >= SPIKE_GAP):
                    raise_spike(j, pending["step"], pending["value"], mid, mad, "persistent")
                return
        state["pending"] = pending

    def jumped(p: int, mid: float, mad: float, n: int) -> None:
        """A jump at ``p`` over the ``n`` values before it, outside the hold of one followed
        already: a spike now, or one to follow."""
        nonlocal busy
        if p <= busy:
            return
        value, top = seen[p], max(seen[p - n:p])
        if loss_spike.is_extreme(value, mid, top, spike.extreme):
            raise_spike(p, steps[p - base], value, mid, mad, "isolated")
        else:
            busy = p
            follow({"step": steps[p - base], "value": value, "median": mid, "mad": mad, "after": []}, p + 1)

    if state.get("pending"):
        follow(dict(state["pending"], after=list(state["pending"]["after"])), base)

    def check(p: int, mid: float) -> None:
        step, value = steps[p - base], seen[p]
        if p <= busy or last is not None and step - last < SPIKE_GAP:
            return
        n = len(ordered)
        mad = median(abs(v - mid) for v in seen[p - n:p])
        if mad > 0 and value > mid + mads * mad:
            jumped(p, mid, mad, n)

    p, end = base, len(seen)
    # A window still filling up (or, from an older summary, longer than the window): in and
    # out one value at a time.
    while p < end and len(ordered) != size:
        n = len(ordered)
        value = seen[p]
        if n >= MIN_WINDOW:
            h = n // 2
            mid = ordered[h] if n & 1 else (ordered[h - 1] + ordered[h]) / 2
            if value > mid and _could_spike(ordered, mid, value, mads):
                check(p, mid)
        insort(ordered, value)
        while len(ordered) > size:
            del ordered[bisect_left(ordered, seen[p + 1 - len(ordered)])]
        p += 1
    maybe = loss_spike.candidates(seen, p, size, mads, packed) if end - p >= loss_spike.VECTOR_MIN else None
    if maybe is not None:
        for at in maybe:
            step = steps[at - base]
            if at <= busy or last is not None and step - last < SPIKE_GAP:
                continue
            judged = loss_spike.judge(seen[at - size:at], seen[at], mads)
            if judged is not None:
                jumped(at, *judged, size)
        state["window"] = seen[len(seen) - size:]
        return found
    # The full window: one value in and one out per point. _could_spike inlined: this loop
    # runs once per loss point.
    h, half, odd = size // 2, (size - 1) // 2, size & 1
    for at in range(p, end):
        value = seen[at]
        mid = ordered[h] if odd else (ordered[h - 1] + ordered[h]) / 2
        if value > mid:
            d = (value - mid) / mads * (1 + 1e-9) + 1e-12 * (abs(mid) + abs(value))
            if bisect_left(ordered, mid + d) - bisect_right(ordered, mid - d) > half:
                check(at, mid)
        insort(ordered, value)
        del ordered[bisect_left(ordered, seen[at - size])]
    state["window"] = seen[len(seen) - len(ordered):]
    return found


def _could_spike(ordered: list[float], mid: float, value: float, mads: float = SPIKE_MADS) -> bool:
    """False when ``value`` is certainly not above ``mid`` + ``mads`` x MAD of the sorted
    window ``ordered``; True means: compute the MAD and see.

    MAD >= d when fewer than half the window lies strictly within d of the median (the
    middle deviations are then at least d), and that count is two bisections. d is
    (value - mid) / mads widened by far more than float rounding could move a
    deviation or the sum, so "certainly not" holds in floats too.
    """
    d = (value - mid) / mads * (1 + 1e-9) + 1e-12 * (abs(mid) + abs(value))
    near = bisect_left(ordered, mid + d) - bisect_right(ordered, mid - d)
    return near > (len(ordered) - 1) // 2


def _trend(window: Sequence[float]) -> str | None:
    """increasing, decreasing or stable: the least-squares slope over the window, relative to its spread."""
    n = len(window)
    if n < TREND_MIN:
        return None
    mean_x, mean_y = (n - 1) / 2, sum(window) / n
    slope = sum((i - mean_x) * (y - mean_y) for i, y in enumerate(window)) / sum((i - mean_x) ** 2 for i in range(n))
    spread = max(window) - min(window)
    if spread == 0 or abs(slope) * n < 0.1 * spread:
        return "stable"
    return "decreasing" if slope < 0 else "increasing"


def after_rewind(summary: Mapping[str, Any] | None, name: str, count: int, latest: tuple[int, int, float] | None,
                 best: tuple[float, int] | None, window: Sequence[float] = (),
                 extremes: tuple[tuple[float, int] | None, tuple[float, int] | None] = (None, None)
                 ) -> dict[str, Any] | None:
    """The summary once ``name``'s points from some step on were dropped (a resumed run's
    rewind, ``gpuplaned.tsdb.rewind``): its count, latest ``(step, ts, value)`` and best
    ``(value, step)`` as they are now, and the run's progress from every metric's latest.
    ``extremes``: the lowest and highest finite ``(value, step)`` left.
    A loss metric's window becomes ``window`` (the last ``WINDOW`` finite values left, by
    step), its trend follows, and a spike at a dropped step no longer holds the next one
    back: the resumed points are judged against what is left, never against the dropped.
    None when the summary does not hold the metric."""
    if not summary or name not in (summary.get("metrics") or {}):
        return None
    out = dict(summary)
    out["metrics"] = dict(out["metrics"])
    metric = dict(out["metrics"][name])
    metric["count"] = count
    metric.pop("latest", None)
    metric.pop("best", None)
    if latest is not None:
        metric["latest"] = {"step": latest[0], "ts": latest[1], "value": _json_value(latest[2])}
    if best is not None:
        metric["best"] = {"step": best[1], "value": best[0]}
    for key, point in zip(("min", "max"), extremes):
        metric[key] = None if point is None else {"step": point[1], "value": point[0]}
    state = (out.get("_state") or {}).get(name)
    if state is not None:
        state = dict(state)
        state.pop("overfit", None)  # the eval history from the dropped steps on is gone
        for key in ("pending", "levels", "count", "climbing"):  # so are the jumps and climbs in judgement
            state.pop(key, None)
        state["window"] = [float(v) for v in window][-WINDOW:]
        if state.get("last_spike") is not None and (latest is None or state["last_spike"] > latest[0]):
            state["last_spike"] = None
        out["_state"] = {**out["_state"], name: state}
        metric["trend"] = _trend(state["window"])
    out["metrics"][name] = metric
    steps = [m["latest"]["step"] for m in out["metrics"].values() if m.get("latest")]
    out["progress"] = {"step": max(steps) if steps else None}
    if "_rate" in out:
        out["_rate"] = run_progress.rewound(out["_rate"], out["progress"]["step"])
    return out
