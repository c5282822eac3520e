"""OVERFITTING_SUSPECTED (warning): an eval loss more than ``rise`` (10%) above its best for
``evals`` (3) evaluations in a row while the train loss still falls.

Pure, run from the summary fold (``gpuplaned.domain.run_summary.update``) over each batch of
an eval loss's points in step order. The state is JSON (it lives in the run's summary):
``{"best": value, "best_step": step, "above": [[step, value], ...], "open": bool}``. The
episode opens with the event and closes when an eval comes back within ``rise`` of the best
(or beats it); only then can a later rise raise again.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from gpuplaned.domain.rules import evidence

OVERFITTING_SUSPECTED = "OVERFITTING_SUSPECTED"
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


def update(state: Mapping[str, Any] | None, name: str, steps: Sequence[int], values: Sequence[float],
           train: str | None, train_falling: bool,
           policy: OverfitPolicy = OverfitPolicy()) -> tuple[dict[str, Any], list[tuple[int, str, dict[str, Any]]]]:
    """The state after the eval points ``(steps, values)`` and the events they raised, each
    ``(step, message, context)``. ``train_falling``: the train loss ``train`` trends down."""
    out: dict[str, Any] = {"best": None, "best_step": None, "above": [], "open": False}
    out.update(state or {})
    out["above"] = [list(p) for p in out["above"]]
    raised: list[tuple[int, str, dict[str, Any]]] = []
    for step, value in sorted(zip(steps, values), key=lambda p: p[0]):
        if not (isinstance(value, (int, float)) and math.isfinite(value)):
            continue  # a NaN is LOSS_NAN's, never a rise
        best = out["best"]
        if best is None or value < best:
            out.update(best=value, best_step=step, above=[], open=False)
        elif value > best + policy.rise * abs(best):
            out["above"] = (out["above"] + [[step, value]])[-policy.evals:]
            if len(out["above"]) >= policy.evals and not out["open"] and train_falling and policy.enabled:
                out["open"] = True
                rise = (value - best) / abs(best) * 100 if best else math.inf
                context = {"metric": name, "train_metric": train, "best": best, "best_step": out["best_step"],
                           "evidence": [evidence.metric(name, [out["best_step"], step],
                                                        [best, *(v for _s, v in out["above"])])]}
                raised.append((step, f"{name} is {value:.6g} at step {step}, {rise:.0f}% above its best "
                                     f"{best:.6g} (step {out['best_step']}) for {policy.evals} evaluations while "
                                     f"{train} still falls", context))
        else:
            out.update(above=[], open=False)  # back within reach of the best: the episode is over
    return out, raised
