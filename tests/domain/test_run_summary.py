"""The run summary and the loss rules, fed batch by batch."""

from __future__ import annotations

import json
import math
import random
from statistics import median

from gpuplaned.domain import run_summary
from gpuplaned.domain.rules import loss_spike
from gpuplaned.domain.rules.loss_spike import SpikePolicy
from gpuplaned.domain.run_summary import (
    MIN_WINDOW,
    SPIKE_GAP,
    SPIKE_MADS,
    WINDOW,
    SummaryEvent,
    best_of,
    direction_for,
    public,
    update,
)


def feed(summary, name, steps, values, direction=None):
    return update(summary, {name: (list(steps), [1000 + s for s in steps], list(values))},
                  {name: direction if direction is not None else direction_for(name)})


def test_directions_by_name():
    assert direction_for("train/loss") == direction_for("eval/val_loss") == "minimize"
    assert direction_for("eval/top1_acc") == direction_for("reward") == direction_for("val/f1") == "maximize"
    assert direction_for("wer") == "minimize" and direction_for("lr") is None and direction_for("gloss") is None


def test_latest_best_count_and_progress_across_batches():
    s, events = feed(None, "eval/acc", range(0, 5), [0.1, 0.5, 0.4, 0.3, 0.2])
    s, _ = feed(s, "eval/acc", range(5, 8), [0.45, 0.6, 0.55])
    acc = public(s)["metrics"]["eval/acc"]
    assert acc["count"] == 8 and acc["latest"] == {"step": 7, "ts": 1007, "value": 0.55}
    assert acc["best"] == {"step": 6, "value": 0.6} and acc["direction"] == "maximize"
    assert public(s)["progress"] == {"step": 7} and events == []
    json.dumps(s)  # it is stored as JSON


def test_nan_loss_is_one_critical_event_and_a_warning():
    s, events = feed(None, "train/loss", range(3), [1.0, float("nan"), math.inf])
    assert [e.type for e in events] == ["LOSS_NAN"] and events[0].severity == "critical" and events[0].step == 1
    assert public(s)["warnings"] == ["train/loss was NaN at step 1"]
    assert public(s)["metrics"]["train/loss"]["best"] == {"step": 0, "value": 1.0}
    s, again = feed(s, "train/loss", range(3, 5), [float("nan"), 0.5])
    assert again == [] and public(s)["metrics"]["train/loss"]["latest"]["value"] == 0.5
    json.dumps(s)


def test_a_spike_over_median_plus_six_mads_once_per_gap():
    values = [1.0 + 0.01 * ((i * 7) % 5) for i in range(40)]
    s, events = feed(None, "train/loss", range(40), values)
    assert events == []
    s, events = feed(s, "train/loss", [40, 41], [5.0, 5.0])
    assert [e.type for e in events] == ["LOSS_SPIKE"] and events[0].step == 40
    assert events[0].context["metric"] == "train/loss" and events[0].context["value"] == 5.0
    s, later = feed(s, "train/loss", [200], [50.0])
    assert [e.step for e in later] == [200]  # past the gap: reported again


def test_trend_of_a_falling_loss():
    s, _ = feed(None, "train/loss", range(30), [10.0 - i * 0.3 for i in range(30)])
    assert public(s)["metrics"]["train/loss"]["trend"] == "decreasing"
    flat, _ = feed(None, "train/loss", range(30), [1.0] * 30)
    assert public(flat)["metrics"]["train/loss"]["trend"] == "stable"


# --- the fast rules against the straightforward ones -------------------------------------
#
# ``update`` slides a sorted window and computes the MAD only where two bisections leave a
# spike possible; ``reference_update`` is the rule as first written (both medians for every
# loss point, a generator for every best and latest). Fed the same batches, the two must
# give the same summary, byte for byte as stored, and the same events.


def _ref_finite(value):
    return isinstance(value, (int, float)) and math.isfinite(value)


def _ref_json_value(value):
    return value if _ref_finite(value) else ("NaN" if value != value else ("Infinity" if value > 0 else "-Infinity"))


def reference_update(summary, points, directions):
    out = {"metrics": {}, "progress": {"step": None}, "warnings": [], "_state": {}}
    if summary:
        out.update(summary)
        out["metrics"] = dict(out.get("metrics") or {})
        out["_state"] = dict(out.get("_state") or {})
        out["warnings"] = list(out.get("warnings") or [])
    events = []
    for name, (steps, ts, values) in points.items():
        direction = directions.get(name)
        metric = dict(out["metrics"].get(name) or {"count": 0, "min": None, "max": None})
        metric["direction"] = direction
        metric["count"] = metric.get("count", 0) + len(values)
        for key, sign in (("min", 1.0), ("max", -1.0)) if "min" in metric else ():  # lowest (value, step) wins
            found = min(((sign * v, s) for v, s in zip(values, steps) if _ref_finite(v)), default=None)
            old = metric[key]
            if found is not None and (old is None or found < (sign * old["value"], old["step"])):
                metric[key] = {"step": found[1], "value": sign * found[0]}
        if steps:
            i = max(range(len(steps)), key=lambda k: (steps[k], ts[k]))
            old = metric.get("latest")
            if old is None or (steps[i], ts[i]) >= (old["step"], old["ts"]):
                metric["latest"] = {"step": steps[i], "ts": ts[i], "value": _ref_json_value(values[i])}
        found = reference_best_of(steps, values, direction)
        if found is not None:
            old = metric.get("best")
            if old is None or (found[0] < old["value"] if direction == "minimize" else found[0] > old["value"]):
                metric["best"] = {"step": found[1], "value": found[0]}
        if "loss" in name.lower():
            state = dict(out["_state"].get(name) or {"window": [], "nan_reported": False, "last_spike": None})
            events += _reference_loss_rules(name, state, steps, values, out["warnings"])
            metric["trend"] = run_summary._trend(state["window"])
            out["_state"][name] = state
        out["metrics"][name] = metric
        top = max(steps) if steps else None
        if top is not None and (out["progress"].get("step") is None or top > out["progress"]["step"]):
            out["progress"] = {"step": top}
    return out, events


def reference_best_of(steps, values, direction):
    if direction not in ("minimize", "maximize"):
        return None
    sign = 1.0 if direction == "minimize" else -1.0
    found = min(((sign * v, s) for v, s in zip(values, steps) if _ref_finite(v)), default=None)
    return None if found is None else (sign * found[0], found[1])


def _reference_loss_rules(name, state, steps, values, warnings, hold=loss_spike.HOLD, extreme=loss_spike.EXTREME):
    """LOSS_NAN, and LOSS_SPIKE point by point as the rule says: a jump (above the median +
    SPIKE_MADS x MAD of the window) far past the window's range is a spike; another is
    followed for ``hold`` values (an extreme jump among them is the spike instead, the first
    QUICK back down end it) and judged by ``verdict``; a climb every ``hold`` values."""
    events = []
    window = list(state["window"])
    policy = SpikePolicy(hold=hold, extreme=extreme)
    count, levels = state.get("count", 0), [list(level) for level in state.get("levels", [])]

    def spike(step, value, mid, mad, kind):
        state["last_spike"] = step
        how = f"and stayed up for {hold} values" if kind == "persistent" else "far past its recent range"
        events.append(SummaryEvent(
            "LOSS_SPIKE", "warning",
            f"{name} jumped to {value:.6g} at step {step} (rolling median {mid:.6g}, MAD {mad:.3g}), {how}",
            step, {"metric": name, "value": value, "median": mid, "mad": mad, "kind": kind}))

    def apart(step):
        return state["last_spike"] is None or step - state["last_spike"] >= SPIKE_GAP

    for step, value in sorted(zip(steps, values), key=lambda p: p[0]):
        if not _ref_finite(value):
            if not state["nan_reported"]:
                state["nan_reported"] = True
                warnings.append(f"{name} was {_ref_json_value(value)} at step {step}")
                events.append(SummaryEvent("LOSS_NAN", "critical", f"{name} is {_ref_json_value(value)} at step {step}",
                                           step, {"metric": name}))
            continue
        pending = state.get("pending")
        if pending is not None:
            own = window[-WINDOW:]
            mid = median(own) if len(own) >= MIN_WINDOW else None
            mad = None if mid is None else median(abs(v - mid) for v in own)
            if (mid is not None and value > pending["median"] and mad > 0 and value > mid + SPIKE_MADS * mad
                    and loss_spike.is_extreme(value, mid, max(own), extreme)):
                del state["pending"]
                if apart(step):
                    spike(step, value, mid, mad, "isolated")
            else:
                pending["after"].append(value)
                bar = pending["median"] + SPIKE_MADS * pending["mad"]
                half = pending["median"] + SPIKE_MADS / 2 * pending["mad"]
                if len(pending["after"]) == min(loss_spike.QUICK, hold) and not median(pending["after"]) > half:
                    del state["pending"]
                elif len(pending["after"]) == hold:
                    del state["pending"]
                    if loss_spike.verdict(pending["median"], pending["mad"], pending["after"], policy) \
                            and apart(pending["step"]):
                        spike(pending["step"], pending["value"], pending["median"], pending["mad"], "persistent")
        elif len(window) >= MIN_WINDOW and apart(step):
            mid = median(window)
            mad = median(abs(v - mid) for v in window)
            if mad > 0 and value > mid + SPIKE_MADS * mad:
                if loss_spike.is_extreme(value, mid, max(window), extreme):
                    spike(step, value, mid, mad, "isolated")
                else:
                    state["pending"] = {"step": step, "value": value, "median": mid, "mad": mad, "after": []}
        window.append(value)
        del window[:-WINDOW]
        count += 1
        if count % hold == 0 and len(window) == WINDOW:
            mid = median(window)
            levels = (levels + [[mid, median(abs(v - mid) for v in window)]])[-(loss_spike.CLIMB + 1):]
            if loss_spike.climbing(levels, policy):
                if not state.get("climbing"):
                    state["climbing"] = True
                    events.append(SummaryEvent(
                        "LOSS_SPIKE", "warning",
                        f"{name} keeps climbing: its rolling median went from {levels[0][0]:.6g} to {mid:.6g} by "
                        f"step {step}", step,
                        {"metric": name, "value": value, "median": levels[0][0], "mad": levels[0][1], "kind": "climb"}))
            elif len(levels) > 1 and levels[-1][0] < levels[-2][0]:
                state["climbing"] = False
    state["window"] = window
    state["count"], state["levels"] = count, levels
    return events


def _stored(summary):
    # The overfitting rule's state and the progress marks are left out: they are held to their
    # own tables in test_rules.py and test_run_progress.py.
    summary = {**{k: v for k, v in summary.items() if k != "_rate"},
               "_state": {name: {k: v for k, v in state.items() if k != "overfit"}
                          for name, state in (summary.get("_state") or {}).items()}}
    return json.dumps(summary, sort_keys=True)  # repr of every float: -0.0 and 2 vs 2.0 count


def _event_key(e):
    return (e.type, e.severity, e.message, e.step, json.dumps(e.context, sort_keys=True))


def assert_same(batches, name="train/loss", direction="minimize"):
    """Feed ``batches`` [(steps, values)] to both, the summary through JSON between batches as
    the daemon stores it; every summary and every event must match."""
    fast = ref = None
    for steps, values in batches:
        ts = [1000 + (s * 7 + k * 3) % 13 for k, s in enumerate(steps)]  # equal steps, other ts
        points = {name: (list(steps), ts, list(values))}
        fast, fast_events = update(fast, points, {name: direction})
        ref, ref_events = reference_update(ref, points, {name: direction})
        assert _stored(fast) == _stored(ref)
        assert [_event_key(e) for e in fast_events] == [_event_key(e) for e in ref_events]
        fast, ref = json.loads(json.dumps(fast)), json.loads(json.dumps(ref))
    return ref


def _series(rng: random.Random, n: int) -> list:
    kind = rng.choice(["smooth", "noisy", "heavy", "steps", "flat", "ints", "offset", "huge", "tiny", "zeros",
                       "sawtooth"])
    out = []
    for i in range(n):
        x = i / max(n, 1)
        if kind == "smooth":
            v = 2.5 * math.exp(-5.0 * x) + 0.1
        elif kind == "noisy":
            v = 2.5 * math.exp(-3.0 * x) + rng.gauss(0, 0.05)
        elif kind == "heavy":
            v = 1.0 + math.tan(math.pi * (rng.random() - 0.5)) * 0.01  # Cauchy: far values often
        elif kind == "steps":
            v = round(rng.gauss(1.0, 0.3), 1)  # few distinct values: equal values everywhere
        elif kind == "flat":
            v = 1.0 if rng.random() < 0.9 else 1.0 + rng.choice([1e-12, 1e-3, 1.0])  # MAD zero or tiny
        elif kind == "ints":
            v = rng.choice([rng.randint(0, 5), float(rng.randint(0, 5)), rng.randint(0, 5) + 0.5])
        elif kind == "offset":
            v = 1e6 + rng.gauss(0, 1e-9)  # deviations at the edge of float resolution
        elif kind == "huge":
            v = rng.choice([1e307, 1.5e308, -1e308, 1e300]) * rng.random()  # sums overflow
        elif kind == "tiny":
            v = rng.choice([5e-324, 1e-310, 0.0, -0.0, 1e-300]) * rng.randint(0, 3)
        elif kind == "zeros":
            v = rng.choice([0.0, -0.0, 0, 1e-9])
        else:
            v = (i % 37) * 0.1 + 0.01  # falls back every 37 points: a spike each time
        if rng.random() < 0.02:
            v = rng.choice([math.nan, math.inf, -math.inf])
        elif rng.random() < 0.03:
            v = v * rng.choice([5, 20, 1000]) + rng.choice([0, 1, 100])  # a spike
        out.append(v)
    return out


def _steps(rng: random.Random, n: int, start: int) -> list[int]:
    kind = rng.choice(["up", "up", "repeats", "shuffled", "back"])
    steps = list(range(start, start + n))
    if kind == "repeats":
        steps = [start + i // rng.randint(1, 3) for i in range(n)]
    elif kind == "shuffled":
        rng.shuffle(steps)
    elif kind == "back":
        steps = [max(0, start - rng.randint(0, 300)) + i for i in range(n)]  # a resumed run
    return steps


def test_the_fast_rules_match_the_straightforward_ones_on_random_series():
    rng = random.Random(20260511)
    for _case in range(250):
        n = rng.randint(0, 400)
        values = _series(rng, n)
        batches, at = [], 0
        while at < n or not batches:
            size = rng.choice([1, 3, 17, 64, 150, 1000])
            chunk = values[at:at + size]
            batches.append((_steps(rng, len(chunk), at), chunk))
            at += size
        name = rng.choice(["train/loss", "val_loss", "eval/acc", "lr"])
        direction = rng.choice(["minimize", "maximize", None])
        assert_same(batches, name, direction)


def _threshold(window):
    mid = median(window)
    return mid + SPIKE_MADS * median(abs(v - mid) for v in window)


def test_a_value_on_the_threshold_is_no_spike_and_the_next_float_up_is():
    rng = random.Random(7)
    for _case in range(300):
        scale = rng.choice([1e-300, 1e-6, 1.0, 1e6, 1e300])
        window = [scale * (1 + rng.gauss(0, rng.choice([1e-15, 1e-9, 0.01, 1.0]))) for _ in range(WINDOW)]
        edge = _threshold(window)
        for value in (edge, math.nextafter(edge, math.inf), math.nextafter(edge, -math.inf)):
            if math.isfinite(value):
                ref = assert_same([(range(WINDOW), window), ([WINDOW], [value])])
                assert ref is not None
    # and the threshold itself: exactly equal is not above it
    window = [1.0 + 0.01 * (i % 5) for i in range(WINDOW)]
    s, _ = update(None, {"loss": (list(range(WINDOW)), [0] * WINDOW, window)}, {"loss": None})
    s_on, on = update(s, {"loss": ([WINDOW], [0], [_threshold(window)])}, {"loss": None})
    s_above, above = update(s, {"loss": ([WINDOW], [0], [math.nextafter(_threshold(window), math.inf)])},
                            {"loss": None})
    # Above it is a jump: followed to see whether it stays up (no event yet); on it, nothing.
    assert on == above == [] and "pending" not in s_on["_state"]["loss"]
    assert s_above["_state"]["loss"]["pending"]["step"] == WINDOW


def test_a_nan_among_spikes_comes_in_step_order():
    base = [1.0 + 0.01 * (i % 5) for i in range(MIN_WINDOW)]
    steps = list(range(MIN_WINDOW)) + [500, 300, 900]
    values = base + [50.0, math.nan, 600.0]  # out of step order on purpose; each far past the window's range
    s, events = update(None, {"train/loss": (steps, [0] * len(steps), values)}, {"train/loss": "minimize"})
    assert [(e.type, e.step) for e in events] == [("LOSS_NAN", 300), ("LOSS_SPIKE", 500), ("LOSS_SPIKE", 900)]
    assert_same([(steps, values)])


def test_a_long_window_from_an_older_summary_is_used_then_trimmed():
    old = {"metrics": {}, "progress": {"step": 99}, "warnings": [],
           "_state": {"train/loss": {"window": [1.0 + 0.01 * (i % 5) for i in range(100)],
                                     "nan_reported": False, "last_spike": None}}}
    points = {"train/loss": ([100, 101, 102], [0, 0, 0], [1.02, 9.0, 1.01])}
    fast, fast_events = update(json.loads(json.dumps(old)), points, {"train/loss": "minimize"})
    ref, ref_events = reference_update(json.loads(json.dumps(old)), points, {"train/loss": "minimize"})
    assert _stored(fast) == _stored(ref) and len(fast["_state"]["train/loss"]["window"]) == WINDOW
    assert [_event_key(e) for e in fast_events] == [_event_key(e) for e in ref_events] != []


def test_best_of_matches_the_straightforward_one():
    rng = random.Random(3)
    pools = [[0.5, 0.5, 1.0, -0.0, 0.0], [3, 3.0, 2, 2.0], [2**53 + 1, 2**53, 2.0**53, -(2**60), -(2**60) - 1],
             [math.nan, 1.0, math.inf, -math.inf, 1.0], [True, 1, 1.0, False, 0]]
    for _case in range(2000):
        pool = rng.choice(pools)
        n = rng.randint(0, 8)
        values = [rng.choice(pool) for _ in range(n)]
        steps = [rng.randint(0, 4) for _ in range(n)]
        for direction in ("minimize", "maximize", None):
            got, want = best_of(steps, values, direction), reference_best_of(steps, values, direction)
            assert repr(got) == repr(want), (steps, values, direction)
