"""A run's progress and health for its summary (seed 000 section 10.2): step, ``max_steps``,
epoch, the step rate and an ETA, and the warnings of the rules' open episodes.

Pure. ``track`` runs in the summary fold, once per batch: it keeps the run's last
``RATE_WINDOW`` (step, ts) marks (the batch's highest step and when it was logged), so the
rate is the recent one, not the average since the start (a run resumed or slowed shows its
current pace). ``progress`` and ``health`` run when the summary is read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from gpuplaned.protocol.vocabulary import SEVERITY_RANK

RATE_WINDOW = 32


def track(marks: Sequence[Sequence[int]] | None, metrics: Mapping[str, Mapping[str, Any]]) -> list[list[int]]:
    """The marks after a batch: the run's latest (step, ts) over every metric, added when it
    is past the last mark's step."""
    out = [list(m) for m in marks or ()]
    latest = [(m["latest"]["step"], m["latest"]["ts"]) for m in metrics.values() if m.get("latest")]
    if latest:
        step, ts = max(latest)
        if not out or step > out[-1][0]:
            out.append([step, ts])
    return out[-RATE_WINDOW:]


def rewound(marks: Sequence[Sequence[int]] | None, step: int | None) -> list[list[int]]:
    """The marks once the points after ``step`` were dropped (a resumed run's rewind)."""
    return [list(m) for m in marks or () if step is not None and m[0] <= step]


def _epoch(metrics: Mapping[str, Mapping[str, Any]]) -> float | None:
    for name in sorted(metrics):
        if name.lower().split("/")[-1] == "epoch" and metrics[name].get("latest"):
            value = metrics[name]["latest"]["value"]
            return value if isinstance(value, (int, float)) else None
    return None


def _max_steps(config: Mapping[str, Any] | None) -> int | None:
    for key in ("max_steps", "total_steps", "num_steps"):  # SDK init(max_steps=) writes the first
        value = (config or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def progress(summary: Mapping[str, Any] | None, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{step, max_steps, percent, epoch, steps_per_s, eta_s, eta_ts}``; a part that cannot
    be known (no max_steps, fewer than two marks) is None."""
    summary = summary or {}
    metrics = summary.get("metrics") or {}
    step = (summary.get("progress") or {}).get("step")
    max_steps = _max_steps(config)
    marks = summary.get("_rate") or []
    rate = None
    if len(marks) >= 2 and marks[-1][1] > marks[0][1] and marks[-1][0] > marks[0][0]:
        rate = (marks[-1][0] - marks[0][0]) / (marks[-1][1] - marks[0][1]) * 1000
    eta_s = eta_ts = None
    if rate and max_steps is not None and step is not None:
        eta_s = max(0.0, (max_steps - step) / rate)
        eta_ts = int(marks[-1][1] + eta_s * 1000) if math.isfinite(eta_s) else None
    percent = round(min(100.0, step / max_steps * 100), 2) if max_steps and step is not None else None
    return {"step": step, "max_steps": max_steps, "percent": percent, "epoch": _epoch(metrics),
            "steps_per_s": None if rate is None else round(rate, 6),
            "eta_s": None if eta_s is None else round(eta_s, 3), "eta_ts": eta_ts}


def health(summary: Mapping[str, Any] | None, spike_gap: int) -> list[dict[str, Any]]:
    """The warnings of the rules' open episodes, worst first: a loss that went NaN, an eval
    loss overfitting now, a spike within ``spike_gap`` steps of the loss's latest step."""
    summary = summary or {}
    metrics = summary.get("metrics") or {}
    out = []
    for name, state in sorted((summary.get("_state") or {}).items()):
        latest = (metrics.get(name) or {}).get("latest") or {}
        if state.get("nan_reported"):
            out.append({"type": "LOSS_NAN", "severity": "critical", "metric": name,
                        "message": f"{name} went NaN or infinite"})
        overfit = state.get("overfit") or {}
        if overfit.get("open"):
            out.append({"type": "OVERFITTING_SUSPECTED", "severity": "warning", "metric": name,
                        "step": overfit["above"][-1][0] if overfit.get("above") else None,
                        "message": f"{name} is more than its threshold above its best {overfit['best']:.6g} "
                                   f"(step {overfit['best_step']})"})
        spike = state.get("last_spike")
        if spike is not None and latest.get("step") is not None and latest["step"] - spike < spike_gap:
            out.append({"type": "LOSS_SPIKE", "severity": "warning", "metric": name, "step": spike,
                        "message": f"{name} spiked at step {spike}"})
    return sorted(out, key=lambda w: -SEVERITY_RANK[w["severity"]])  # the most urgent first
