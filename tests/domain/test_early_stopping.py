"""Early stopping's rules (gpuplaned.domain.early_stopping): the rules on hand-made trials, then
on the sweep corpus (``tests/sweep_corpus``: planted trials they must stop and must not;
``bench/early_stop_bench.py`` prints the whole table)."""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path

import pytest
from sweep_corpus import corpus, replay

from gpuplaned.domain.early_stopping import EarlyStop, Trial, judge, rungs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import early_stop_bench  # noqa: E402

STEPS = list(range(1, 21))


def _flat(key: str, level: float, *, upto: int = 20, running: float | None = 100.0, start_ms: int = 0) -> Trial:
    steps = STEPS[:upto]
    return Trial(key, steps, [level] * len(steps), [start_ms + 1000 * s for s in steps], running)


MEDIAN = EarlyStop("median", min_steps=5)


def test_the_median_rule_stops_a_trial_worse_than_the_median_of_the_others_at_its_step():
    trials = [_flat("a", 1.0), _flat("b", 2.0), _flat("c", 3.0), _flat("d", 4.0)]
    stops = judge(MEDIAN, "min", trials)
    assert [s.key for s in stops] == ["c", "d"]
    d = stops[1]
    assert (d.rule, d.step, d.value, d.threshold, d.compared) == ("median", 20, 4.0, 2.0, 3)
    assert "worse than the median 2 of the 3 other trials" in d.reason
    # The same for a metric to maximise: the low ones go.
    assert [s.key for s in judge(MEDIAN, "max", trials)] == ["a", "b"]


def test_the_median_rule_judges_on_the_best_so_far_not_the_last_point():
    noisy = Trial("noisy", STEPS, [1.0 if s % 2 else 9.0 for s in STEPS], None, 100.0)  # last point 9: its best is 1
    trials = [noisy, _flat("b", 2.0), _flat("c", 3.0), _flat("d", 4.0)]
    assert "noisy" not in {s.key for s in judge(MEDIAN, "min", trials)}


@pytest.mark.parametrize(("case", "trials"), [
    ("too few others at its step", [_flat("a", 1.0), _flat("b", 2.0), _flat("c", 3.0, upto=10), _flat("d", 9.0)]),
    ("before min_steps", [_flat(k, v, upto=4) for k, v in (("a", 1), ("b", 2), ("c", 3), ("d", 9))]),
    ("in its grace", [_flat("a", 1.0), _flat("b", 2.0), _flat("c", 3.0), _flat("d", 9.0, running=5.0)]),
    ("not running", [_flat("a", 1.0), _flat("b", 2.0), _flat("c", 3.0), _flat("d", 9.0, running=None)]),
])
def test_the_median_rule_leaves_d_alone(case, trials):
    spec = EarlyStop("median", min_steps=5, grace_s=10)
    assert "d" not in {s.key for s in judge(spec, "min", trials)}, case


def test_an_ended_trial_counts_at_its_final_best():
    """Survivors alone would put the bar among the good trials: the worse ones that ended count."""
    trials = [_flat("a", 1.0), _flat("b", 1.1), _flat("w1", 5.0, upto=8, running=None),
              _flat("w2", 6.0, upto=8, running=None), _flat("w3", 7.0, upto=8, running=None)]
    assert judge(MEDIAN, "min", trials) == []  # without w1-w3 there are too few others; with them b is fine
    assert [s.key for s in judge(MEDIAN, "min", [*trials, _flat("c", 8.0)])] == ["c"]


def test_the_current_best_is_never_stopped():
    """The leader (its best the best of all trials', ended ones too) goes on, whatever its step's median says."""
    late = Trial("late", STEPS, [9.0] * 10 + [0.5] * 10, None, 100.0)  # judged at 20 its best is 0.5: it leads
    assert "late" not in {s.key for s in judge(MEDIAN, "min", [late, _flat("b", 1), _flat("c", 2), _flat("d", 3)])}
    # ASHA at rung 9 sees its 9.0 (worse than all), but it leads: it goes on.
    asha = EarlyStop("asha", min_steps=1)
    assert "late" not in {s.key for s in judge(asha, "min", [late, _flat("b", 1), _flat("c", 2), _flat("d", 3)])}


def test_nan_points_are_left_out_and_an_infinite_loss_is_the_worst():
    trials = [Trial("nan", STEPS, [math.nan] * 19 + [1.0], None, 100.0), _flat("b", 2.0), _flat("c", 3.0),
              Trial("inf", STEPS, [math.inf] * 20, None, 100.0)]
    stops = judge(MEDIAN, "min", trials)
    assert [s.key for s in stops] == ["c", "inf"]  # "nan" leads at 1.0; c is over the median of 1, 2 and inf
    assert stops[0].threshold == 2.0 and stops[1].threshold == 2.0


def test_asha_rungs():
    assert rungs(10, 100) == [10, 30, 90]
    assert rungs(5, 4) == []
    assert rungs(0, 10) == [1, 3, 9]  # min_steps 0: from step 1


def test_asha_keeps_the_top_third_of_those_at_a_rung_when_at_least_three_are():
    asha = EarlyStop("asha", min_steps=2)  # rungs 2, 6, 18
    trials = [_flat(k, v, upto=7) for k, v in (("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5), ("f", 6))]
    stops = judge(asha, "min", trials)
    assert [s.key for s in stops] == ["c", "d", "e", "f"]  # 6 at rung 6: the top 2 go on
    assert (stops[0].rule, stops[0].step, stops[0].threshold, stops[0].compared) == ("asha", 6, 2.0, 6)
    assert judge(asha, "min", trials[:2]) == []  # 2 at the rung: fewer than 3, both go on


def test_asha_judges_a_trial_against_those_that_reached_its_rung_before_it():
    """As in ASHA, what reaches a rung later never stops a trial that passed it."""
    asha = EarlyStop("asha", min_steps=2)
    early = [_flat("a", 3.0, upto=7), _flat("b", 4.0, upto=7), _flat("c", 2.0, upto=7)]
    late = [_flat(k, v, upto=7, start_ms=60_000) for k, v in (("x", 1.0), ("y", 1.5), ("z", 1.7))]
    stops = {s.key for s in judge(asha, "min", early + late)}
    assert stops == {"a", "b", "z"}  # a, b: against a, b, c; z: against all six (x, y: the top two)


@pytest.mark.parametrize(("raw", "words"), [
    ({"rule": "mean"}, "rule must be one of median, asha, got 'mean'"),
    ({"rule": "median", "min_steps": -1}, "min_steps must be a whole number, 0 or more, got -1"),
    ({"rule": "median", "min_steps": 1.5}, "min_steps must be a whole number, 0 or more, got 1.5"),
    ({"rule": "asha", "grace_s": -1}, "grace_s must be a number of seconds, 0 or more, got -1"),
])
def test_a_bad_early_stop_is_named(raw, words):
    with pytest.raises(ValueError, match=words):
        EarlyStop.of(raw)
    assert EarlyStop.of({"rule": "asha", "min_steps": 3, "grace_s": 30}) == EarlyStop("asha", 3, 30.0)
    with pytest.raises(ValueError, match="goal must be min or max"):
        judge(MEDIAN, "lower", [])


# The corpus ------------------------------------------------------------------------------

SWEEPS = corpus.load()


@functools.cache
def _score(rule: str, share: float) -> replay.Score:
    """The corpus played with ``min_steps`` at ``share`` of each run (once per module)."""
    return early_stop_bench.run(SWEEPS, rule, share)


def test_the_corpus_plants_every_kind():
    planted = {t.kind for s in SWEEPS for t in s.trials}
    assert set(corpus.KEEP) | set(corpus.STOP) <= planted
    assert sum(t.kind == "slow" for s in SWEEPS for t in s.trials) >= 20


def test_the_median_rule_on_the_corpus_stops_no_good_trial_and_most_bad_ones():
    """min_steps at half of each run: no must-keep trial stopped (the slow starters caught up
    by then); at least 80 % of the must-stop ones stopped (most of the rest never had three
    others at their step: the fastest of the first trials of a sweep)."""
    score = _score("median", 0.5)
    assert score.false_stops == []
    stopped, planted = score.rate(corpus.STOP)
    assert stopped >= 0.8 * planted and score.rate(["real worse"]) == (12, 12)
    assert score.ran < 0.85 * score.full


def test_an_earlier_min_steps_stops_sooner_but_catches_slow_starters():
    """At 30 % the best and the noisy good trials still go on; slow starters are the price."""
    score = _score("median", 0.3)
    assert score.rate(["best", "noisy"]) == (0, 82)
    assert score.rate(["slow"])[0] > 0
    assert score.ran < _score("median", 0.5).ran


def test_asha_stops_the_bad_trials_and_is_harsher_on_good_ones():
    """ASHA keeps a third at each rung: it stops more bad trials sooner, and more good ones
    (``bench/early_stop_bench.py`` reports how many)."""
    asha, median = _score("asha", 0.3), _score("median", 0.3)
    stopped, planted = asha.rate(corpus.STOP)
    assert stopped >= 0.8 * planted
    assert asha.ran < median.ran
    assert asha.rate(["best"])[0] > median.rate(["best"])[0]


def test_the_replay_plays_the_sweep_out():
    """Nothing stopped: every step runs; a rule that judges: fewer."""
    sweep = SWEEPS[0]
    idle = replay.play(sweep, EarlyStop("median", min_steps=10**9))
    assert idle.stops == {} and idle.ran == idle.full == sum(t.steps[-1] for t in sweep.trials)
