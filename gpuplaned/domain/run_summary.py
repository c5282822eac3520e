"""A run's summary, kept up to date batch by batch, and the loss rules (seed 000 sections 10.1-10.2).

Pure: ``update`` takes the summary as stored (a JSON object), a batch of points and each
metric's direction, and returns the new summary and the events the batch raised. The summary
holds, per metric: the latest point, the best by its direction, how many points; the run's
progress (highest step); a trend over the recent window; and warnings. No LLM, no history
scan: everything is incremental. When a metric's direction is edited, its "best" in every
run is recomputed from the stored points instead (``gpuplaned.store.projects``).

- LOSS_NAN (critical): a loss-like metric (its name holds "loss") got NaN or infinity; once
  per metric.
- LOSS_SPIKE (warning): a loss-like value above the rolling median + 6 x MAD of the last
  ``WINDOW`` finite values (once ``MIN_WINDOW`` are known); at most once per ``SPIKE_GAP``
  steps per metric.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

import attrs

WINDOW = 64
MIN_WINDOW = 20
SPIKE_MADS = 6.0
SPIKE_GAP = 100
TREND_MIN = 8
DIRECTIONS = ("minimize", "maximize")
PRIMARY_SOURCES = ("experiment", "project", "global")
_MINIMIZE = ("loss", "error", "err", "perplexity", "ppl", "wer", "cer", "mse", "mae", "rmse", "nll")
_MAXIMIZE = ("acc", "accuracy", "f1", "ndcg", "mrr", "bleu", "rouge", "reward", "auc", "precision", "recall",
             "map", "iou", "dice")


@attrs.frozen
class SummaryEvent:
    type: str
    severity: str
    message: str
    step: int | None
    context: dict[str, Any]


def direction_for(name: str) -> str | None:
    """minimize or maximize by the metric's last name part (``eval/top1_acc`` -> maximize)."""
    words = re.split(r"[^a-z0-9]+", name.lower().split("/")[-1])  # ndcg@10, top1_acc, val-loss
    if any(w in _MINIMIZE for w in words):
        return "minimize"
    if any(w in _MAXIMIZE for w in words):
        return "maximize"
    return None


def is_loss(name: str) -> bool:
    return "loss" in name.lower()


def update(summary: Mapping[str, Any] | None, points: Mapping[str, tuple[Sequence[int], Sequence[int], Sequence[float]]],
           directions: Mapping[str, str | None]) -> tuple[dict[str, Any], list[SummaryEvent]]:
    """The summary after ``points`` ({name: (steps, ts, values)}), and the events they raised."""
    out: dict[str, Any] = {"metrics": {}, "progress": {"step": None}, "warnings": [], "_state": {}}
    if summary:
        out.update({k: v for k, v in summary.items()})
        out["metrics"] = dict(out.get("metrics") or {})
        out["_state"] = dict(out.get("_state") or {})
        out["warnings"] = list(out.get("warnings") or [])
    events: list[SummaryEvent] = []
    for name, (steps, ts, values) in points.items():
        metric = dict(out["metrics"].get(name) or {"count": 0})
        metric["direction"] = directions.get(name)
        metric["count"] = metric.get("count", 0) + len(values)
        _latest(metric, steps, ts, values)
        _best(metric, steps, values, directions.get(name))
        if is_loss(name):
            state = dict(out["_state"].get(name) or {"window": [], "nan_reported": False, "last_spike": None})
            events += _loss_rules(name, state, steps, values, out["warnings"])
            metric["trend"] = _trend(state["window"])
            out["_state"][name] = state
        out["metrics"][name] = metric
        top = max(steps) if steps else None
        if top is not None and (out["progress"].get("step") is None or top > out["progress"]["step"]):
            out["progress"] = {"step": top}
    return out, events


def public(summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """The summary as the API shows it (without the rules' working state)."""
    if not summary:
        return {"metrics": {}, "progress": {"step": None}, "warnings": []}
    return {k: v for k, v in summary.items() if k != "_state"}


def resolve_primary(experiment: str | None, project: str | None,
                    global_: str | None) -> tuple[str | None, str | None]:
    """The primary metric and where it was set: the experiment's, else the project's, else the
    global one (seed 000 section 9); ``(None, None)`` when none is set anywhere."""
    for name, source in zip((experiment, project, global_), PRIMARY_SOURCES):
        if name is not None:
            return name, source
    return None, None


def primary_view(summary: Mapping[str, Any] | None, name: str | None, source: str | None,
                 direction: str | None) -> dict[str, Any] | None:
    """The primary metric as a run shows it: its latest and best point from the summary (null
    until the run logs it), with ``direction`` from its metric definition."""
    if name is None:
        return None
    metric = ((summary or {}).get("metrics") or {}).get(name) or {}
    return {"name": name, "source": source, "direction": direction,
            "count": metric.get("count", 0), "latest": metric.get("latest"), "best": metric.get("best")}


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _json_value(value: float) -> float | str:
    return value if _finite(value) else ("NaN" if value != value else ("Infinity" if value > 0 else "-Infinity"))


def _latest(metric: dict[str, Any], steps: Sequence[int], ts: Sequence[int], values: Sequence[float]) -> None:
    if not steps:
        return
    i = max(range(len(steps)), key=lambda k: (steps[k], ts[k]))
    old = metric.get("latest")
    if old is None or (steps[i], ts[i]) >= (old["step"], old["ts"]):
        metric["latest"] = {"step": steps[i], "ts": ts[i], "value": _json_value(values[i])}


def best_of(steps: Sequence[int], values: Sequence[float], direction: str | None) -> tuple[float, int] | None:
    """``(value, step)`` of the best finite value by ``direction`` (on a tie, the lowest step);
    None without a direction or a finite value."""
    if direction not in DIRECTIONS:
        return None
    sign = 1.0 if direction == "minimize" else -1.0
    found = min(((sign * v, s) for v, s in zip(values, steps) if _finite(v)), default=None)
    return None if found is None else (sign * found[0], found[1])


def better(direction: str, value: float, than: float) -> bool:
    return value < than if direction == "minimize" else value > than


def _best(metric: dict[str, Any], steps: Sequence[int], values: Sequence[float], direction: str | None) -> None:
    found = best_of(steps, values, direction)
    if found is None:
        return
    value, step = found
    old = metric.get("best")
    if old is None or better(direction, value, old["value"]):  # type: ignore[arg-type]
        metric["best"] = {"step": step, "value": value}


def _loss_rules(name: str, state: dict[str, Any], steps: Sequence[int], values: Sequence[float],
                warnings: list[str]) -> list[SummaryEvent]:
    events = []
    window: list[float] = list(state["window"])
    for step, value in sorted(zip(steps, values), key=lambda p: p[0]):
        if not _finite(value):
            if not state["nan_reported"]:
                state["nan_reported"] = True
                warnings.append(f"{name} was {_json_value(value)} at step {step}")
                events.append(SummaryEvent("LOSS_NAN", "critical", f"{name} is {_json_value(value)} at step {step}",
                                           step, {"metric": name}))
            continue
        if len(window) >= MIN_WINDOW:
            mid = median(window)
            mad = median(abs(v - mid) for v in window)
            last = state["last_spike"]
            if mad > 0 and value > mid + SPIKE_MADS * mad and (last is None or step - last >= SPIKE_GAP):
                state["last_spike"] = step
                events.append(SummaryEvent(
                    "LOSS_SPIKE", "warning",
                    f"{name} jumped to {value:.6g} at step {step} (rolling median {mid:.6g}, MAD {mad:.3g})",
                    step, {"metric": name, "value": value, "median": mid, "mad": mad}))
        window.append(value)
        del window[:-WINDOW]
    state["window"] = window
    return events


def _trend(window: Sequence[float]) -> str | None:
    """increasing, decreasing or stable: the least-squares slope over the window, relative to its spread."""
    n = len(window)
    if n < TREND_MIN:
        return None
    mean_x, mean_y = (n - 1) / 2, sum(window) / n
    slope = sum((i - mean_x) * (y - mean_y) for i, y in enumerate(window)) / sum((i - mean_x) ** 2 for i in range(n))
    spread = max(window) - min(window)
    if spread == 0 or abs(slope) * n < 0.1 * spread:
        return "stable"
    return "decreasing" if slope < 0 else "increasing"
