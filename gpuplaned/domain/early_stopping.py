"""Early stopping of a sweep's trials: which running trials to stop, judged on the sweep's
primary metric. Pure: the pass (``gpuplaned.service.passes.early_stop``) reads the points
and carries out what this says.

Two rules, each over the trials' *best so far* (the best value of a trial's points up to a
step: a noisy trial is judged by what it reached, not by its last minibatch):

- ``median`` (Optuna's MedianPruner, Vizier's median automated stopping): a trial at step s
  (its latest, s >= ``min_steps``) whose best so far is worse than the median of the other
  trials' best so far at s is stopped, once ``MEDIAN_MIN_OTHERS`` others are counted. The
  others are the trials that reached s and, as Vizier counts its completed trials, those that
  ended before it, at their final best: counting only the trials still going at s would take
  the median over the survivors of earlier stops, and so stop half of the good trials, the
  one that ends best among them (the corpus showed it: ``bench/early_stop_bench.py``).
- ``asha`` (asynchronous successive halving, Li et al. 2020; Ray Tune's AsyncHyperBand):
  rungs at ``min_steps * ETA**k`` (``min_steps`` 0: from step 1). A trial that reached a rung
  goes on only if its best so far at that rung is in the top ``1/ETA`` of the trials that had
  reached the rung when it did (itself included), judged once at least ``ETA`` had; else it is
  stopped. As in ASHA,
  a trial is judged at its latest rung against those that reached it before it, so what
  later trials do at a rung it has passed never stops it after the fact.

Both never stop:
- a trial that is not running (the caller says which are);
- a trial in its first ``grace_s`` seconds of running, or before step ``min_steps``;
- the current best trial: the one whose best value is the best of the sweep's, all trials
  (ended ones too) counted.

NaN points are left out (``on_nan`` handles a NaN loss); an infinite loss is simply the worst.
How the rules were judged: ``bench/early_stop_bench.py`` on the corpus of
``tests/sweep_corpus`` (trials they must stop, trials they must not), also checked by
``tests/domain/test_early_stopping.py``.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from itertools import accumulate
from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

import attrs

EARLY_STOPPED = "EARLY_STOPPED"  # the event of a stopped trial: rule, value, threshold, step
RULES = ("median", "asha")
GOALS = ("min", "max")
ETA = 3  # ASHA's reduction factor: a third of a rung goes on
MEDIAN_MIN_OTHERS = 3  # other trials at a step before the median rule judges it
DEFAULT_MIN_STEPS = 0
DEFAULT_GRACE_S = 0.0


@attrs.frozen
class EarlyStop:
    """A sweep's ``early_stop``: the rule, the first step judged, the seconds of grace."""

    rule: str
    min_steps: int = DEFAULT_MIN_STEPS
    grace_s: float = DEFAULT_GRACE_S

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> EarlyStop:
        """The sweep's stored ``early_stop`` JSON (``{"rule", "min_steps", "grace_s"}``).

        Raises:
            ValueError: an unknown rule, a step under 1 or a negative grace, named.
        """
        rule = raw.get("rule")
        if rule not in RULES:
            raise ValueError(f"early_stop rule must be one of {', '.join(RULES)}, got {rule!r}")
        min_steps = raw.get("min_steps")
        min_steps = DEFAULT_MIN_STEPS if min_steps is None else min_steps
        if isinstance(min_steps, bool) or not isinstance(min_steps, int) or min_steps < 0:
            raise ValueError(f"early_stop min_steps must be a whole number, 0 or more, got {min_steps!r}")
        grace = raw.get("grace_s")
        grace = DEFAULT_GRACE_S if grace is None else grace
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace < math.inf:
            raise ValueError(f"early_stop grace_s must be a number of seconds, 0 or more, got {grace!r}")
        return cls(rule, min_steps, float(grace))


@attrs.frozen
class Trial:
    """One trial's primary metric so far.

    ``steps`` ascending, ``values`` and ``ts`` (ms, when each point was logged) beside them;
    ``running_s``: how long its current attempt has run (None: it ended: never judged, and
    counted in the median at its final best).
    """

    key: str
    steps: Sequence[int]
    values: Sequence[float]
    ts: Sequence[int] | None = None
    running_s: float | None = None
    # Its curves by goal, made once: a caller that keeps the trial between passes (attrs.evolve
    # shares this dict) does not walk its points again.
    memo: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)


@attrs.frozen
class Stop:
    """A trial to stop: ``value`` (its best so far at ``step``) is worse than ``threshold``."""

    key: str
    rule: str
    step: int
    value: float
    threshold: float
    compared: int  # the trials the threshold was taken over (for asha, the trial among them)
    reason: str


class _Curve:
    """A trial's best so far by step, and when it first reached each step."""

    def __init__(self, trial: Trial, pick: Any) -> None:
        """``pick``: ``min`` for a goal of min, ``max`` for max."""
        steps, values = trial.steps, trial.values
        ts: Sequence[int] = trial.ts if trial.ts is not None else [0] * len(steps)  # no times: all at once
        if math.isnan(sum(values)):  # a NaN among them (or +inf and -inf): those left out
            kept = [k for k, v in enumerate(values) if v == v]
            steps, values, ts = [steps[k] for k in kept], [values[k] for k in kept], [ts[k] for k in kept]
        # Arrays: 8 bytes a point, where a list of floats takes 32 (a pass keeps every trial's).
        self.steps = array("q", steps)
        self.best = array("d", accumulate(values, pick))
        # reached[i]: the earliest time a point at step >= steps[i] was logged (a suffix minimum:
        # points come by step, and ranks or a resume may log a step late).
        self.reached = array("q", accumulate(reversed(ts), min))
        self.reached.reverse()

    @property
    def last_step(self) -> int | None:
        return self.steps[-1] if self.steps else None

    def best_at(self, step: int) -> float | None:
        """The best value of the points at or before ``step``; None before the first."""
        i = bisect_right(self.steps, step)
        return self.best[i - 1] if i else None

    def reached_at(self, step: int) -> int | None:
        """When the trial first logged a point at ``step`` or later; None if it has not."""
        i = bisect_right(self.steps, step - 1)
        return self.reached[i] if i < len(self.steps) else None


def judge(spec: EarlyStop, goal: str, trials: Sequence[Trial]) -> list[Stop]:
    """The running trials ``spec``'s rule stops now, in ``trials``' order.

    ``trials``: every trial of the sweep that has points, ended ones too (they count in the
    medians, the rungs and the current best).

    Raises:
        ValueError: a goal other than min or max.
    """
    if goal not in GOALS:
        raise ValueError(f"goal must be min or max, got {goal!r}")
    better = (lambda a, b: a < b) if goal == "min" else (lambda a, b: a > b)
    curves = {t.key: _curve(t, goal) for t in trials}
    ended = {t.key for t in trials if t.running_s is None}
    finals = {key: c.best[-1] for key, c in curves.items() if c.best}
    leader = None
    for key, value in finals.items():  # the first of equals leads: it got there first in the list
        if leader is None or better(value, finals[leader]):
            leader = key
    out = []
    for trial in trials:
        curve = curves[trial.key]
        if trial.running_s is None or trial.running_s < spec.grace_s or trial.key == leader:
            continue
        step = curve.last_step
        if step is None or step < spec.min_steps:
            continue
        others = [(c, key in ended) for key, c in curves.items() if key != trial.key]
        stop = (_median if spec.rule == "median" else _asha)(trial.key, curve, others, spec, goal, better)
        if stop is not None:
            out.append(stop)
    return out


def _curve(trial: Trial, goal: str) -> _Curve:
    curve = trial.memo.get(goal)
    if curve is None:
        curve = trial.memo[goal] = _Curve(trial, min if goal == "min" else max)
    return curve


def compact(trial: Trial, goal: str) -> Trial:
    """``trial`` with its curve for ``goal`` made and its points dropped: what a caller keeps
    between passes (``judge`` with the same goal reads only the curve)."""
    _curve(trial, goal)
    return attrs.evolve(trial, steps=(), values=(), ts=None)


def _median(key: str, curve: _Curve, others: Sequence[tuple[_Curve, bool]], spec: EarlyStop, goal: str,
            better: Any) -> Stop | None:
    step = curve.last_step
    assert step is not None
    value = curve.best_at(step)
    at_step = [b for c, ended in others
               if (ended or (c.last_step or -1) >= step) and (b := c.best_at(step)) is not None]
    if value is None or len(at_step) < MEDIAN_MIN_OTHERS:
        return None
    threshold = median(at_step)
    if not better(threshold, value):
        return None
    return Stop(key, "median", step, value, threshold, len(at_step),
                f"its best {value:.6g} at step {step} is worse than the median {threshold:.6g} of the "
                f"{len(at_step)} other trials at that step ({'lower' if goal == 'min' else 'higher'} is better)")


def rungs(min_steps: int, up_to: int) -> list[int]:
    """ASHA's rungs up to step ``up_to``: ``min_steps * ETA**k`` (from step 1 when ``min_steps`` is 0)."""
    out, rung = [], max(1, min_steps)
    while rung <= up_to:
        out.append(rung)
        rung *= ETA
    return out


def _asha(key: str, curve: _Curve, others: Sequence[tuple[_Curve, bool]], spec: EarlyStop, goal: str,
          better: Any) -> Stop | None:
    step = curve.last_step
    assert step is not None
    reached = rungs(spec.min_steps, step)
    if not reached:
        return None
    rung = reached[-1]
    value = curve.best_at(rung)
    when = curve.reached_at(rung)
    if value is None or when is None:
        return None
    # The trials that had reached the rung when this one did (ties in time count as before).
    before = [b for c, _ended in others if (t := c.reached_at(rung)) is not None and t <= when
              and (b := c.best_at(rung)) is not None]
    field = len(before) + 1
    if field < ETA:
        return None
    top = max(1, field // ETA)
    ranked = sorted([*before, value], key=lambda v: v if goal == "min" else -v)
    threshold = ranked[top - 1]  # the worst value still in the top 1/ETA
    if not better(threshold, value):
        return None
    return Stop(key, "asha", rung, value, threshold, field,
                f"its best {value:.6g} at rung step {rung} is outside the top {top} of the {field} trials that "
                f"reached that rung (the cut: {threshold:.6g}, {'lower' if goal == 'min' else 'higher'} is better)")
