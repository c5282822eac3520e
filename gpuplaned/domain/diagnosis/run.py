"""``diagnose_run``: convergence, overfitting, instability, stalls, and throughput against GPU
utilisation, each claim with the points that show it.

- **convergence** (the training loss): the relative slope of its last ``TAIL`` of buckets:
  falling by more than ``FLAT`` of its level is converging, rising by more (and by more than
  ``RISE_NOISE`` standard errors of the slope: a noisy flat tail is no divergence) is
  diverging, else it has plateaued.
- **overfitting**: the evaluation loss's last ``OVERFIT_EVALS`` values all more than
  ``OVERFIT_RISE`` above its best while the training loss kept falling after that best,
  read as OVERFITTING_SUSPECTED reads them (each the median of the last 3, the rise past
  the eval loss's own noise).
- **instability**: the first NaN or infinity of a loss (its exact step, from the raw window
  of the first bucket holding one), and spikes: a bucket whose max is above the rolling
  median + ``SPIKE_MADS`` x MAD of the maxima of the buckets before it (like against like: a
  bucket of a hundred noisy points always has a max above its average) and, as LOSS_SPIKE
  asks of an isolated jump, past ``loss_spike.EXTREME`` times their range, the worst
  ``MAX_SPIKES``.
- **stalls**: gaps in time between points of the training loss longer than ``STALL_FACTOR``
  times the usual gap and ``STALL_MIN_MS``; gaps in steps likewise.
- **throughput**: steps a second over the run, against its GPUs' mean utilisation: under
  ``LOW_UTIL`` % the input pipeline, not the GPU, sets the pace.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

from gpuplaned.domain.diagnosis import evidence as ev
from gpuplaned.domain.diagnosis.curves import Curve, eval_loss, is_loss, mad, relative_slope, slope, train_loss
from gpuplaned.domain.rules import loss_spike, overfitting

TAIL = 0.2  # the last fifth of the run's buckets: the rolling window of the trend
MIN_TAIL = 5
FLAT = 0.02
RISE_NOISE = 3.0  # a rise is a divergence only past this many standard errors of the slope
OVERFIT_RISE = 0.10
OVERFIT_EVALS = 3  # the last this many evaluations all above the best by OVERFIT_RISE
SPIKE_MADS = 6.0
SPIKE_WINDOW = 32
MAX_SPIKES = 3
STALL_FACTOR = 10.0
STALL_MIN_MS = 60_000
LOW_UTIL = 30.0


def diagnose_run(run: Mapping[str, Any], by_step: Mapping[str, Curve], *, by_time: Curve | None = None,
                 raw: Mapping[str, Mapping[str, Sequence[Any]]] | None = None,
                 gpu: Mapping[int, Mapping[str, Sequence[Any]]] | None = None,
                 span: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Diagnose one run.

    ``run``: its ``id``, ``status``, ``node_id``; ``by_step``: its metrics over steps;
    ``by_time``: its training loss over time (ms); ``raw``: exact points ``{name: {"step",
    "value"}}`` of the windows ``nan_window`` asked for; ``gpu``: per GPU index ``{"ts",
    "utilization"}`` over the run; ``span``: ``{"first_step", "last_step", "first_ts",
    "last_ts"}`` of the training loss.
    """
    run_id = run["id"]
    names = sorted(by_step)
    loss = train_loss(names)
    findings: list[dict[str, Any]] = []
    actions: list[str] = []
    trend = None
    if loss is not None:
        trend = _convergence(run_id, loss, by_step[loss], findings, actions)
        _overfitting(run_id, loss, by_step, findings, actions)
    for name in names:
        if is_loss(name):
            _instability(run_id, name, by_step[name], (raw or {}).get(name), findings, actions)
    if loss is not None:
        _stalls(run_id, loss, by_step[loss], by_time, findings, actions)
    rate = _throughput(run, span, gpu or {}, findings, actions)
    return ev.report(findings, _summary(run, loss, trend, rate, findings), actions)


def nan_window(curve: Curve) -> tuple[int, int] | None:
    """The steps of the first bucket holding a NaN or infinity, whose raw points locate it."""
    for k, (n, hi, lo) in enumerate(zip(curve.nan, curve.max, curve.min)):
        if n or _infinite(hi) or _infinite(lo):
            return curve.span(k)
    return None


def _infinite(v: float | None) -> bool:
    return v is not None and math.isinf(v)


def _tail(curve: Curve) -> tuple[list[int], list[float]]:
    xs, ys = curve.finite()
    keep = max(MIN_TAIL, int(len(xs) * TAIL))
    return xs[-keep:], ys[-keep:]


def _convergence(run_id: str, name: str, curve: Curve, findings: list, actions: list) -> str | None:
    xs, ys = _tail(curve)
    if len(xs) < MIN_TAIL:
        return None
    moved = relative_slope(xs, ys)
    if moved > FLAT and moved <= RISE_NOISE * _slope_noise(xs, ys):
        moved = min(moved, FLAT)  # up within its own noise: no divergence
    proof = ev.metric(run_id, name, [xs[0], xs[-1]], [ys[0], ys[-1]])
    if moved < -FLAT:
        findings.append(ev.finding("convergence", "info", f"{name} is still falling: {-moved:.0%} over steps "
                                   f"{xs[0]}-{xs[-1]} ({ys[0]:.4g} -> {ys[-1]:.4g})", proof, trend="converging",
                                   relative_slope=moved))
        return "converging"
    if moved > FLAT:
        findings.append(ev.finding("convergence", "warning", f"{name} is rising: +{moved:.0%} over steps "
                                   f"{xs[0]}-{xs[-1]} ({ys[0]:.4g} -> {ys[-1]:.4g})", proof, trend="diverging",
                                   relative_slope=moved))
        actions.append("lower the learning rate or resume from the checkpoint before the rise")
        return "diverging"
    findings.append(ev.finding("convergence", "info", f"{name} has plateaued: it moved {moved:+.1%} over steps "
                               f"{xs[0]}-{xs[-1]}", proof, trend="plateaued", relative_slope=moved))
    actions.append("the loss has flattened: consider stopping, or decaying the learning rate")
    return "plateaued"


def _slope_noise(xs: Sequence[int], ys: Sequence[float]) -> float:
    """The standard error of ``relative_slope(xs, ys)`` (robust: from the residuals' MAD)."""
    n = len(xs)
    mx = sum(xs) / n
    var = sum((x - mx) ** 2 for x in xs)
    scale = sum(abs(y) for y in ys) / n or 1.0
    if var == 0 or n < 3:
        return 0.0
    b = slope(xs, ys)
    my = sum(ys) / n
    _mid, spread = mad([y - my - b * (x - mx) for x, y in zip(xs, ys)])
    return 1.4826 * spread / math.sqrt(var) * (xs[-1] - xs[0]) / scale


def _overfitting(run_id: str, loss: str, by_step: Mapping[str, Curve], findings: list, actions: list) -> None:
    name = eval_loss(list(by_step))
    if name is None:
        return
    xs, ys = by_step[name].finite()
    if len(xs) < 3:
        return
    # Judged as OVERFITTING_SUSPECTED judges it: smoothed (a lucky evaluation is no best) and
    # past the eval loss's own noise.
    smooth = overfitting.smoothed(ys)
    best = min(range(len(smooth)), key=smooth.__getitem__)
    above = smooth[best] + max(OVERFIT_RISE * abs(smooth[best]), overfitting.NOISE * overfitting.noise(ys))
    if best > len(ys) - 1 - OVERFIT_EVALS or not all(y > above for y in smooth[-OVERFIT_EVALS:]):
        return
    train_xs, train_ys = by_step[loss].finite()
    after = [(x, y) for x, y in zip(train_xs, train_ys) if x >= xs[best]]
    if len(after) < 2 or after[-1][1] >= after[0][1]:
        return
    rise = ys[-1] / ys[best] - 1 if ys[best] else math.inf
    findings.append(ev.finding(
        "overfitting", "warning",
        f"{name} rose {rise:.0%} from its best {ys[best]:.4g} at step {xs[best]} to {ys[-1]:.4g} at step {xs[-1]} "
        f"while {loss} kept falling ({after[0][1]:.4g} -> {after[-1][1]:.4g})",
        ev.metric(run_id, name, [xs[best], xs[-1]], [ys[best], ys[-1]]),
        ev.metric(run_id, loss, [after[0][0], after[-1][0]], [after[0][1], after[-1][1]]),
        best_step=xs[best]))
    actions.append(f"use the checkpoint nearest step {xs[best]} (the best {name}); add regularisation or stop earlier")


def _instability(run_id: str, name: str, curve: Curve, raw: Mapping[str, Sequence[Any]] | None,
                 findings: list, actions: list) -> None:
    window = nan_window(curve)
    if window is not None:
        step, value = window[0], math.nan
        if raw:
            bad = [(s, v) for s, v in zip(raw["step"], raw["value"]) if not math.isfinite(v)]
            if bad:
                step, value = bad[0]
        before = [(x, v) for x, v in zip(*curve.finite()) if x < step][-3:]
        steps = [x for x, _ in before] + [step]
        findings.append(ev.finding(
            "instability", "critical", f"{name} became {ev.number(value)} at step {step}"
            + (f" (last finite {before[-1][1]:.4g} at step {before[-1][0]})" if before else ""),
            ev.metric(run_id, name, steps, [v for _, v in before] + [value]), first_bad_step=step, nan=True))
        actions.append(f"resume from a checkpoint before step {step} with a lower learning rate or gradient clipping")
    spikes = []
    highs = [v if v is not None and math.isfinite(v) else None for v in curve.max]
    for k, hi in enumerate(highs):
        if hi is None or k < SPIKE_WINDOW // 2:
            continue
        prior = [v for v in highs[max(0, k - SPIKE_WINDOW):k] if v is not None]
        if len(prior) < SPIKE_WINDOW // 2 or hi <= max(prior):  # the common case, without a median
            continue
        mid, dev = mad(prior)
        floor = max(dev, abs(mid) * 1e-3, 1e-12)
        # LOSS_SPIKE's isolated-and-extreme test (and, as there, none over a MAD of 0: values
        # rounded to a few digits): a minibatch loss's tail is no spike.
        if dev > 0 and hi > mid + SPIKE_MADS * floor and loss_spike.is_extreme(hi, mid, max(prior), loss_spike.EXTREME):
            spikes.append(((hi - mid) / floor, k, mid))
    for score, k, mid in sorted(spikes, reverse=True)[:MAX_SPIKES]:
        lo, hi_x = curve.span(k)
        findings.append(ev.finding(
            "instability", "warning", f"{name} spiked to {curve.max[k]:.4g} within steps {lo}-{hi_x} "
            f"(rolling median {mid:.4g}, {score:.0f} MADs above)",
            ev.metric(run_id, name, [lo, hi_x], [curve.max[k]]), spike=True))
    if spikes:
        actions.append("look at the batches around the spikes; clip gradients or warm the learning rate up")


def _gaps(xs: Sequence[int], width: int, least: float) -> list[tuple[int, int, float]]:
    """Jumps between consecutive non-empty buckets far wider than usual: ``(from, to, usual)``."""
    steps = [b - a for a, b in zip(xs, xs[1:])]
    if len(steps) < 4:
        return []
    usual = max(median(steps), width)
    return [(a, b, usual) for a, b, d in zip(xs, xs[1:], steps) if d > max(STALL_FACTOR * usual, least)]


def _stalls(run_id: str, name: str, curve: Curve, by_time: Curve | None, findings: list, actions: list) -> None:
    if by_time is not None:
        for a, b, usual in _gaps(by_time.xs, by_time.width, STALL_MIN_MS)[:MAX_SPIKES]:
            findings.append(ev.finding(
                "stall", "warning", f"{name} got no point for {(b - a) / 1000:.0f} s (usually one every "
                f"{usual / 1000:.2g} s)", ev.metric_time(run_id, name, a, b), gap_ms=b - a))
            actions.append("check the job's log around the gap: a data loader, a checkpoint save or a sync stalled")
    for a, b, usual in _gaps(curve.xs, curve.width, 0)[:MAX_SPIKES]:
        findings.append(ev.finding("stall", "info", f"{name} skips steps {a}-{b} (usually {usual:.0f} apart)",
                                   ev.metric(run_id, name, [a, b], []), step_gap=b - a))


def _throughput(run: Mapping[str, Any], span: Mapping[str, int] | None, gpu: Mapping[int, Mapping[str, Sequence[Any]]],
                findings: list, actions: list) -> float | None:
    if not span or span["last_ts"] <= span["first_ts"] or span["last_step"] <= span["first_step"]:
        return None
    rate = (span["last_step"] - span["first_step"]) * 1000 / (span["last_ts"] - span["first_ts"])
    utils = {i: [v for v in s["utilization"] if v is not None and math.isfinite(v)] for i, s in gpu.items()}
    utils = {i: vs for i, vs in utils.items() if vs}
    if not utils:
        findings.append(ev.finding("throughput", "info", f"{rate:.3g} steps/s; no GPU samples over the run",
                                   steps_per_s=rate))
        return rate
    mean = sum(sum(vs) / len(vs) for vs in utils.values()) / len(utils)
    proofs = [ev.gpu(run.get("node_id") or "", i, f"gpu{i}.utilization", gpu[i]["ts"], [sum(vs) / len(vs)])
              for i, vs in sorted(utils.items())]
    if mean < LOW_UTIL:
        findings.append(ev.finding("throughput", "warning", f"{rate:.3g} steps/s with the GPUs {mean:.0f}% busy on "
                                   "average: the input pipeline or the host sets the pace", *proofs,
                                   steps_per_s=rate, gpu_util=mean))
        actions.append("raise DataLoader num_workers, pin memory or prefetch; or a bigger batch")
    else:
        findings.append(ev.finding("throughput", "info", f"{rate:.3g} steps/s with the GPUs {mean:.0f}% busy on "
                                   "average", *proofs, steps_per_s=rate, gpu_util=mean))
    return rate


def _summary(run: Mapping[str, Any], loss: str | None, trend: str | None, rate: float | None,
             findings: list[dict[str, Any]]) -> str:
    parts = [f"run {run['id']} ({run.get('status', '?')})"]
    if loss is None:
        parts.append("logs no loss")
    elif trend:
        parts.append(f"{loss} {trend}")
    if rate is not None:
        parts.append(f"{rate:.3g} steps/s")
    bad = [f for f in findings if f["severity"] != "info"]
    parts.append(f"{len(bad)} problem(s): " + "; ".join(f["claim"] for f in bad[:2]) if bad else "no problem found")
    return ", ".join(parts)
