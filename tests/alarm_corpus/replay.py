"""Replays corpus curves through the detector's real rules and scores them.

The metric rules run as the ingest runs them (``gpuplaned.service.api.sessions.summarize``):
the points in batches (``BATCH`` steps of every metric at a time), each folded into the
run's summary by ``run_summary.update`` with the ``[detector]`` policies, the summary
stored as JSON between batches, the events passed through ``detector.summary_events``.
RUN_STALLED runs as the detector actor runs it: ``stall.update`` every ``interval_s`` of
the curve's clock, the fingerprint being the points delivered so far.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable

import attrs

from gpuplaned.config import DetectorConfig
from gpuplaned.domain import run_summary
from gpuplaned.domain.rules import stall
from gpuplaned.service.passes import detector

from alarm_corpus.corpus import Curve

BATCH = 50
RULES = ("LOSS_SPIKE", "LOSS_NAN", "OVERFITTING_SUSPECTED", "RUN_STALLED")


@attrs.frozen
class Alarm:
    rule: str
    step: int | None
    message: str


def metric_alarms(curve: Curve, config: DetectorConfig = DetectorConfig()) -> list[Alarm]:
    last = max(steps[-1] for steps, _v in curve.metrics.values())
    directions = {name: run_summary.direction_for(name) for name in curve.metrics}
    cursor = dict.fromkeys(curve.metrics, 0)
    summary, alarms = None, []
    for top in range(BATCH, last + BATCH, BATCH):
        points, metrics = {}, {}
        for name, (steps, values) in curve.metrics.items():
            lo = hi = cursor[name]
            while hi < len(steps) and steps[hi] <= top:
                hi += 1
            cursor[name] = hi
            if hi > lo:
                s, v = steps[lo:hi], values[lo:hi]
                ts = [step * 100 for step in s]
                points[name] = (s, ts, v)
                metrics[name] = {"step": s, "ts": ts, "value": v}
        if not points:
            continue
        summary, raised = run_summary.update(summary, points, directions, detector.overfit_policy(config),
                                             detector.spike_policy(config))
        summary = json.loads(json.dumps(summary))  # as the runs table keeps it
        for event in detector.summary_events(raised, metrics, "run_corpus", config):
            alarms.append(Alarm(event.type, event.step, event.message))
    return alarms


def stall_alarms(curve: Curve, config: DetectorConfig = DetectorConfig()) -> list[Alarm]:
    """RUN_STALLED ticking every ``interval_s`` from the first point to the last."""
    times = curve.times()
    steps = curve.metrics["loss"][0]
    policy = detector.stall_policy(config)
    tick = int(config.interval_s * 1000)
    state, alarms, delivered = None, [], 0
    for now in range(times[0], times[-1] + tick, tick):
        while delivered < len(times) and times[delivered] <= now:
            delivered += 1
        state, silent = stall.update(state, now, [["points", delivered]], policy)
        if silent is not None:
            alarms.append(Alarm(stall.RUN_STALLED, steps[delivered - 1],
                                f"silent {silent / 60000:.1f} min after step {steps[delivered - 1]}"))
    return alarms


def alarms(curve: Curve, config: DetectorConfig = DetectorConfig()) -> list[Alarm]:
    return metric_alarms(curve, config) + stall_alarms(curve, config)


@attrs.define
class Score:
    """Per rule: false alarms on healthy runs, planted faults found, and alarms on a troubled
    run outside its faults' steps (strays)."""

    healthy_runs: int = 0
    false_alarms: Counter = attrs.Factory(Counter)
    planted: Counter = attrs.Factory(Counter)
    found: Counter = attrs.Factory(Counter)
    strays: Counter = attrs.Factory(Counter)
    missed: list[tuple[str, str]] = attrs.Factory(list)  # (rule, curve)
    noisy: list[tuple[str, str, int | None]] = attrs.Factory(list)  # (rule, curve, step): false alarms
    astray: list[tuple[str, str, int | None]] = attrs.Factory(list)  # (rule, curve, step): strays


def score(curves: Iterable[Curve], config: DetectorConfig = DetectorConfig()) -> Score:
    out = Score()
    for curve in curves:
        raised = alarms(curve, config)
        if curve.healthy:
            out.healthy_runs += 1
            for alarm in raised:
                out.false_alarms[alarm.rule] += 1
                out.noisy.append((alarm.rule, curve.name, alarm.step))
            continue
        explained = set()
        for fault in curve.faults:
            out.planted[fault.rule] += 1
            hits = [a for a in raised
                    if a.rule == fault.rule and a.step is not None and fault.first <= a.step <= fault.last]
            if hits:
                out.found[fault.rule] += 1
                explained.update(map(id, hits))
            else:
                out.missed.append((fault.rule, curve.name))
        # LOSS_SPIKE on a run going to NaN, NaN on a diverging one: the same fault, no stray.
        spans = [(f.first, f.last) for f in curve.faults]
        for alarm in raised:
            if id(alarm) not in explained and not any(lo <= (alarm.step or -1) <= hi for lo, hi in spans):
                out.strays[alarm.rule] += 1
                out.astray.append((alarm.rule, curve.name, alarm.step))
    return out


def table(result: Score) -> str:
    lines = [f"{'rule':24} {'false alarms':>12} {'per healthy run':>16} {'planted':>8} {'found':>6} {'strays':>7}"]
    for rule in RULES:
        fa = result.false_alarms[rule]
        lines.append(f"{rule:24} {fa:>12} {fa / max(1, result.healthy_runs):>16.2f} {result.planted[rule]:>8} "
                     f"{result.found[rule]:>6} {result.strays[rule]:>7}")
    total = sum(result.false_alarms.values())
    lines.append(f"{'all rules':24} {total:>12} {total / max(1, result.healthy_runs):>16.2f} "
                 f"{sum(result.planted.values()):>8} {sum(result.found.values()):>6} {sum(result.strays.values()):>7}")
    return "\n".join(lines)
