"""The pure parts of primary metrics and best points: resolution order, the run's view, best by direction."""

from __future__ import annotations

import math

from gpuplaned.domain.run_summary import best_of, direction_for, primary_view, public, resolve_primary, update


def test_primary_resolves_experiment_then_project_then_global():
    assert resolve_primary("a", "b", "c") == ("a", "experiment")
    assert resolve_primary(None, "b", "c") == ("b", "project")
    assert resolve_primary(None, None, "c") == ("c", "global")
    assert resolve_primary(None, None, None) == (None, None)


def test_best_of_skips_nan_and_infinities_and_takes_the_lowest_step_on_a_tie():
    steps, values = [5, 1, 2, 3, 4], [2.0, math.nan, -math.inf, 2.0, math.inf]
    assert best_of(steps, values, "minimize") == (2.0, 3)
    assert best_of(steps, values, "maximize") == (2.0, 3)
    assert best_of([1, 2], [0.3, 0.7], "maximize") == (0.7, 2)
    assert best_of([1, 2], [0.3, 0.7], None) is None
    assert best_of([1], [math.nan], "minimize") is None


def test_primary_view_reads_the_summary():
    summary, _ = update(None, {"eval/acc": ([0, 10], [1, 2], [0.5, 0.4])}, {"eval/acc": "maximize"})
    assert primary_view(summary, "eval/acc", "project", "maximize") == {
        "name": "eval/acc", "source": "project", "direction": "maximize", "count": 2,
        "latest": {"step": 10, "ts": 2, "value": 0.4}, "best": {"step": 0, "value": 0.5}}
    assert primary_view(public(None), "eval/f1", "global", "maximize") == {
        "name": "eval/f1", "source": "global", "direction": "maximize", "count": 0, "latest": None, "best": None}
    assert primary_view(summary, None, None, None) is None


def test_direction_by_name_parts_around_any_punctuation():
    assert direction_for("eval/ndcg@10") == direction_for("map@5") == direction_for("val.top1-acc") == "maximize"
    assert direction_for("eval/val-loss") == direction_for("wer%") == "minimize"
    assert direction_for("learning_rate") is None
