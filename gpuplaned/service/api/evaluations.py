"""Evaluations of checkpoints (issue 15): queue one as an EVALUATE job, follow its job, list them.

``create`` (``POST /api/v1/checkpoints/{id}/evaluations``) queues an EVALUATE job and its
evaluations row (QUEUED) in one transaction: the command with ``{checkpoint}`` replaced by the
checkpoint's path, the job's env with ``GPUPLANE_CHECKPOINT``; the node adds
``GPUPLANE_EVAL_RESULT`` (a file in the attempt's dir) and reads it at the attempt's end.
The per-job ``evaluate`` policy queues the same way (``queue_for_policy``, from
``gpuplaned.service.passes.checkpoint_arrival``).

The row then follows its job, in the transactions that record the job's moves:
``after_report`` (RUNNING; the end, judged by ``gpuplaned.domain.evaluations.judge``, with an
``EVALUATION_FINISHED`` event), ``after_cancel`` (a queued job cancelled), ``after_retry``
(QUEUED again). ``record_sdk`` keeps what ``run.log_evaluation`` sends, while the evaluation
has not ended (a spool replayed after its end adds nothing).

Refusals: an unknown or deleted checkpoint is a 404; one whose file is gone a 409; a limited
token's evaluation is admitted as its submit is (``budgets.admit``), else a 403 naming the limit.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import trio

from gpuplaned.domain.evaluations import EVALUATION_FINISHED, EvaluationRecord, command_for, judge, merged
from gpuplaned.protocol.agent import JobStatus
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.evaluation_replies import Evaluation, EvaluationList, EvaluationQueued, ExperimentEvaluations
from gpuplaned.protocol.evaluation_wire import EVAL_CHECKPOINT_VAR, EvaluationCreate
from gpuplaned.protocol.ids import new_id
from gpuplaned.protocol.job_states import JobState, NodeReport
from gpuplaned.protocol.job_wire import Job, JobSpec
from gpuplaned.service import access
from gpuplaned.service.api import budgets
from gpuplaned.service.api.run_records import ranked_checkpoints
from gpuplaned.service.link.registry import now_ms
from gpuplaned.service.passes.dispatch import insert_and_place, wake_scheduler
from gpuplaned.store import checkpoint_rows, evaluation_rows, event_rows, job_rows, project_rows, run_rows
from gpuplaned.store.connection import Connection
from gpuplaned.store.evaluation_rows import ENDED
from gpuplaned.store.event_rows import EventRow
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.api.ui_sessions import Caller
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.evaluations")

MAX_LIST = 1000


def _target(conn: Connection, checkpoint_id: str) -> tuple[str, int | None, str | None, str | None]:
    """The checkpoint's path and step, and its run's job and that job's cwd.

    Raises:
        ApiError: not_found for an unknown or deleted checkpoint.
    """
    found = evaluation_rows.target(conn, checkpoint_id)
    if found is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no checkpoint {checkpoint_id}", {"checkpoint_id": checkpoint_id})
    path, step, deleted_at, job_id, cwd = found.path, found.step, found.deleted_at, found.job_id, found.job_cwd
    if deleted_at is not None:
        raise ApiError(ErrorCode.NOT_FOUND, f"checkpoint {checkpoint_id} was deleted (its file is gone)",
                       {"checkpoint_id": checkpoint_id, "deleted_at": deleted_at})
    return path, step, job_id, cwd


def eval_spec(checkpoint_id: str, path: str, body: EvaluationCreate, cwd: str) -> JobSpec:
    """The EVALUATE job of the checkpoint, as asked (before a caller's limits shape it)."""
    return JobSpec(
        name=body.name or f"eval-{checkpoint_id}", command=tuple(command_for(body.command, path)), cwd=cwd,
        env={**body.env, EVAL_CHECKPOINT_VAR: path}, gpu=body.gpu, labels=tuple(body.labels), node=body.node,
        priority=body.priority, timeout_s=body.timeout_s, type="EVALUATE")


def queue_in(conn: Connection, checkpoint_id: str, spec: JobSpec, body: EvaluationCreate, now: int,
             caller: Caller | None = None) -> tuple[Job, Evaluation]:
    """Insert the EVALUATE job and its evaluation (inside the store's transaction), admitted as
    a submit is (``budgets.admit``: the caller's limits and budget, the token recorded)."""
    token_id = budgets.admit(conn, caller, spec)
    job_id = job_rows.insert_job(conn, spec, now, job_rows.capacities(conn), token_id)
    eval_id = evaluation_rows.insert(conn, checkpoint_id=checkpoint_id, job_id=job_id, name=spec.name,
                                     suite=body.suite, dataset=body.dataset, dataset_version=body.dataset_version,
                                     now=now)
    job, evaluation = job_rows.get_job(conn, job_id), evaluation_rows.get(conn, eval_id)
    assert job is not None and evaluation is not None
    return job, evaluation


async def create(shared: ServerContext, checkpoint_id: str, body: EvaluationCreate, *,
                 caller: Caller | None = None) -> dict[str, Any]:
    """Queue an evaluation of the checkpoint; ``{"evaluation", "job"}``. ``caller``: who asks
    (None: the trusted local socket); a limited token's job gets its limits as a submit does.

    Raises:
        ApiError: ``forbidden`` naming the limit, as ``jobs.submit``; nothing is written then.
    """
    path, _step, _job_id, job_cwd = await access.readers(shared, "checkpoints").run(
        lambda conn: _target(conn, checkpoint_id))
    cwd = body.cwd or job_cwd or os.path.dirname(path)
    present, cwd_ok = await trio.to_thread.run_sync(lambda: (os.path.exists(path), os.path.isdir(cwd)))
    if not present:
        raise ApiError(ErrorCode.CONFLICT, f"checkpoint {checkpoint_id}: its file {path} is gone",
                       {"checkpoint_id": checkpoint_id, "path": path})
    if not cwd_ok:
        raise ApiError(ErrorCode.BAD_REQUEST, f"cwd: directory {cwd} does not exist", {"field": "cwd"})

    spec = budgets.shaped(eval_spec(checkpoint_id, path, body, cwd), caller)

    def insert(conn: Connection) -> tuple[Job, Evaluation]:
        _target(conn, checkpoint_id)  # deleted since the read: refused all the same
        return queue_in(conn, checkpoint_id, spec, body, now_ms(), caller)

    job, evaluation = await insert_and_place(shared, access.store_port(shared, "evaluations"), insert)
    return EvaluationQueued(evaluation=evaluation, job=job)


def queue_for_policy(conn: Connection, job_id: str | None, new: Sequence[str]) -> list[Evaluation]:
    """The ``evaluate`` policy of ``job_id`` (the training job) for checkpoints just committed
    (``new``, ids of its run's): an evaluation of each (``each``), or of each one that is the
    run's best when it arrives (``best``, by the run's primary metric; NaN never best). A
    policy whose job could never be placed is logged and skipped: it never undoes the
    checkpoints' registration. Its evaluations run with the job's env and cwd, on one GPU (none
    for a CPU-only job's), admitted as the job's submitter's own (``budgets.submitter``: a
    limited token's limits and budget; one past them, or revoked, gets none, logged)."""
    if job_id is None or not new:
        return []
    job = job_rows.get_job(conn, job_id)
    policy = job.evaluate if job is not None else None
    if job is None or policy is None or job.type == "EVALUATE":
        return []
    chosen = list(new) if policy.every == "each" else _new_bests(conn, new)
    out = []
    for checkpoint_id in chosen:
        try:
            path, _step, _job, _cwd = _target(conn, checkpoint_id)  # deleted meanwhile: not evaluated
            body = EvaluationCreate(command=list(policy.command), gpu=min(job.gpu, 1),  # a CPU job's: on a CPU
                                    env={k: v for k, v in job.env.items() if v is not None})  # as it ran
            # Queued for the policy the job's submitter set: as if it asked (its limits, its budget).
            caller = budgets.submitter(conn, job_id)
            spec = budgets.shaped(eval_spec(checkpoint_id, path, body, job.cwd or os.path.dirname(path)), caller)
            out.append(queue_in(conn, checkpoint_id, spec, body, now_ms(), caller)[1])
        except ApiError as exc:
            log.warning("evaluate policy of job %s: no evaluation of %s: %s", job_id, checkpoint_id, exc.message)
    return out


async def apply_policy(shared: ServerContext, job_id: str, new: list[str]) -> None:
    """The job's ``evaluate`` policy for its ``new`` checkpoints (``checkpoint_arrival``)."""
    job = await access.readers(shared, "jobs").run(lambda conn: job_rows.get_job(conn, job_id))
    if job is None or job.evaluate is None:
        return
    queued = await write(access.store_port(shared, "evaluations"),
                         lambda conn: queue_for_policy(conn, job_id, new), small=True)
    if queued:
        log.info("evaluate policy of job %s queued %s", job_id, ", ".join(e.id for e in queued))
        wake_scheduler(shared)


def _new_bests(conn: Connection, new: Sequence[str]) -> list[str]:
    """Those of ``new`` that are their run's best checkpoint now, by the run's primary metric
    at each one's step (``run_records.ranked_checkpoints``, which never ranks NaN)."""
    bests = {ranked_checkpoints(conn, run_id, None).best_id for run_id in checkpoint_rows.runs_of(conn, new)}
    return [ck for ck in new if ck in bests]


# --- following the job -----------------------------------------------------------------------


def after_report(conn: Connection, status: JobStatus, outcome: job_rows.StatusOutcome,
                 now: int) -> list[EventRow]:
    """Move the job's evaluation with the report just applied; the EVALUATION_FINISHED row
    (inserted; to publish after the commit) when it ended."""
    if not outcome.applied or not outcome.evaluates:  # only an EVALUATE job has an evaluation
        return []
    evaluation = evaluation_rows.for_job(conn, status.job_id)
    if evaluation is None:
        return []
    if status.status == NodeReport.RUNNING:
        evaluation_rows.started(conn, evaluation.id, job_rows.current_run(conn, status.job_id), status.at_ms or now)
        return []
    if outcome.status == JobState.QUEUED.value:
        evaluation_rows.requeue(conn, status.job_id)
        return []
    if outcome.status not in ENDED or evaluation.status in ENDED:
        return []
    verdict = judge(outcome.status, status.eval_result, evaluation.metrics, failure_reason=status.failure_reason,
                    failure_message=status.message)
    if verdict.metrics:
        evaluation_rows.add_metrics(conn, evaluation.id, verdict.metrics)
    at = status.at_ms or now
    origin = run_rows.origin(conn, outcome.run_id) if outcome.run_id else None
    runtime_s = (at - origin.started_at) / 1000 if origin and origin.started_at is not None else None
    evaluation_rows.finish(conn, evaluation.id, status=verdict.status, error=verdict.error, run_id=outcome.run_id,
                           runtime_s=max(0.0, runtime_s) if runtime_s is not None else None, at=at)
    return _finished(conn, evaluation.id, at)


def after_cancel(conn: Connection, job: Job, now: int) -> list[EventRow]:
    """A queued EVALUATE job was cancelled: so is its evaluation."""
    if job.status != JobState.CANCELLED.value:
        return []
    evaluation = evaluation_rows.for_job(conn, job.id)
    if evaluation is None or evaluation.status in ENDED:
        return []
    evaluation_rows.finish(conn, evaluation.id, status="CANCELLED", error=None, run_id=None, runtime_s=None, at=now)
    return _finished(conn, evaluation.id, now)


def after_retry(conn: Connection, job_id: str) -> None:
    evaluation_rows.requeue(conn, job_id)


def _finished(conn: Connection, eval_id: str, at: int) -> list[EventRow]:
    ev = evaluation_rows.get(conn, eval_id)
    assert ev is not None
    what = ", ".join(f"{k}={v:.6g}" for k, v in list(ev.metrics.items())[:5])
    message = f"evaluation of {ev.checkpoint_path} {ev.status.lower()}" + (
        f": {ev.error}" if ev.error else f" ({what})" if what else "")
    context = {"evaluation_id": ev.id, "checkpoint_id": ev.checkpoint_id, "checkpoint_path": ev.checkpoint_path,
               "status": ev.status, "metrics": ev.metrics, "error": ev.error, "suite": ev.suite,
               "dataset": ev.dataset, "dataset_version": ev.dataset_version, "eval_run_id": ev.run_id,
               "runtime_s": ev.runtime_s}
    # info whatever the status: it says an evaluation ended, and how (the message, context.status
    # and error); a failed evaluation job has raised its own JOB_FAILED.
    row = EventRow(new_id("ev"), at, EVALUATION_FINISHED, "info", None,
                   ev.job_id, ev.checkpoint_run_id, ev.checkpoint_step, message[:2000], context)
    event_rows.insert_events(conn, [row])
    return [row]


def record_sdk(conn: Connection, job_id: str | None, records: Sequence[EvaluationRecord]) -> None:
    """``run.log_evaluation`` metrics of a run of ``job_id``: kept on the job's evaluation
    while it has not ended; dropped (logged) for a job that has none."""
    if not records:
        return
    evaluation = evaluation_rows.for_job(conn, job_id) if job_id is not None else None
    if evaluation is None or evaluation.status in ENDED:
        log.info("log_evaluation of %s dropped: %s", job_id or "a run with no job",
                 "its evaluation has ended" if evaluation is not None else "no evaluation of this job")
        return
    evaluation_rows.add_metrics(conn, evaluation.id, merged(records))


# --- reads -------------------------------------------------------------------------------------


async def list_for_checkpoint(shared: ServerContext, checkpoint_id: str) -> EvaluationList:
    def read(conn: Connection) -> EvaluationList:
        if checkpoint_rows.get(conn, checkpoint_id) is None:
            raise ApiError(ErrorCode.NOT_FOUND, f"no checkpoint {checkpoint_id}", {"checkpoint_id": checkpoint_id})
        return EvaluationList(evaluations=evaluation_rows.list_for_checkpoint(conn, checkpoint_id))

    return await access.readers(shared, "checkpoints").run(read)


async def list_for_experiment(shared: ServerContext, experiment_key: str, project_key: str | None,
                              limit: int) -> ExperimentEvaluations:
    def read(conn: Connection) -> ExperimentEvaluations:
        project = project_rows.require_project(conn, project_key, "project") if project_key is not None else None
        experiment = project_rows.require_experiment(conn, experiment_key, project)
        return ExperimentEvaluations(
            evaluations=evaluation_rows.list_for_experiment(conn, experiment.id, min(limit, MAX_LIST)),
            experiment_id=experiment.id)

    return await access.readers(shared, "checkpoints").run(read)
