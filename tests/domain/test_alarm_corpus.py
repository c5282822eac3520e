"""The detector's rules on the alarm corpus (``tests/alarm_corpus``: real PyTorch runs and
seeded curves, healthy and troubled): no alarm on a healthy curve, every planted fault
found. ``bench/alarm_bench.py`` prints the same as a table."""

from __future__ import annotations

import pytest
from alarm_corpus import corpus, replay

from gpuplaned.config import DetectorConfig
from gpuplaned.domain.diagnosis.curves import Curve as DiagnosisCurve
from gpuplaned.domain.diagnosis.run import diagnose_run

CURVES = corpus.load()


@pytest.fixture(scope="module")
def result():
    return replay.score(CURVES)


def test_the_corpus_holds_real_runs_and_every_kind_of_fault():
    names = [c.name for c in CURVES]
    assert sum("quick start, seed" in n for n in names) >= 5 and any("TensorBoard" in n for n in names)
    rules = {f.rule for c in CURVES for f in c.faults}
    assert rules == {"LOSS_SPIKE", "LOSS_NAN", "OVERFITTING_SUSPECTED", "RUN_STALLED"}
    assert sum(c.healthy for c in CURVES) >= 40


def test_no_rule_raises_on_a_healthy_curve(result):
    assert result.healthy_runs >= 40 and result.noisy == []


def test_every_planted_fault_is_found(result):
    assert result.missed == []
    assert result.found == result.planted and result.planted["LOSS_SPIKE"] >= 30


def test_the_quick_start_raises_nothing_with_the_rule_it_had_it_raised_seven():
    quick = next(c for c in CURVES if c.name == "quick start, seed 0")
    assert [a for a in replay.metric_alarms(quick) if a.rule == "LOSS_SPIKE"] == []
    # The old rule, a jump alone (any jump is extreme, nothing is followed), finds the seven.
    old = DetectorConfig(spike_extreme=1.0, spike_hold=3)
    assert len([a for a in replay.metric_alarms(quick, old) if a.rule == "LOSS_SPIKE"]) >= 5


def test_diagnose_finds_no_problem_on_a_healthy_curve():
    """``diagnose`` judges spikes, a rising loss and overfitting as the rules do: the quick
    start's minibatch tail, a noisy flat tail and a lucky evaluation are no problems."""
    problems = {}
    for curve in CURVES:
        if curve.healthy:
            by_step = {name: DiagnosisCurve.points(steps, values) for name, (steps, values) in curve.metrics.items()}
            report = diagnose_run({"id": "run_corpus", "status": "SUCCEEDED"}, by_step)
            bad = [f["claim"] for f in report["findings"] if f["severity"] != "info"]
            if bad:
                problems[curve.name] = bad
            else:
                assert "no problem found" in report["summary"]
    assert problems == {}


def test_diagnose_still_finds_the_real_divergence_and_the_real_overfit():
    for name, kind in [("noisy twin, learning rate raised until it diverges", "instability"),
                       ("quick start on 100 samples (overfits)", "overfitting")]:
        curve = next(c for c in CURVES if c.name == name)
        by_step = {n: DiagnosisCurve.points(steps, values) for n, (steps, values) in curve.metrics.items()}
        report = diagnose_run({"id": "run_corpus", "status": "SUCCEEDED"}, by_step)
        assert kind in {f["kind"] for f in report["findings"] if f["severity"] != "info"}, report["findings"]
