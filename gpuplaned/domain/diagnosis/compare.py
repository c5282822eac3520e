"""``compare_runs`` and ``compare_checkpoints``.

Runs are aligned by step, or by time since each run's first point (``align="time"``): each
metric's bucket averages of each run are matched to the baseline's (the first run) at the
nearest x. Every metric the runs share is compared, and a metric departs from the baseline at
the first x from which the two differ by more than ``DIVERGE`` of their size for
``DIVERGE_RUN`` aligned points in a row. The departures lead the report, the earliest first
(two runs whose eval loss parts while their train loss matches say so first); the metrics that
track follow, one finding per run. Best value and step of the ranking metric (the primary
metric, else the training loss) by its direction, steps a second and GPU utilisation are given
as deltas from the baseline; the config diff lists every dotted key whose value differs.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from typing import Any

from gpuplaned.domain.diagnosis import evidence as ev
from gpuplaned.domain.diagnosis.curves import Curve

DIVERGE = 0.10
DIVERGE_RUN = 3
_MISSING = "<absent>"
_SHOWN = 4  # metric names a finding or the summary lists before "and N more"


def compare_runs(runs: Sequence[Mapping[str, Any]], metric: str | None, direction: str | None,
                 align: str = "step", *, shared: Sequence[str] | None = None,
                 left_out: Sequence[str] = ()) -> dict[str, Any]:
    """Compare runs, the first the baseline. Each: ``{"id", "config", "curves": {name: Curve}
    (over steps, or over ms since the run's first point ``t0``), "t0", "steps_per_s",
    "gpu_util"}``. ``metric``: the one runs are ranked by (its best value and step);
    ``shared``: the metrics compared (default: every name all runs have a curve of);
    ``left_out``: shared metrics not read (past the reader's bound), named in a finding."""
    assert align in ("step", "time") and len(runs) >= 2
    base = runs[0]
    names = list(shared) if shared is not None else sorted(set.intersection(*(set(r.get("curves") or {})
                                                                            for r in runs)))
    departures: list[tuple[int, str, dict[str, Any]]] = []
    findings: list[dict[str, Any]] = []
    actions: list[str] = []
    rows = [_row(r, metric, direction) for r in runs]
    by_metric: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for other, row in zip(runs[1:], rows[1:]):
        tracking, missing = [], []
        for name in names:
            found = _divergence(base, other, name, align)
            if found is None:
                missing.append(name)
            elif found["facts"]["divergence"] is None:
                tracking.append(name)
            else:
                departures.append((found["facts"]["divergence"], name, found))
                by_metric[name].append({"run_id": other["id"], "at": found["facts"]["divergence"]})
        if tracking:
            shown = ", ".join(tracking[:_SHOWN]) + _more(len(tracking))
            findings.append(ev.finding("divergence", "info", f"{shown} of {other['id']} "
                                       f"track{'s' * (len(tracking) == 1)} {base['id']} within {DIVERGE:.0%}",
                                       run_id=other["id"], divergence=None, metrics=tracking))
        if missing:
            findings.append(ev.finding("divergence", "info", f"nothing to align in {', '.join(missing[:_SHOWN])}"
                                       f"{_more(len(missing))} of {other['id']} and {base['id']}",
                                       run_id=other["id"], divergence=None, metrics=missing))
        if metric is not None:
            _best_delta(rows[0], row, metric, direction, align, findings)
        _rate_delta(rows[0], row, findings)
        diff = config_diff(base.get("config") or {}, other.get("config") or {})
        if diff:
            shown = ", ".join(f"{d['key']}: {d['a']!r} -> {d['b']!r}" for d in diff[:5])
            findings.append(ev.finding("config", "info", f"{other['id']} differs from {base['id']} in "
                                       f"{len(diff)} setting(s): {shown}", run_id=other["id"], diff=diff))
        else:
            findings.append(ev.finding("config", "info", f"{other['id']} has the same config as {base['id']}",
                                       run_id=other["id"], diff=[]))
    departures.sort(key=lambda d: (d[0], d[1]))
    if left_out:
        findings.append(ev.finding("divergence", "info", f"{len(left_out)} more shared metric(s) not compared: "
                                   f"{', '.join(left_out[:_SHOWN])}{_more(len(left_out))}", metrics=list(left_out)))
    winner = _winner(rows, direction)
    if winner is not None:
        actions.append(f"{winner['id']} has the best {metric}: start from its config")
    lead = (departures[0][2]["claim"] + (f" (and {len(departures) - 1} more departure(s))" if len(departures) > 1
                                         else "")
            if departures else f"no shared metric departs from {base['id']} ({len(names)} compared)")
    summary = (f"{lead}; {len(runs)} runs by {align}, baseline {base['id']}"
               + (f"; best {metric}: {winner['id']} ({winner['best_value']:.4g} at {winner['best_x']})"
                  if winner else f"; no comparable {metric or 'metric'}"))
    out = ev.report([d[2] for d in departures] + findings, summary, actions)
    out["runs"] = rows
    out["metric"], out["align"] = metric, align
    out["metrics"] = sorted(({"name": n, "departures": by_metric[n]} for n in names),
                            key=lambda m: (not m["departures"], min((d["at"] for d in m["departures"]), default=0),
                                           m["name"]))
    return out


def _more(count: int) -> str:
    return f" and {count - _SHOWN} more" if count > _SHOWN else ""


def _row(run: Mapping[str, Any], metric: str | None, direction: str | None) -> dict[str, Any]:
    curve: Curve | None = (run.get("curves") or {}).get(metric) if metric is not None else None
    best = _best(curve, direction) if curve is not None else None
    return {"id": run["id"], "best_value": best[1] if best else None, "best_x": best[0] if best else None,
            "steps_per_s": run.get("steps_per_s"), "gpu_util": run.get("gpu_util")}


def _best(curve: Curve, direction: str | None) -> tuple[int, float] | None:
    xs, ys = curve.finite()
    if not xs or direction not in ("minimize", "maximize"):
        return None
    pick = min if direction == "minimize" else max
    k = pick(range(len(ys)), key=ys.__getitem__)
    return xs[k], ys[k]


def _winner(rows: list[dict[str, Any]], direction: str | None) -> dict[str, Any] | None:
    known = [r for r in rows if r["best_value"] is not None]
    if not known:
        return None
    return (min if direction == "minimize" else max)(known, key=lambda r: r["best_value"])


def aligned(a: Curve, b: Curve) -> list[tuple[int, float, float]]:
    """``(x, a's value, b's value)`` at each of a's finite points, b's nearest finite point
    within one bucket of a's width."""
    bx, by = b.finite()
    out = []
    for x, va in zip(*a.finite()):
        k = bisect_left(bx, x)
        near = [j for j in (k - 1, k) if 0 <= j < len(bx)]
        if not near:
            continue
        j = min(near, key=lambda j: abs(bx[j] - x))
        if abs(bx[j] - x) <= max(a.width, b.width):
            out.append((x, va, by[j]))
    return out


def divergence_point(pairs: Sequence[tuple[int, float, float]]) -> int | None:
    run = 0
    for k, (x, va, vb) in enumerate(pairs):
        scale = max(abs(va), abs(vb), 1e-12)
        run = run + 1 if abs(va - vb) / scale > DIVERGE else 0
        if run == DIVERGE_RUN:
            return k - DIVERGE_RUN + 1
    return None


def _divergence(base: Mapping[str, Any], other: Mapping[str, Any], metric: str, align: str) -> dict[str, Any] | None:
    """The finding for ``metric`` of ``other`` against the baseline: where it departs, or
    ``divergence`` None when it tracks; None when either has no curve or no x in common."""
    a, b = (base.get("curves") or {}).get(metric), (other.get("curves") or {}).get(metric)
    if a is None or b is None:
        return None
    pairs = aligned(a, b)
    if not pairs:
        return None
    k = divergence_point(pairs)
    if k is None:
        return ev.finding("divergence", "info", f"{metric} tracks", run_id=other["id"], metric=metric,
                          divergence=None)
    x, va, vb = pairs[k]
    axis = "step" if align == "step" else "ms in"
    if align == "step":
        proofs = [ev.metric(base["id"], metric, [x], [va]), ev.metric(other["id"], metric, [x], [vb])]
    else:  # x is ms since each run's first point (``t0``): each run's own clock, one bucket wide
        proofs = [ev.metric_time(r["id"], metric, r["t0"] + x, r["t0"] + x + r["curves"][metric].width - 1)
                  for r in (base, other) if r.get("t0") is not None]
    return ev.finding("divergence", "warning" if k == 0 else "info",
                      f"{metric} of {other['id']} departs from {base['id']} at {axis} {x}: {vb:.4g} vs {va:.4g}",
                      *proofs, run_id=other["id"], metric=metric, divergence=x)


def _best_delta(base: dict[str, Any], row: dict[str, Any], metric: str, direction: str | None, align: str,
                findings: list) -> None:
    if base["best_value"] is None or row["best_value"] is None:
        return
    dv, dx = row["best_value"] - base["best_value"], row["best_x"] - base["best_x"]
    better = (dv < 0) == (direction == "minimize") and dv != 0
    word = "step" if align == "step" else "ms"
    findings.append(ev.finding(
        "best", "info", f"best {metric} of {row['id']}: {row['best_value']:.4g} at {word} {row['best_x']} "
        f"({dv:+.4g}, {'better' if better else 'not better'} than {base['id']}; {dx:+d} {word}s)",
        *([ev.metric(row["id"], metric, [row["best_x"]], [row["best_value"]])] if align == "step" else []),
        run_id=row["id"], best_value_delta=dv, best_x_delta=dx))


def _rate_delta(base: dict[str, Any], row: dict[str, Any], findings: list) -> None:
    parts, facts = [], {}
    for key, label, unit in (("steps_per_s", "throughput", " steps/s"), ("gpu_util", "GPU util", "%")):
        a, b = base[key], row[key]
        if a is None or b is None:
            continue
        facts[f"{key}_delta"] = b - a
        rel = f" ({(b - a) / a:+.0%})" if a else ""
        parts.append(f"{label} {b:.3g}{unit} vs {a:.3g}{unit}{rel}")
    if parts:
        findings.append(ev.finding("throughput", "info", f"{row['id']}: " + "; ".join(parts), run_id=row["id"],
                                   **facts))


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def config_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    fa, fb = flatten(a), flatten(b)
    return [{"key": k, "a": fa.get(k, _MISSING), "b": fb.get(k, _MISSING)}
            for k in sorted(set(fa) | set(fb)) if fa.get(k, _MISSING) != fb.get(k, _MISSING)]


def compare_checkpoints(checkpoints: Sequence[Mapping[str, Any]], metric: str | None,
                        direction: str | None) -> dict[str, Any]:
    """Compare checkpoints, the first the baseline. Each is a row of
    ``service.run_records.checkpoint_table`` (``id``, ``run_id``, ``step``, ``size_bytes``,
    ``parent_id``, ``metric_value``, ``evaluations``) plus ``ancestors`` (its lineage ids)."""
    assert len(checkpoints) >= 2
    base = checkpoints[0]
    findings: list[dict[str, Any]] = []
    actions: list[str] = []
    for ck in checkpoints[1:]:
        proofs = (ev.checkpoint(base["id"]), ev.checkpoint(ck["id"]))
        a, b = base.get("metric_value"), ck.get("metric_value")
        if metric and _finite(a) and _finite(b):
            better = (b < a) if direction == "minimize" else (b > a) if direction == "maximize" else None
            verdict = {True: "better", False: "not better", None: "no direction to rank by"}[better]
            findings.append(ev.finding("metric", "info", f"{metric} at {ck['id']} (step {ck.get('step')}): {b:.4g} vs "
                                       f"{a:.4g} at {base['id']} (step {base.get('step')}): {b - a:+.4g}, {verdict}",
                                       *proofs, checkpoint_id=ck["id"], delta=b - a))
        for name, (va, vb) in _eval_pairs(base, ck).items():
            findings.append(ev.finding("evaluation", "info",
                                       f"evaluation {name}: {vb:.4g} vs {va:.4g} ({vb - va:+.4g})",
                                       *proofs, checkpoint_id=ck["id"], metric=name, delta=vb - va))
        sa, sb = base.get("size_bytes"), ck.get("size_bytes")
        if sa is not None and sb is not None:
            findings.append(ev.finding("size", "info", f"{ck['id']} is {sb} bytes vs {sa} ({sb - sa:+d})", *proofs,
                                       checkpoint_id=ck["id"], delta=sb - sa))
        findings.append(ev.finding("lineage", "info", _lineage(base, ck), *proofs, checkpoint_id=ck["id"]))
    ranked = [ck for ck in checkpoints if _finite(ck.get("metric_value"))]
    best = None
    if ranked and direction in ("minimize", "maximize"):
        best = (min if direction == "minimize" else max)(ranked, key=lambda ck: ck["metric_value"])
        actions.append(f"{best['id']} has the best {metric}: evaluate or resume from it")
    deleted = [ck["id"] for ck in checkpoints if ck.get("deleted_at")]
    if deleted:
        findings.append(ev.finding("lineage", "warning", f"deleted (file gone): {', '.join(deleted)}",
                                   *map(ev.checkpoint, deleted)))
    summary = (f"{len(checkpoints)} checkpoints by {metric or 'no metric'}"
               + (f"; best {best['id']} ({best['metric_value']:.4g} at step {best.get('step')})" if best else ""))
    out = ev.report(findings, summary, actions)
    out["metric"], out["direction"] = metric, direction
    return out


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _eval_pairs(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    def latest(ck: Mapping[str, Any]) -> dict[str, float]:
        out: dict[str, float] = {}
        for e in reversed(ck.get("evaluations") or []):  # newest first: the oldest folded in first
            out.update({k: v for k, v in (e.get("metrics") or {}).items() if _finite(v)})
        return out
    ma, mb = latest(a), latest(b)
    return {k: (ma[k], mb[k]) for k in sorted(set(ma) & set(mb))}


def _lineage(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    if a["id"] in (b.get("ancestors") or []):
        return f"{b['id']} descends from {a['id']}"
    if b["id"] in (a.get("ancestors") or []):
        return f"{a['id']} descends from {b['id']}"
    if a.get("run_id") == b.get("run_id"):
        return f"both from run {a.get('run_id')}"
    return f"unrelated: runs {a.get('run_id')} and {b.get('run_id')}"
