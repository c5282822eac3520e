"""OVERFITTING_SUSPECTED (warning): an eval loss more than ``rise`` (10%) above its best for
``evals`` (3) evaluations in a row while the train loss still falls.

An eval loss is noisy too (the alarm corpus, ``tests/alarm_corpus``: a flat one with 4%
noise is 10% over its luckiest evaluation three times in a row now and then, and the quick
start's went 25% over its best at 0.036 for four evaluations and came back), so the rule
reads it smoothed and against its own noise: each evaluation counts as the median of the
last ``SMOOTH`` (3), the best is the best of those, and "above" means above the best by
``rise`` of it and by ``NOISE`` times the eval loss's noise (its standard deviation, from
the median second difference of the last ``DIFFS`` evaluations: a steady trend is no noise).

Pure, run from the summary fold (``gpuplaned.domain.run_summary.update``) over each batch of
an eval loss's points in step order. The state is JSON (it lives in the run's summary):
``{"best": value, "best_step": step, "above": [[step, value], ...], "open": bool, "recent":
[...], "diffs": [...], "train_at_best": the train loss's rolling median then}``. The
episode opens with the event and closes when an eval comes back within reach of the best
(or beats it); only then can a later rise raise again. The train loss must be below where
it stood at the best: after a warm restart both losses are up, which is no overfitting.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from statistics import median
from typing import Any

import attrs

from gpuplaned.domain.rules import evidence

OVERFITTING_SUSPECTED = "OVERFITTING_SUSPECTED"
SMOOTH = 3  # an evaluation counts as the median of the last this many
NOISE = 3.0  # a rise is at least this many times the eval loss's noise...
DIFFS = 32  # ...estimated from the last this many second differences of its evaluations
_SECOND = 1.65  # the median |second difference| of Gaussian noise, in its standard deviations
_EVAL_WORDS = ("eval", "val", "valid", "validation", "test", "dev", "holdout")


@attrs.frozen
class OverfitPolicy:
    rise: float = 0.10  # above the best by this fraction of it
    evals: int = 3  # for this many evaluations in a row
    enabled: bool = True


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]


def is_eval_loss(name: str) -> bool:
    """A loss measured on held-out data: ``eval/loss``, ``val_loss``, ``valid/nll_loss``."""
    return "loss" in name.lower() and any(w in _EVAL_WORDS for w in _words(name))


def train_loss_for(eval_name: str, names: Iterable[str]) -> str | None:
    """The train loss an eval loss is judged against: ``train/<same last part>``, else
    ``train_loss``/``train/loss``/``loss``, else the first other loss by name."""
    losses = sorted(n for n in names if "loss" in n.lower() and not is_eval_loss(n))
    last = eval_name.split("/")[-1]
    for wanted in (f"train/{last}", "train/loss", "train_loss", "loss"):
        if wanted in losses:
            return wanted
    return losses[0] if losses else None


def smoothed(values: Sequence[float]) -> list[float]:
    """Each value as the rule reads it: the median of the last ``SMOOTH`` up to it."""
    return [median(values[max(0, k - SMOOTH + 1):k + 1]) for k in range(len(values))]


def noise(values: Sequence[float]) -> float:
    """The eval loss's noise as the rule estimates it: from the median second difference of
    the last ``DIFFS`` values (0 for fewer than 3)."""
    diffs = [abs(c - 2 * b + a) / _SECOND for a, b, c in zip(values, values[1:], values[2:])][-DIFFS:]
    return median(diffs) if diffs else 0.0


def update(state: Mapping[str, Any] | None, name: str, steps: Sequence[int], values: Sequence[float],
           train: str | None, train_falling: bool,
           policy: OverfitPolicy = OverfitPolicy(),
           train_level: float | None = None) -> tuple[dict[str, Any], list[tuple[int, str, dict[str, Any]]]]:
    """The state after the eval points ``(steps, values)`` and the events they raised, each
    ``(step, message, context)``. ``train_falling``: the train loss ``train`` trends down;
    ``train_level``: its rolling median now (None: unknown), which must be below the one at
    the eval's best (after a warm restart both losses are up: no overfitting)."""
    out: dict[str, Any] = {"best": None, "best_step": None, "above": [], "open": False, "recent": [], "diffs": []}
    out.update(state or {})
    out["above"] = [list(p) for p in out["above"]]
    recent, diffs = list(out.get("recent") or []), list(out.get("diffs") or [])
    raised: list[tuple[int, str, dict[str, Any]]] = []
    for step, raw in sorted(zip(steps, values), key=lambda p: p[0]):
        if not (isinstance(raw, (int, float)) and math.isfinite(raw)):
            continue  # a NaN is LOSS_NAN's, never a rise
        if len(recent) >= 2:  # a second difference: a steady trend is no noise
            diffs = (diffs + [abs(raw - 2 * recent[-1] + recent[-2]) / _SECOND])[-DIFFS:]
        recent = (recent + [raw])[-SMOOTH:]
        value = median(recent)
        best = out["best"]
        if best is None or value < best:
            out.update(best=value, best_step=step, above=[], open=False, train_at_best=train_level)
        elif value > best + max(policy.rise * abs(best), NOISE * median(diffs or [0.0])):
            out["above"] = (out["above"] + [[step, value]])[-policy.evals:]
            at_best = out.get("train_at_best")
            improved = train_falling and (train_level is None or at_best is None or train_level < at_best)
            if len(out["above"]) >= policy.evals and not out["open"] and improved and policy.enabled:
                out["open"] = True
                rise = (value - best) / abs(best) * 100 if best else math.inf
                context = {"metric": name, "train_metric": train, "best": best, "best_step": out["best_step"],
                           "evidence": [evidence.metric(name, [out["best_step"], step],
                                                        [best, *(v for _s, v in out["above"])])]}
                raised.append((step, f"{name} is {value:.6g} at step {step} (median of its last {len(recent)}), "
                                     f"{rise:.0f}% above its best {best:.6g} (step {out['best_step']}) for "
                                     f"{policy.evals} evaluations while {train} still falls", context))
        else:
            out.update(above=[], open=False)  # back within reach of the best: the episode is over
    out["recent"], out["diffs"] = recent, diffs
    return out, raised
