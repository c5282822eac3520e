"""The run summary and the loss rules, fed batch by batch."""

from __future__ import annotations

import json
import math

from gpuplaned.domain.run_summary import direction_for, public, update


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
