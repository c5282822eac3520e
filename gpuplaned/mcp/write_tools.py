"""The write tools: submit, cancel, retry, evaluate. Each answers at once with a task handle
(the job; ``tasks``), never waits for the work, passes the caller (its token's limits), and
with ``dry_run`` says what would happen and changes nothing."""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.mcp import args as a
from gpuplaned.mcp.table import DRY_RUN, Call, Result, TaskHandle, Tool, next_action
from gpuplaned.mcp.tasks import handle_for
from gpuplaned.protocol.converter import structure
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.evaluation_replies import Evaluation
from gpuplaned.protocol.evaluation_wire import EvaluationCreate, RetryBody
from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.job_states import CANCELLABLE, RETRYABLE, WENT_WRONG, JobState
from gpuplaned.protocol.job_wire import Job, JobSubmit
from gpuplaned.protocol.submit_plan import SubmitPlan
from gpuplaned.service.api import evaluations, jobs, run_records


@attrs.frozen(kw_only=True)
class WriteOutcome:
    dry_run: bool = doc("true: nothing was changed")
    job: Job | None = doc("the job, its env shown as REST's GET /api/v1/jobs/{id} shows it to this caller "
                          "(values with write scope, secret-looking names excepted); null on a dry run of a submit")
    task: TaskHandle | None = doc("what to poll; null on a dry run")
    plan: SubmitPlan | None = doc("a dry-run submit: what would happen")
    evaluation: Evaluation | None = doc("evaluate_checkpoint: the evaluation queued")
    would: str | None = doc("a dry run: what would happen, in words")


def _view(call: Call, job: Job) -> Job:
    return jobs.view_for(job, call.caller)


async def _done(call: Call, job: Job, words: str, evaluation: Any = None) -> Result:
    task = await handle_for(call.shared, job)
    return Result(f"{words} Poll every {task.poll_interval_ms // 1000} s: {task.status_message}",
                  WriteOutcome(dry_run=False, job=_view(call, job), task=task, plan=None, evaluation=evaluation,
                               would=None),
                  task.poll)


async def task_result(call: Call, job_id: str) -> Result:
    """A task's final result (``tasks/result``; ``tasks/get`` at 2026-07-28): the write tools'
    own answer, for the job as it ended, so it fits the output schema of whichever made it."""
    job = await jobs.get_job(call.shared, job_id)
    task = await handle_for(call.shared, job)
    more = [next_action("diagnose_run", "how the run went", run_id=job.run_id)] if job.run_id else []
    if job.status in WENT_WRONG:
        more.insert(0, next_action("explain_failure", "why it failed", job_id=job.id))
    return Result(f"Job {job.id} ({job.name}) ended {job.status}. {task.status_message}",
                  WriteOutcome(dry_run=False, job=_view(call, job), task=task, plan=None, evaluation=None,
                               would=None), more)


def _would(call: Call, words: str, job: Job | None = None, plan: Any = None) -> Result:
    job_seen = _view(call, job) if job else None
    return Result(f"Dry run, nothing changed: {words}", WriteOutcome(dry_run=True, job=job_seen, task=None, plan=plan,
                                                                     evaluation=None, would=words))


async def submit_job(call: Call, body: JobSubmit) -> Result:
    if call.dry_run:
        plan = await jobs.plan(call.shared, body, caller=call.caller)
        where = f" on {plan.node_id} GPUs {plan.gpus}" if plan.would == "dispatch" else ""
        queue = f" at queue position {plan.queue_position}" if plan.queue_position else ""
        budget = (f"; {plan.budget_after_gpu_hours:.3g} GPU-hours left after it"
                  if plan.budget_after_gpu_hours is not None else "")
        reasons = f" ({'; '.join(plan.reasons)})" if plan.reasons else ""
        return _would(call, f"it would {plan.would}{where}{queue}{reasons}{budget}.", plan=plan)
    job = await jobs.submit(call.shared, body, caller=call.caller)
    return await _done(call, job, f"Job {job.id} ({job.name}) is {job.status}.")


async def cancel_job(call: Call, args: a.CancelArgs) -> Result:
    if call.dry_run:
        job = await jobs.get_job(call.shared, args.job_id)
        if job.status not in CANCELLABLE:
            return _would(call, f"job {job.id} has ended ({job.status}); cancelling it would be refused.", job)
        return _would(call, f"job {job.id} ({job.status}) would be cancelled"
                      + (" and its process stopped." if job.status == JobState.RUNNING else
                         " when its node is back." if job.status == JobState.LOST else "."), job)
    job = await jobs.cancel(call.shared, args.job_id, caller=call.caller)
    return await _done(call, job, f"Job {job.id} is cancelling (now {job.status}).")


async def retry_job(call: Call, args: a.RetryArgs) -> Result:
    if call.dry_run:
        job = await jobs.get_job(call.shared, args.job_id)
        if job.status not in RETRYABLE:
            return _would(call, f"job {job.id} is {job.status}, not ended; a retry would be refused.", job)
        start = f", resuming from {args.resume_from}" if args.resume_from else ", starting afresh"
        chain = [d.job_id for d in job.dependants if d.status == JobState.CANCELLED] if args.with_dependants else []
        behind = f", with its cancelled dependants {', '.join(chain)} behind it" if chain else ""
        return _would(call, f"job {job.id} ({job.status}) would be queued again{start}{behind}.", job)
    job = await jobs.retry(call.shared, args.job_id,
                           RetryBody(resume_from=args.resume_from, with_dependants=args.with_dependants),
                           caller=call.caller)
    back = [d.job_id for d in job.dependants if d.status == JobState.QUEUED] if args.with_dependants else []
    behind = f" Queued again behind it: {', '.join(back)}." if back else ""
    return await _done(call, job, f"Job {job.id} is queued again (attempt {job.attempt + 1} next).{behind}")


async def evaluate_checkpoint(call: Call, raw: dict[str, Any]) -> Result:
    checkpoint_id = raw.pop("checkpoint_id", None)
    structure({"checkpoint_id": checkpoint_id}, a.CheckpointArgs, what="arguments")
    body = structure(raw, EvaluationCreate, what="arguments")
    if call.dry_run:
        found = (await run_records.get_checkpoint(call.shared, checkpoint_id)).checkpoint
        if found.deleted_at is not None:
            raise ApiError(ErrorCode.CONFLICT, f"checkpoint {checkpoint_id} was deleted: its file is gone",
                           {"checkpoint_id": checkpoint_id})
        return _would(call, f"an EVALUATE job of checkpoint {checkpoint_id} (step {found.step}) would be queued "
                      f"with {body.gpu} GPU(s): {' '.join(body.command)}.")
    queued = await evaluations.create(call.shared, checkpoint_id, body, caller=call.caller)
    job = queued.job
    return await _done(call, job, f"Evaluation {queued.evaluation.id} of {checkpoint_id} is queued as job {job.id}.",
                       queued.evaluation)


_CHECKPOINT = {"checkpoint_id": {"type": "string", "pattern": "^ck_[0-9A-Za-z]{1,64}$",
                                 "description": "the checkpoint to evaluate (ck_...)"}}

TOOLS = [
    Tool(name="submit_job", title="Submit job", description="Queue a job (argv command, cwd, GPUs, timeout...). "
         "Answers at once with a task handle to poll (get_job, get_run_summary) or wait on (wait_for_events); "
         "dry_run says where it would go and the budget left, and changes nothing.", args=JobSubmit,
         reply=WriteOutcome, handler=submit_job, extra=DRY_RUN),
    Tool(name="cancel_job", title="Cancel job", description="Cancel a queued or running job (asks the user to "
         "confirm unless the token allows unattended use).", args=a.CancelArgs, reply=WriteOutcome,
         handler=cancel_job, extra=DRY_RUN, by_hand="gpuplanectl job cancel JOB"),
    Tool(name="retry_job", title="Retry job", description="Queue an ended job again, optionally resuming from a "
         "checkpoint (best, last or an id).", args=a.RetryArgs, reply=WriteOutcome, handler=retry_job,
         extra=DRY_RUN),
    Tool(name="evaluate_checkpoint", title="Evaluate checkpoint", description="Queue an EVALUATE job of a "
         "checkpoint: {checkpoint} in the command becomes its path; the job writes its metrics to "
         "GPUPLANE_EVAL_RESULT.", args=EvaluationCreate, reply=WriteOutcome, handler=evaluate_checkpoint,
         extra={**_CHECKPOINT, **DRY_RUN}, extra_required=("checkpoint_id",)),
]
RAW_ARGS = {"evaluate_checkpoint"}  # handlers that structure their own arguments (an id beside a body)
