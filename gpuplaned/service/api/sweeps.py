"""Sweeps for the API (issue 31 item 3): make one, list, show, cancel, pause, resume, and retry
its failed trials.

A sweep is a record the daemon keeps, so the shell that submitted it may die. Each trial is an
ordinary job made from the sweep's job (``gpuplaned.domain.sweeps``: ``{name}`` in argv, the
``GPUPLANE_SWEEP_*`` env, the name ``<sweep>-<trial>``), admitted as a batch submit admits each
of its entries (``gpuplaned.service.api.batches.admit``: the token's limits and budget for the
trials together, its group, the queue's admission), all in ONE store transaction: a sweep is
made whole or not at all, even by a kill -9 halfway through.

Trials are unique per sweep by their values (the store's unique index). A submit with the name
of a sweep that is not cancelled, and the same job, adds only the trials whose values are new
(``created``, ``existing`` in the reply); another job under that name is refused (409). An
``Idempotency-Key`` works as on every POST.

A token with limits sees and acts on its own sweeps only (403 for another's, nothing changed).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs
import trio

from gpuplaned.domain import gpu_budget
from gpuplaned.domain import sweeps as plan
from gpuplaned.protocol.agent import Cancel, SweepThrottle
from gpuplaned.protocol.batch_wire import BatchRefusal
from gpuplaned.protocol.converter import structure, unstructure
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.fields import UNSET
from gpuplaned.protocol.ids import new_id
from gpuplaned.protocol.job_states import ON_NODE, JobState
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.protocol.sweep_wire import (
    EarlyStop,
    PlannedTrial,
    RetryOn,
    Sweep,
    SweepBest,
    SweepCounts,
    SweepDetail,
    SweepSubmit,
    SweepSubmitted,
    SweepTrial,
)
from gpuplaned.service import access
from gpuplaned.service.api import batches, budgets
from gpuplaned.service.link.registry import NodeUnavailable, now_ms
from gpuplaned.service.passes.dispatch import change_queue, wake_scheduler
from gpuplaned.store import job_rows, project_rows, session_rows, sweep_rows
from gpuplaned.store.sweep_rows import SweepRow, TrialRow
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.api.ui_sessions import Caller
    from gpuplaned.service.context import ServerContext
    from gpuplaned.store.connection import Connection

PAUSED_BY_USER = "paused by user"


def _store(shared: ServerContext) -> Any:
    return access.store_port(shared, "jobs")


def _readers(shared: ServerContext) -> Any:
    return access.readers(shared, "jobs")


# --- submit ----------------------------------------------------------------------------


@attrs.frozen
class _Plan:
    """What a submit's body says, checked before the transaction."""

    name: str
    kind: plan.Kind
    parameters: dict[str, Any]
    template: str  # the job's canonical JSON (secret values left out)
    values: list[dict[str, plan.Value]]
    spec: JobSpec  # the job every trial is made from, before its values


class _DryRun(Exception):  # noqa: N818 - carries a dry run's reply out of the write it rolls back
    def __init__(self, reply: SweepSubmitted) -> None:
        super().__init__("dry run")
        self.reply = reply


async def submit(shared: ServerContext, body: SweepSubmit, *, caller: Caller | None = None) -> SweepSubmitted:
    """Make the sweep (or add its new trials to the one of its name) in one transaction.

    Raises:
        ApiError: ``bad_request`` naming the field at fault (``grid.lr``, ``job.cwd``) or every
            refused trial (``details.refused``, as a batch's); ``forbidden`` for a token's limit
            (its budget counted for the trials together); ``conflict`` for a sweep of this name
            with another job. Nothing is written then.
    """
    made = _plan(shared, body, caller)

    def insert(conn: Connection) -> tuple[SweepSubmitted, list[str]]:
        before = sweep_rows.open_named(conn, made.name)
        reply = _insert(shared, conn, made, body, caller)
        # A new max-parallel for a sweep that exists: its nodes' arrays follow it, as on PATCH.
        limited = before is not None and before.max_parallel != body.max_parallel
        return reply, sweep_rows.trial_nodes(conn, before.id) if limited and before is not None else []

    try:
        reply, throttled = await write(access.store_port(shared, "jobs"), insert)
    except _DryRun as dry:
        return dry.reply
    if reply.created or throttled:
        wake_scheduler(shared)  # once for the lot: one pass places as many as fit
    if throttled and reply.sweep is not None:
        await _throttle(shared, reply.sweep.id, body.max_parallel, throttled)
    return reply


def _plan(shared: ServerContext, body: SweepSubmit, caller: Caller | None) -> _Plan:
    if body.grid is not None:
        kind, parameters = plan.Kind.GRID, {"grid": body.grid}
    elif body.random is not None:
        kind, parameters = plan.Kind.RANDOM, {"random": body.random, "trials": body.trials, "seed": body.seed}
    else:
        kind, parameters = plan.Kind.LIST, {"trials_list": body.trials_list}
    values = plan.expand(kind, parameters)
    template = _template(body)
    name = body.name or plan.default_name(body.job.command, _identity(template))
    return _Plan(name, kind, parameters, template, values, batches.spec_of(shared, body.job, caller))


def _template(body: SweepSubmit) -> str:
    """The job as stored with its sweep and compared on a repeat: aliases resolved, unset fields
    left out, the secret env by its names only."""
    job = {k: v for k, v in unstructure(body.job).items() if v is not UNSET}
    job["cwd"] = job.pop("dir", None) or job.get("cwd")
    if "gpus" in job:
        job["gpu"] = job.pop("gpus")
    if "retry" in job:
        job["max_attempts"] = job.pop("retry") + 1
    job["secret_env"] = sorted(job.get("secret_env") or {})
    return json.dumps(job, sort_keys=True, separators=(",", ":"))


def _identity(template: str) -> str:
    """What makes two submits the same sweep: the job, its env by names only. A shell's env
    differs from the last one's (PATH, a prompt's variables), and the same sweep submitted again
    from a new shell, after the first died, must find its trials, not make them twice."""
    job = json.loads(template)
    job["env"] = sorted(job.get("env") or {})
    return json.dumps(job, sort_keys=True, separators=(",", ":"))


def _insert(shared: ServerContext, conn: Connection, made: _Plan, body: SweepSubmit,
            caller: Caller | None) -> SweepSubmitted:
    now = now_ms()
    sweep = sweep_rows.open_named(conn, made.name)
    if sweep is not None:
        _check_same(sweep, made, caller)
        keys, first = sweep_rows.trial_keys(conn, sweep.id)
    else:
        keys, first = {}, 0
    given = [(v, plan.values_key(v)) for v in made.values]
    new = [(v, k) for v, k in given if k not in keys]
    existing = len(made.values) - len(new)
    worst = _worst_case(made.spec, len(new), caller)
    if body.dry_run:
        numbers = iter(range(first, first + len(new)))
        planned = [PlannedTrial(trial=keys[k] if k in keys else next(numbers), values=v,
                                command=plan.trial_argv(made.spec.command, v), exists=k in keys) for v, k in given]
        view = _view(conn, sweep) if sweep is not None else None
        _admit_trials(shared, conn, None, made, body, new, first, caller)  # for its refusals: rolled back
        raise _DryRun(SweepSubmitted(sweep=view, created=len(new), existing=existing, worst_case_gpu_hours=worst,
                                     dry_run=True, planned=planned))
    if sweep is None:
        sweep = _new_sweep(conn, made, body, caller, now)
    else:
        sweep_rows.update_settings(conn, sweep.id, max_parallel=body.max_parallel, metric=body.metric,
                                   goal=body.goal, early_stop=_dumped(body.early_stop),
                                   retry_on=_dumped(body.retry_on))
    _admit_trials(shared, conn, sweep.id, made, body, new, first, caller)
    return SweepSubmitted(sweep=_view(conn, sweep_rows.require(conn, sweep.id)), created=len(new), existing=existing,
                          worst_case_gpu_hours=worst, dry_run=False)


def _check_same(sweep: SweepRow, made: _Plan, caller: Caller | None) -> None:
    _check_owner(sweep, caller, "add trials to")
    if _identity(sweep.template) != _identity(made.template):
        raise ApiError(ErrorCode.CONFLICT, f"name: sweep {made.name!r} ({sweep.id}) exists with another job; give "
                       "this sweep another name, or cancel that one first", {"field": "name", "sweep_id": sweep.id})
    if sweep.kind != made.kind:
        raise ApiError(ErrorCode.CONFLICT, f"name: sweep {made.name!r} ({sweep.id}) is a {sweep.kind} sweep, not "
                       f"{made.kind}", {"field": "name", "sweep_id": sweep.id})


def _new_sweep(conn: Connection, made: _Plan, body: SweepSubmit, caller: Caller | None, now: int) -> SweepRow:
    _, experiment_id = session_rows.placement(conn, None, body.experiment or made.name, now)
    experiment = project_rows.find_experiment(conn, experiment_id) if experiment_id else None
    if body.metric is not None and experiment is not None and experiment.primary_metric is None:
        # The sweep's metric is its experiment's primary one: its runs' summaries and charts judge it.
        project_rows.set_primary(conn, body.metric, now, experiment=experiment)
    row = SweepRow(id=new_id("swp"), name=made.name, kind=made.kind.value, template=made.template,
                   parameters=made.parameters, metric=body.metric, goal=body.goal, max_parallel=body.max_parallel,
                   paused=False, pause_reason=None, early_stop=_dumped(body.early_stop),
                   retry_on=_dumped(body.retry_on), experiment_id=experiment_id, experiment=None,
                   token_id=caller.token_id if caller is not None else None, created_at=now, cancelled_at=None)
    sweep_rows.insert_sweep(conn, row)
    return row


def _admit_trials(shared: ServerContext, conn: Connection, sweep_id: str | None, made: _Plan, body: SweepSubmit,
                  new: list[tuple[dict[str, plan.Value], str]], first: int, caller: Caller | None) -> None:
    """Insert the new trials as a batch's entries (each entry's index its trial number); any
    refused: raise naming each (the transaction is rolled back). ``sweep_id`` None: a dry run's,
    whose jobs are not marked as trials."""
    base = made.spec
    entries = []
    keys: dict[int, str] = {}
    for index, (values, key) in enumerate(new):
        trial = first + index
        spec = attrs.evolve(base, name=plan.trial_name(made.name, trial),
                            command=tuple(plan.trial_argv(base.command, values)),
                            env={**base.env, **plan.trial_env(values, sweep_id or "swp_planned", trial)})
        entries.append(batches.Entry(trial, body.job, spec))
        keys[trial] = key

    marks: list[tuple[str, int, str]] = []

    def placed(conn: Connection, job_id: str, entry: batches.Entry) -> None:
        marks.append((job_id, entry.index, keys[entry.index]))

    refused: list[BatchRefusal] = []
    _, remaining = batches.admit(shared, conn, entries, caller, refused, placed if sweep_id is not None else None)
    if refused:
        raise _refusal(refused, len(entries), remaining, base, caller)
    if sweep_id is not None:
        sweep_rows.mark_trials(conn, sweep_id, marks)  # one statement for the lot


def _refusal(refused: list[BatchRefusal], trials: int, remaining: float | None, spec: JobSpec,
             caller: Caller | None) -> ApiError:
    """The batch's refusal; past the budget, it also names the sweep's worst case and what remains
    (``details.worst_case_gpu_hours``): the figure the caller must bring down."""
    error = batches.refusal(refused, trials, remaining, what="trials")
    worst = _worst_case(spec, trials, caller)
    if worst is None or remaining is None or "remaining_gpu_hours" not in error.details:
        return error
    each = f" x {worst / (trials * spec.gpu):g} h" if trials and spec.gpu else ""
    return ApiError(error.code, f"{error.message}. The sweep's worst case is {worst:g} GPU-hours ({trials} trial(s) "
                                f"x {spec.gpu} GPU(s){each}), with {remaining:g} left of the token's budget",
                    {**error.details, "worst_case_gpu_hours": worst})


def _worst_case(spec: JobSpec, trials: int, caller: Caller | None) -> float | None:
    hours = (gpu_budget.job_hours(spec.timeout_s, caller.limits) if budgets.limited(caller) and caller is not None
             and caller.limits is not None else (spec.timeout_s / 3600 if spec.timeout_s is not None else None))
    return None if hours is None else round(trials * spec.gpu * hours, 6)


def _dumped(value: EarlyStop | RetryOn | None) -> dict[str, Any] | None:
    return unstructure(value) if value is not None else None


# --- views ------------------------------------------------------------------------------


def _counts(found: dict[str, int]) -> SweepCounts:
    return SweepCounts(total=sum(found.values()), queued=found.get(JobState.QUEUED.value, 0),
                       running=sum(found.get(s.value, 0) for s in ON_NODE),
                       succeeded=found.get(JobState.SUCCEEDED.value, 0), failed=found.get(JobState.FAILED.value, 0),
                       cancelled=found.get(JobState.CANCELLED.value, 0))


def _fields(row: SweepRow, counts: dict[str, int], best: SweepBest | None) -> dict[str, Any]:
    return {
        "id": row.id, "name": row.name, "kind": row.kind,
        "status": plan.status_of(counts, paused=row.paused, cancelled=row.cancelled_at is not None),
        "counts": _counts(counts), "parameters": row.parameters, "command": json.loads(row.template)["command"],
        "max_parallel": row.max_parallel, "paused": row.paused, "pause_reason": row.pause_reason,
        "metric": row.metric, "goal": row.goal,
        "early_stop": structure(row.early_stop, EarlyStop) if row.early_stop else None,
        "retry_on": structure(row.retry_on, RetryOn) if row.retry_on else None,
        "experiment": row.experiment, "experiment_id": row.experiment_id, "created_at": row.created_at,
        "cancelled_at": row.cancelled_at, "best": best,
    }


def _trial_bests(conn: Connection, row: SweepRow, trials: list[TrialRow]) -> dict[int, tuple[float, int]]:
    """Each trial's best ``(value, step)`` of the sweep's metric (by trial number)."""
    if row.metric is None:
        return {}
    by_run = sweep_rows.bests(conn, [t.run_id for t in trials if t.run_id], row.metric, row.goal)
    return {t.trial: by_run[t.run_id] for t in trials if t.run_id in by_run}


def _best(row: SweepRow, trials: list[TrialRow], bests: dict[int, tuple[float, int]]) -> SweepBest | None:
    top = plan.best_trial([(trial, value) for trial, (value, _) in bests.items()], row.goal)
    if top is None:
        return None
    trial = next(t for t in trials if t.trial == top[0])
    return SweepBest(trial=trial.trial, job_id=trial.job_id, values=trial.values, value=top[1],
                     step=bests[trial.trial][1])


def _view(conn: Connection, row: SweepRow) -> Sweep:
    trials = sweep_rows.trials(conn, row.id) if row.metric is not None else []
    best = _best(row, trials, _trial_bests(conn, row, trials))
    return Sweep(**_fields(row, sweep_rows.counts(conn, [row.id])[row.id], best))


def _detail(conn: Connection, row: SweepRow) -> SweepDetail:
    trials = sweep_rows.trials(conn, row.id)
    bests = _trial_bests(conn, row, trials)
    shown = [SweepTrial(trial=t.trial, job_id=t.job_id, status=t.status, values=t.values, attempt=t.attempt,
                        run_id=t.run_id, best=bests[t.trial][0] if t.trial in bests else None,
                        step_of_best=bests[t.trial][1] if t.trial in bests else None,
                        failure_reason=t.failure_reason, queue_reason=t.queue_reason) for t in trials]
    return SweepDetail(**_fields(row, sweep_rows.counts(conn, [row.id])[row.id], _best(row, trials, bests)),
                       trials=shown)


# --- reads ------------------------------------------------------------------------------


def _check_owner(row: SweepRow, caller: Caller | None, action: str) -> None:
    """A limited token sees and acts on its own sweeps only.

    Raises:
        ApiError: ``forbidden`` naming the sweep.
    """
    if budgets.limited(caller) and caller is not None and row.token_id != caller.token_id:
        raise ApiError(ErrorCode.FORBIDDEN, f"token {budgets.token_name(caller)!r} may {action} only the sweeps it "
                                            f"submitted; {row.id} is not one of them",
                       {"limit": "owner", "sweep_id": row.id})


async def list_sweeps(shared: ServerContext, *, caller: Caller | None = None,
                      status: str | None = None) -> list[Sweep]:
    """Newest first (a limited token's own only); ``status``: only the sweeps in it (a Sweep status)."""
    token_id = caller.token_id if budgets.limited(caller) and caller is not None else None

    def read(conn: Connection) -> list[Sweep]:
        return [_view(conn, row) for row in sweep_rows.list_sweeps(conn, token_id=token_id)]

    found = await _readers(shared).run(read)
    return [s for s in found if status is None or s.status == status.upper()]


async def get_sweep(shared: ServerContext, sweep_id: str, *, caller: Caller | None = None) -> SweepDetail:
    """The sweep with every trial (404 naming an unknown id; 403 for another's, to a limited token)."""
    def read(conn: Connection) -> SweepDetail:
        row = sweep_rows.require(conn, sweep_id)
        _check_owner(row, caller, "see")
        return _detail(conn, row)

    return await _readers(shared).run(read)


# --- changes ----------------------------------------------------------------------------


async def cancel(shared: ServerContext, sweep_id: str, *, caller: Caller | None = None) -> Sweep:
    """Cancel the sweep: its queued trials at once, its running ones with SIGTERM and their grace
    (as ``job cancel``). Cancelling a cancelled sweep changes nothing."""
    def apply(conn: Connection) -> tuple[Sweep, list[tuple[str, str, int]]]:
        row = sweep_rows.require(conn, sweep_id)
        _check_owner(row, caller, "cancel")
        now = now_ms()
        sweep_rows.set_cancelled(conn, sweep_id, now)
        stops = []
        for job_id in sweep_rows.trial_jobs(conn, sweep_id, [JobState.QUEUED.value, *(s.value for s in ON_NODE)]):
            outcome = job_rows.cancel_job(conn, job_id, now)
            if outcome.node_id is not None:
                stops.append((outcome.node_id, job_id, outcome.job.attempt))
        return _view(conn, sweep_rows.require(conn, sweep_id)), stops

    view, stops = await write(_store(shared), apply)
    for node_id, job_id, attempt in stops:  # after the commit: cancel_requested is on record
        try:
            with trio.CancelScope(shield=True):
                await shared.nodes.send(node_id, Cancel(job_id, attempt))
        except NodeUnavailable:
            pass  # the node acts on it when it says hello again
    wake_scheduler(shared)
    return view


async def set_max_parallel(shared: ServerContext, sweep_id: str, max_parallel: int | None, *,
                           caller: Caller | None = None) -> Sweep:
    """Change the sweep's max-parallel (None: no limit): its queued trials follow it from the next
    pass; each node holding its trials gets ``SweepThrottle`` (a Slurm node throttles the sweep's
    arrays with it; a node not connected now keeps the limit it had)."""
    def apply(conn: Connection) -> tuple[Sweep, list[str]]:
        row = sweep_rows.require(conn, sweep_id)
        _check_owner(row, caller, "change")
        _check_open(row, "change")
        sweep_rows.set_max_parallel(conn, sweep_id, max_parallel)
        return _view(conn, sweep_rows.require(conn, sweep_id)), sweep_rows.trial_nodes(conn, sweep_id)

    view, nodes = await change_queue(shared, apply, small=True)
    await _throttle(shared, sweep_id, max_parallel, nodes)
    return view


async def _throttle(shared: ServerContext, sweep_id: str, max_parallel: int | None, nodes: list[str]) -> None:
    """Tell each of ``nodes`` the sweep's new max-parallel (after the commit that changed it)."""
    for node_id in nodes:
        try:
            with trio.CancelScope(shield=True):
                await shared.nodes.send(node_id, SweepThrottle(sweep_id, max_parallel or 0))
        except NodeUnavailable:
            pass  # a node away now keeps the limit its arrays had


async def pause(shared: ServerContext, sweep_id: str, *, caller: Caller | None = None,
                reason: str = PAUSED_BY_USER) -> Sweep:
    """No trial of it starts (they wait with "sweep NAME paused"); its running trials go on."""
    return await _set_paused(shared, sweep_id, True, reason, caller, "pause")


async def resume(shared: ServerContext, sweep_id: str, *, caller: Caller | None = None) -> Sweep:
    return await _set_paused(shared, sweep_id, False, None, caller, "resume")


async def _set_paused(shared: ServerContext, sweep_id: str, paused: bool, reason: str | None, caller: Caller | None,
                      action: str) -> Sweep:
    def apply(conn: Connection) -> Sweep:
        row = sweep_rows.require(conn, sweep_id)
        _check_owner(row, caller, action)
        _check_open(row, action)
        sweep_rows.set_paused(conn, sweep_id, paused, reason)
        return _view(conn, sweep_rows.require(conn, sweep_id))

    return await change_queue(shared, apply, small=True)


async def retry_failed(shared: ServerContext, sweep_id: str, *, caller: Caller | None = None) -> Sweep:
    """Queue the sweep's FAILED trials again (as ``job retry``: afresh, a new attempt each), a
    limited token's checked against its limits as new submits are."""
    def apply(conn: Connection) -> Sweep:
        row = sweep_rows.require(conn, sweep_id)
        _check_owner(row, caller, "retry")
        _check_open(row, "retry the failed trials of")
        asked = now_ms()
        for job_id in sweep_rows.trial_jobs(conn, sweep_id, [JobState.FAILED.value]):
            if budgets.limited(caller):
                ended = job_rows.get_job(conn, job_id)
                assert ended is not None
                budgets.check(conn, caller, ended)
            job_rows.retry_job(conn, job_id, asked_ms=asked)
        return _view(conn, sweep_rows.require(conn, sweep_id))

    return await change_queue(shared, apply)


def _check_open(row: SweepRow, action: str) -> None:
    if row.cancelled_at is not None:
        raise ApiError(ErrorCode.CONFLICT, f"sweep {row.id} is cancelled: nothing to {action}",
                       {"sweep_id": row.id, "status": "CANCELLED"})
