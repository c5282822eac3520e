"""The early-stopping pass (issue 31 item 4): stop the running trials of a sweep that fall behind
the others on its primary metric.

Run every ``EVERY_S`` by the policies actor (``actors/policies.py``). For each sweep with
``early_stop``, a metric and a trial running (``sweep_policy_rows.judged_sweeps``), it reads the
points of that metric already ingested for each trial's run (``tsdb.query.read_points``, by
step), and ``gpuplaned.domain.early_stopping.judge`` says which running trials to stop. Each is
cancelled as ``job cancel`` does (SIGTERM, its ``stop_grace_s``, then SIGKILL) with failure
reason ``EARLY_STOPPED``, which its end keeps (``job_rows.apply_status``), and gets an
``EARLY_STOPPED`` event naming the rule, its value, the threshold and the step, in the cancel's
own transaction. A trial already asked to stop, or no longer running the attempt that was
judged, is left as it is.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import attrs
import trio

from gpuplaned.domain.early_stopping import EARLY_STOPPED, EarlyStop, Stop, Trial, compact, judge
from gpuplaned.domain.diagnosis.evidence import number
from gpuplaned.domain.rules import evidence
from gpuplaned.protocol.agent import Cancel
from gpuplaned.protocol.event_replies import EventRow
from gpuplaned.protocol.ids import new_id
from gpuplaned.protocol.job_states import FailureReason, JobState
from gpuplaned.service.link.registry import NodeUnavailable, now_ms
from gpuplaned.store import job_rows, sweep_policy_rows
from gpuplaned.store.connection import Connection
from gpuplaned.store.event_rows import insert_events
from gpuplaned.store.sweep_policy_rows import JudgedSweep, TrialRun
from gpuplaned.store.writer import write
from gpuplaned.tsdb.query import latest, read_points

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.early_stop")

EVERY_S = 2.0  # as the policies' tick: a trial behind is stopped within a few seconds of its points


class Seen:
    """The trials' curves made by earlier passes, by (run, metric, goal), with the run's latest
    point when read: a pass reads a run's points again only once a newer one came. Only the
    curves are kept (``early_stopping.compact``: 24 bytes a point), and only the last pass's runs."""

    def __init__(self) -> None:
        self.trials: dict[tuple[str, str, str], tuple[Any, Trial]] = {}
        self.reads = 0  # runs whose points were read (what the cache saves)

    def trial(self, conn: Connection, run: TrialRun, metric: str, goal: str, running_s: float | None) -> Trial | None:
        assert run.run_id is not None
        key = (run.run_id, metric, goal)
        last = latest(conn, "run", run.run_id, [metric]).get(metric)
        if last is None:
            return None
        mark = (last["ts"], last["step"], repr(last["value"]))  # repr: a NaN equals itself
        kept = self.trials.get(key)
        if kept is not None and kept[0] == mark and kept[1].key == run.job_id:
            trial = kept[1]
        else:
            points = read_points(conn, "run", run.run_id, metric, x="step", arrays=True)
            trial = compact(Trial(run.job_id, points["step"], points["value"], points["ts"]), goal)
            self.reads += 1
        self.trials[key] = (mark, trial)
        return attrs.evolve(trial, running_s=running_s)

    def keep_only(self, keys: set[tuple[str, str, str]]) -> None:
        for key in self.trials.keys() - keys:
            del self.trials[key]


@attrs.frozen
class Verdict:
    sweep: JudgedSweep
    trial: TrialRun
    stop: Stop


def judged(conn: Connection, now: int, seen: Seen | None = None) -> list[Verdict]:
    """What the rules stop now, sweep by sweep (one read snapshot); ``seen``: what earlier
    passes read."""
    seen = Seen() if seen is None else seen
    out = []
    used: set[tuple[str, str, str]] = set()
    for sweep in sweep_policy_rows.judged_sweeps(conn):
        try:
            spec = EarlyStop.of(sweep.early_stop)
        except ValueError as error:  # stored by an older daemon, or by hand: the sweep is not judged
            log.warning("sweep %s is not judged: %s", sweep.id, error)
            continue
        runs = {}
        trials = []
        for run in sweep_policy_rows.trial_runs(conn, sweep.id):
            assert run.run_id is not None
            running = run.status == JobState.RUNNING and not run.cancel_requested and run.started_at is not None
            trial = seen.trial(conn, run, sweep.metric, sweep.goal,
                               max(0.0, (now - run.started_at) / 1000) if running and run.started_at else None)
            used.add((run.run_id, sweep.metric, sweep.goal))
            if trial is not None:
                trials.append(trial)
                runs[run.job_id] = run
        out.extend(Verdict(sweep, runs[stop.key], stop) for stop in judge(spec, sweep.goal, trials))
    seen.keep_only(used)
    return out


async def run_pass(shared: ServerContext, store: Any, seen: Seen | None = None) -> int:
    """Judge every sweep with early stopping and stop what falls behind; the trials stopped.
    ``seen``: what earlier passes read (kept by the caller between passes)."""
    if shared.readers is None:
        return 0
    verdicts = await shared.readers.run(lambda conn: judged(conn, now_ms(), seen))
    stopped = 0
    for verdict in verdicts:
        if await _stop(shared, store, verdict):
            stopped += 1
    return stopped


async def _stop(shared: ServerContext, store: Any, verdict: Verdict) -> bool:
    trial = verdict.trial

    def apply(conn: Connection) -> tuple[EventRow, str | None, int] | None:
        job = job_rows.get_job(conn, trial.job_id)
        if job is None or job.status != JobState.RUNNING or job.cancel_requested or job.attempt != trial.attempt:
            return None  # it moved on since it was judged
        now = now_ms()
        outcome = job_rows.cancel_job(conn, job.id, now, reason=FailureReason.EARLY_STOPPED.value)
        row = event(verdict, now)
        insert_events(conn, [row])
        return row, outcome.node_id, outcome.job.attempt

    done = await write(store, apply, small=True)
    if done is None:
        return False
    row, node_id, attempt = done
    shared.event_feed.publish(row)
    log.info("%s", row.message)
    if node_id is not None:
        try:
            with trio.CancelScope(shield=True):  # on record now: the node must hear of it
                await shared.nodes.send(node_id, Cancel(trial.job_id, attempt))
        except NodeUnavailable:
            pass  # cancel_requested is on record; the node acts on it with its next hello
    return True


def event(verdict: Verdict, now: int) -> EventRow:
    sweep, trial, stop = verdict.sweep, verdict.trial, verdict.stop
    message = (f"sweep {sweep.name} trial {trial.trial} ({trial.job_id}) stopped early by the {stop.rule} rule: "
               f"{sweep.metric}: {stop.reason}")
    context = {"sweep_id": sweep.id, "sweep": sweep.name, "trial": trial.trial, "rule": stop.rule,
               "metric": sweep.metric, "goal": sweep.goal, "value": number(stop.value),
               "threshold": number(stop.threshold),
               "step": stop.step, "compared": stop.compared, "reason": stop.reason,
               "evidence": [evidence.metric(sweep.metric, [stop.step], [stop.value], trial.run_id)]}
    return EventRow(new_id("ev"), now, EARLY_STOPPED, "info", trial.node_id, trial.job_id, trial.run_id, stop.step,
                    message, context)


async def keep_judging(shared: ServerContext, store: Any) -> None:
    """The policies actor's task: a pass every ``EVERY_S``."""
    seen = Seen()
    while True:
        await trio.sleep(EVERY_S)
        try:
            await run_pass(shared, store, seen)
        except Exception:  # noqa: BLE001 - the failure policies share this actor: a fault here must not stop them
            log.exception("the early-stopping pass failed; the next one tries again")
