"""Runs a corpus sweep through the real early-stopping rules and scores what they stopped.

A sweep is played out in time as the daemon would run it: ``max_parallel`` trials at once,
in the sweep's order, each logging its points at its own pace; a stopped or finished trial
frees its place for the next. Every ``TICK_S`` seconds the rule judges what has been logged
so far (``gpuplaned.domain.early_stopping.judge``, as the pass calls it), the way the pass
reads the ingested points; a trial it names stops there.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable

import attrs

from gpuplaned.domain.early_stopping import EarlyStop, Stop, Trial, judge

from sweep_corpus.corpus import KEEP, STOP, Planted, Sweep

TICK_S = 5.0


@attrs.frozen
class Played:
    stops: dict[str, Stop]  # trial name -> the decision that stopped it
    ran: int  # steps run, all trials
    full: int  # steps had nothing been stopped


def play(sweep: Sweep, spec: EarlyStop) -> Played:
    waiting = list(sweep.trials)
    started: dict[str, float] = {}
    ended: dict[str, float] = {}  # name -> the time it stopped or finished
    stops: dict[str, Stop] = {}
    now = 0.0

    def logged(trial: Planted, at: float) -> int:
        """How many of its points are in by ``at``."""
        if trial.name not in started:
            return 0
        until = min(at, ended.get(trial.name, at))
        return bisect_right(trial.steps, (until - started[trial.name]) * trial.pace)

    def finish_time(trial: Planted) -> float:
        return started[trial.name] + trial.steps[-1] / trial.pace

    while waiting or len(ended) < len(started):
        for trial in list(sweep.trials):  # those finished by now free their places
            if trial.name in started and trial.name not in ended and finish_time(trial) <= now:
                ended[trial.name] = finish_time(trial)
        while waiting and len(started) - len(ended) < sweep.max_parallel:
            started[waiting.pop(0).name] = now
        views = []
        for trial in sweep.trials:
            k = logged(trial, now)
            if k:
                running = trial.name in started and trial.name not in ended
                views.append(Trial(trial.name, trial.steps[:k], trial.values[:k],
                                   [int(1000 * (started[trial.name] + s / trial.pace)) for s in trial.steps[:k]],
                                   now - started[trial.name] if running else None))
        for stop in judge(spec, sweep.goal, views):
            stops[stop.key] = stop
            ended[stop.key] = now
        now += TICK_S
    ran = sum(min(t.steps[-1], int((ended[t.name] - started[t.name]) * t.pace)) for t in sweep.trials)
    return Played(stops, ran, sum(t.steps[-1] for t in sweep.trials))


@attrs.frozen
class Score:
    trials: Counter  # kind -> planted
    stopped: Counter  # kind -> stopped
    false_stops: list[tuple[str, str, Stop]]  # (sweep, trial, decision): a must-keep trial stopped
    missed: list[tuple[str, str]]  # (sweep, trial): a must-stop trial that ran to its end
    stop_steps: list[float]  # for each must-stop trial stopped: its step as a share of its run
    ran: int
    full: int

    def rate(self, kinds: Iterable[str]) -> tuple[int, int]:
        kinds = tuple(kinds)
        return sum(self.stopped[k] for k in kinds), sum(self.trials[k] for k in kinds)


def score(sweeps: Iterable[Sweep], spec: EarlyStop) -> Score:
    trials, stopped = Counter(), Counter()
    false_stops, missed, shares = [], [], []
    ran = full = 0
    for sweep in sweeps:
        played = play(sweep, spec)
        ran, full = ran + played.ran, full + played.full
        for trial in sweep.trials:
            trials[trial.kind] += 1
            stop = played.stops.get(trial.name)
            if stop is not None:
                stopped[trial.kind] += 1
                if trial.kind in KEEP:
                    false_stops.append((sweep.name, trial.name, stop))
                if trial.kind in STOP:
                    shares.append(stop.step / trial.steps[-1])
            elif trial.kind in STOP:
                missed.append((sweep.name, trial.name))
    return Score(trials, stopped, false_stops, missed, shares, ran, full)
