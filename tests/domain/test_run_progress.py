"""A run's progress (step, max_steps, epoch, rate, ETA) and health from its summary."""

from __future__ import annotations

import math

import pytest

from gpuplaned.domain import run_progress, run_summary


def fold(batches, summary=None):
    """``batches``: [(first step, count, ts of the first, ms per step)] of train/loss and epoch."""
    for first, count, ts0, ms in batches:
        steps = list(range(first, first + count))
        ts = [ts0 + k * ms for k in range(count)]
        points = {"train/loss": (steps, ts, [1.0 / (s + 1) for s in steps]),
                  "epoch": (steps, ts, [float(s // 100) for s in steps])}
        summary, _ = run_summary.update(summary, points, {"train/loss": "minimize", "epoch": None})
    return summary


PROGRESS_CASES = [
    # label, batches, config -> (steps_per_s, eta_s, percent)
    ("10 steps/s, max_steps 1000", [(k * 50, 50, k * 5000, 100) for k in range(4)], {"max_steps": 1000},
     (10.0, 80.1, 19.9)),
    ("no max_steps: a rate, no ETA", [(k * 50, 50, k * 5000, 100) for k in range(4)], None, (10.0, None, None)),
    ("one batch: no rate yet", [(0, 50, 0, 100)], {"max_steps": 1000}, (None, None, 4.9)),
    ("the recent pace: slowed to 1 step/s", [(k * 10, 10, k * 1000, 100) for k in range(3)]
     + [(30 + k * 10, 10, 3000 + k * 10_000, 1000) for k in range(40)], {"total_steps": 1000},
     (1.0, None, 42.9)),
]


@pytest.mark.parametrize("label, batches, config, expected", PROGRESS_CASES, ids=[c[0] for c in PROGRESS_CASES])
def test_progress(label, batches, config, expected):
    view = run_progress.progress(fold(batches), config)
    rate, eta, percent = expected
    assert view["steps_per_s"] == (None if rate is None else pytest.approx(rate, rel=0.02))
    if eta is None:
        assert view["eta_s"] is None or label.startswith("the recent")
    else:
        assert view["eta_s"] == pytest.approx(eta, rel=0.02)
    assert view["percent"] == percent


def test_epoch_and_eta_ts():
    view = run_progress.progress(fold([(k * 50, 50, k * 5000, 100) for k in range(4)]), {"max_steps": 1000})
    assert view["step"] == 199 and view["max_steps"] == 1000 and view["epoch"] == 1.0
    assert view["eta_ts"] == 19_900 + int(80.1 * 1000)


@pytest.mark.parametrize("config", [{"max_steps": 0}, {"max_steps": "10"}, {"max_steps": True}, {}])
def test_max_steps_must_be_a_positive_integer(config):
    assert run_progress.progress(fold([(0, 10, 0, 100)]), config)["max_steps"] is None


def test_a_rewind_drops_the_marks_past_it():
    summary = fold([(k * 50, 50, k * 5000, 100) for k in range(4)])
    rewound = run_summary.after_rewind(summary, "train/loss", 100, (99, 9900, 0.01), (0.01, 99), [0.5] * 64)
    rewound = run_summary.after_rewind(rewound, "epoch", 100, (99, 9900, 0.0), None)
    assert rewound["progress"]["step"] == 99 and rewound["_rate"] == [[49, 4900], [99, 9900]]
    assert "_rate" not in run_summary.public(rewound)


def test_health_lists_the_open_episodes():
    summary, _ = run_summary.update(None, {"train/loss": (list(range(30)), list(range(30)),
                                                          [1.0] * 29 + [math.nan])}, {"train/loss": "minimize"})
    (warning,) = run_progress.health(summary, run_summary.SPIKE_GAP)
    assert warning["type"] == "LOSS_NAN" and warning["severity"] == "critical"
    assert run_progress.health(fold([(0, 100, 0, 100)]), run_summary.SPIKE_GAP) == []
