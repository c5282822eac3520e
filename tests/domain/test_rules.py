"""The detector's rules, table-driven: each fires on a crafted stream and stays quiet on a
healthy one (a noisy but healthy loss, a GPU busy with data loading that dips in util), and
raises once per episode."""

from __future__ import annotations

import math
import random

import pytest

from gpuplaned.domain import node_health, run_summary
from gpuplaned.domain.node_health import DiskReading, GpuReading, HealthPolicy, NodeHealth, Reading, RunningJob
from gpuplaned.domain.rules import evidence, overfitting, stall
from gpuplaned.domain.rules.overfitting import OverfitPolicy
from gpuplaned.domain.rules.stall import StallPolicy

MIN = 60_000


def _noisy_loss(n: int, seed: int = 7) -> list[float]:
    rng = random.Random(seed)
    return [2.0 * math.exp(-i / 400) + 0.1 + rng.gauss(0, 0.03) for i in range(n)]


def _fold(batches: list[dict[str, tuple[list[int], list[float]]]], policy: OverfitPolicy = OverfitPolicy()):
    summary, events = None, []
    for batch in batches:
        points = {name: (steps, [1000 + s for s in steps], values) for name, (steps, values) in batch.items()}
        summary, raised = run_summary.update(summary, points, {n: "minimize" for n in batch}, policy)
        events += raised
    return summary, events


def _train_and_eval(evals: list[float], falling: bool = True, every: int = 100):
    """Batches: 100 train points then one eval point, ``len(evals)`` times."""
    batches = []
    for k, value in enumerate(evals):
        steps = list(range(k * every, (k + 1) * every))
        train = [3.0 - 0.001 * s for s in steps] if falling else [1.0 + 0.0001 * (s % 7) for s in steps]
        batches.append({"train/loss": (steps, train), "eval/loss": ([steps[-1]], [value])})
    return batches


def _types(events) -> list[str]:
    return [e.type for e in events]


LOSS_CASES = [
    ("noisy healthy loss", _noisy_loss(3000), []),
    ("NaN once, then more NaN", _noisy_loss(200)[:100] + [math.nan] * 5 + _noisy_loss(200)[105:], ["LOSS_NAN"]),
    ("infinity", _noisy_loss(100) + [math.inf], ["LOSS_NAN"]),
    ("one spike", _noisy_loss(300)[:200] + [50.0] + _noisy_loss(300)[201:], ["LOSS_SPIKE"]),
]


@pytest.mark.parametrize("label, values, expected", LOSS_CASES, ids=[c[0] for c in LOSS_CASES])
def test_loss_rules(label, values, expected):
    steps = list(range(len(values)))
    # In batches of 37, so that windows and episodes carry over from batch to batch.
    batches = [{"train/loss": (steps[i:i + 37], values[i:i + 37])} for i in range(0, len(values), 37)]
    _summary, events = _fold(batches)
    assert _types(events) == expected


OVERFIT_CASES = [
    ("eval keeps falling", [2.0, 1.8, 1.6, 1.5, 1.4, 1.3], True, []),
    # Each evaluation counts as the median of the last 3: the best is 1.7, then 1.9, 2.0, 2.1.
    ("eval up 3 times while train falls", [2.0, 1.5, 1.7, 1.8, 1.9, 2.0, 2.1, 2.2], True, ["OVERFITTING_SUSPECTED"]),
    ("the same rise, one evaluation short", [2.0, 1.5, 1.7, 1.8, 1.9, 2.0, 2.1], True, []),
    ("only twice above", [2.0, 1.5, 1.7, 1.8, 1.5, 1.7, 1.8], True, []),
    ("noisy eval within 10% of best", [2.0, 1.5, 1.6, 1.58, 1.62, 1.55, 1.64], True, []),
    ("one bad evaluation at a time", [2.0, 1.5, 1.5, 2.5, 1.5, 2.5, 1.5, 2.5, 1.5], True, []),
    ("eval up but train flat too (not overfitting)", [2.0, 1.5, 1.7, 1.8, 1.9, 2.0, 2.1, 2.2], False, []),
    ("two episodes", [2.0, 1.5, 1.7, 1.8, 1.9, 2.0, 2.1, 1.4, 1.4, 1.5, 1.7, 1.8, 1.9, 2.0], True,
     ["OVERFITTING_SUSPECTED", "OVERFITTING_SUSPECTED"]),
]


@pytest.mark.parametrize("label, evals, falling, expected", OVERFIT_CASES, ids=[c[0] for c in OVERFIT_CASES])
def test_overfitting(label, evals, falling, expected):
    _summary, events = _fold(_train_and_eval(evals, falling))
    assert _types(events) == expected


def test_overfitting_evidence_points_at_the_best_and_the_rise():
    _summary, events = _fold(_train_and_eval([2.0, 1.5, 1.7, 1.8, 1.9, 2.0, 2.1, 2.2]))
    (event,) = events
    assert event.step == 799 and event.context["train_metric"] == "train/loss"
    # The smoothed best (the median of 1.5, 1.7, 1.8 at step 299) and the smoothed rise.
    assert event.context["evidence"] == [{"kind": "metric", "run_id": None, "name": "eval/loss",
                                          "steps": [299, 799], "values": [1.7, 1.9, 2.0, 2.1]}]


def test_a_noisy_eval_loss_must_rise_past_its_noise():
    rng = random.Random(4)
    noisy = [1.0 + rng.gauss(0, 0.05) for _ in range(80)]  # a flat eval loss, 5% noise
    assert _fold(_train_and_eval(noisy))[1] == []
    rising = noisy + [1.0 + 0.04 * k + rng.gauss(0, 0.05) for k in range(1, 15)]  # then up 56%
    assert _types(_fold(_train_and_eval(rising))[1]) == ["OVERFITTING_SUSPECTED"]


def test_after_a_warm_restart_both_losses_are_up_which_is_no_overfitting():
    evals = [2.0, 1.5, 1.5, 1.5] + [1.9] * 8
    batches = _train_and_eval(evals)
    for batch in batches[4:]:  # the restart: train jumps above where it stood, then falls
        steps, train = batch["train/loss"]
        batch["train/loss"] = (steps, [v + 1.0 for v in train])
    assert "OVERFITTING_SUSPECTED" not in _types(_fold(batches)[1])
    assert _types(_fold(_train_and_eval(evals))[1]) == ["OVERFITTING_SUSPECTED"]


def test_overfitting_thresholds_and_switch():
    evals = [2.0] + [1.5] * 5 + [1.6] * 8  # 6.7% above the best
    assert _types(_fold(_train_and_eval(evals))[1]) == []
    assert _types(_fold(_train_and_eval(evals), OverfitPolicy(rise=0.05, evals=4))[1]) == ["OVERFITTING_SUSPECTED"]
    assert _fold(_train_and_eval(evals), OverfitPolicy(rise=0.05, enabled=False))[1] == []


@pytest.mark.parametrize("name, expected", [("eval/loss", True), ("val_loss", True), ("valid/nll_loss", True),
                                            ("train/loss", False), ("loss", False), ("eval/acc", False)])
def test_is_eval_loss(name, expected):
    assert overfitting.is_eval_loss(name) is expected


def test_train_loss_for():
    assert overfitting.train_loss_for("eval/loss", ["eval/loss", "train/loss", "aux_loss"]) == "train/loss"
    assert overfitting.train_loss_for("val_loss", ["val_loss", "loss"]) == "loss"
    assert overfitting.train_loss_for("val_loss", ["val_loss", "acc"]) is None


# RUN_STALLED: (ms, fingerprint) ticks -> at which ticks the rule raises.
STALL_CASES = [
    ("steady output", [(t * MIN, [t]) for t in range(60)], []),
    ("silent 20 min", [(0, [1])] + [(t * MIN, [2]) for t in range(1, 40)], [21]),
    ("silent 19 min then output", [(t * MIN, [1]) for t in range(20)] + [(20 * MIN, [2])], []),
    ("two stalls", [(t * MIN, [1]) for t in range(25)] + [(t * MIN, [2]) for t in range(25, 50)], [20, 45]),
]


@pytest.mark.parametrize("label, ticks, expected", STALL_CASES, ids=[c[0] for c in STALL_CASES])
def test_stall(label, ticks, expected):
    state, fired = None, []
    for k, (now, fingerprint) in enumerate(ticks):
        state, silent = stall.update(state, now, fingerprint, StallPolicy(after_ms=20 * MIN))
        if silent is not None:
            assert silent >= 20 * MIN
            fired.append(k)
    assert fired == expected


def test_stall_switched_off():
    state = None
    for t in range(40):
        state, silent = stall.update(state, t * MIN, [1], StallPolicy(after_ms=MIN, enabled=False))
        assert silent is None


def _gpu_reading(ts: int, util: float, memory_fraction: float) -> Reading:
    gpu = GpuReading(0, util, memory_fraction * 80_000, 80_000)
    return Reading(ts, (gpu,), (DiskReading("data", "/data", 50, 100),), (RunningJob("j1", (0,)),))


# GPU_UNDERUTILIZED (node side): samples every 10 s -> the event count.
GPU_CASES = [
    ("busy", [(95, 0.6)] * 120, 0),
    ("busy with data loading dips", [(95, 0.6) if k % 6 else (3, 0.6) for k in range(600)], 0),
    ("idle util, memory held (data loading stall)", [(2, 0.7)] * 600, 0),
    ("idle 10 min", [(2, 0.05)] * 61, 1),
    ("idle 9 min", [(2, 0.05)] * 54, 0),
    ("idle for an hour: once", [(2, 0.05)] * 360, 1),
    ("idle, busy, idle: two episodes", [(2, 0.05)] * 70 + [(90, 0.5)] + [(2, 0.05)] * 70, 2),
]


@pytest.mark.parametrize("label, samples, expected", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_gpu_underutilized(label, samples, expected):
    health = NodeHealth(HealthPolicy())
    raised = []
    for k, (util, memory) in enumerate(samples):
        events, _h = health.update(_gpu_reading(k * 10_000, util, memory))
        raised += [e for e in events if e.type == node_health.GPU_UNDERUTILIZED]
    assert len(raised) == expected


DISK_CASES = [
    ("plenty", [50, 40, 30, 20], []),
    ("low once", [50, 4, 3, 2, 1], ["DISK_LOW"]),
    ("hovering at the line: no flapping", [4, 5.5, 4.5, 5.9, 4], ["DISK_LOW"]),
    ("low, cleared, low", [4, 10, 4], ["DISK_LOW", "DISK_OK", "DISK_LOW"]),
]


@pytest.mark.parametrize("label, free_pcts, expected", DISK_CASES, ids=[c[0] for c in DISK_CASES])
def test_disk_low(label, free_pcts, expected):
    health = NodeHealth(HealthPolicy())
    raised = []
    for k, pct in enumerate(free_pcts):
        reading = Reading(k * 10_000, (), (DiskReading("data", "/data", int(pct * 100), 10_000),), ())
        raised += [e.type for e in health.update(reading)[0]]
    assert raised == expected


def test_bind_run_fills_only_unbound_metric_pointers():
    context = {"evidence": [evidence.metric("loss", [3, 1], [1.0, math.nan]), evidence.event("ev_1"),
                            evidence.metric("acc", [1], [0.5], run_id="other")]}
    bound = evidence.bind_run(context, "r1")
    assert bound["evidence"] == [
        {"kind": "metric", "run_id": "r1", "name": "loss", "steps": [1, 3], "values": [1.0, "NaN"]},
        {"kind": "event", "id": "ev_1"},
        {"kind": "metric", "run_id": "other", "name": "acc", "steps": [1, 1], "values": [0.5]}]
