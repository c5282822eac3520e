"""A run summary's min and max (the Experiments table's summaries): kept batch by batch over the
finite values, the lowest step on a tie; set from what is left after a rewind; never made from a
batch alone for a metric summarised before they were kept (the workspace fills those from the
stored points)."""

from __future__ import annotations

import math

from gpuplaned.domain.run_summary import after_rewind, update


def test_min_and_max_across_batches():
    s, _ = update(None, {"acc": ([0, 1, 2], [0, 1, 2], [0.5, math.nan, 0.9])}, {"acc": "maximize"})
    assert s["metrics"]["acc"]["min"] == {"step": 0, "value": 0.5}
    assert s["metrics"]["acc"]["max"] == {"step": 2, "value": 0.9}
    s, _ = update(s, {"acc": ([3, 4], [3, 4], [0.9, -math.inf])}, {"acc": "maximize"})
    assert s["metrics"]["acc"]["max"] == {"step": 2, "value": 0.9}  # a tie keeps the lowest step
    assert s["metrics"]["acc"]["min"] == {"step": 0, "value": 0.5}  # -inf is not finite
    s, _ = update(s, {"acc": ([-1], [5], [0.5])}, {"acc": "maximize"})
    assert s["metrics"]["acc"]["min"] == {"step": -1, "value": 0.5}
    nothing, _ = update(None, {"x": ([0], [0], [math.nan])}, {})
    assert nothing["metrics"]["x"]["min"] is None and nothing["metrics"]["x"]["max"] is None


def test_a_summary_from_before_min_and_max_is_left_for_the_stored_points():
    old = {"metrics": {"loss": {"count": 3, "direction": "minimize", "best": {"step": 1, "value": 0.2}}},
           "progress": {"step": 2}, "warnings": []}
    s, _ = update(old, {"loss": ([3], [3], [0.4])}, {"loss": "minimize"})
    assert "min" not in s["metrics"]["loss"] and "max" not in s["metrics"]["loss"]


def test_a_rewind_sets_them_from_what_is_left():
    s, _ = update(None, {"loss": ([0, 1, 2], [0, 1, 2], [3.0, 1.0, 2.0])}, {"loss": "minimize"})
    after = after_rewind(s, "loss", 2, (1, 1, 1.0), (1.0, 1), [3.0, 1.0], ((1.0, 1), (3.0, 0)))
    assert after["metrics"]["loss"]["min"] == {"step": 1, "value": 1.0}
    assert after["metrics"]["loss"]["max"] == {"step": 0, "value": 3.0}
    gone = after_rewind(s, "loss", 0, None, None)
    assert gone["metrics"]["loss"]["min"] is None and gone["metrics"]["loss"]["max"] is None
