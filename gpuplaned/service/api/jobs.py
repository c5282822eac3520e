"""Jobs for the API: submit (and its dry run, ``plan``), list, show, cancel, retry, and where
their log files are.

``caller`` (``gpuplaned.service.api.ui_sessions.Caller``; None for the trusted local socket): a
token with limits (``TokenLimits``) is checked on submit, dry run and retry
(``gpuplaned.service.api.budgets``), and may cancel or retry only the jobs it submitted.

What a caller sees of a job's env (``env_view``): names only in lists and for read-only
callers; the values with write access to the one job, except for names that look secret
(``gpuplaned.domain.secret_values.looks_secret``), whose values are never shown. A value not
shown is null, and a URL's password (in a value or an argument) shows as ``***``. A job's
secret env (``secret_env``) is sealed before it is stored (``gpuplaned.service.sealing``) and
shown by name only, to every caller.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from gpuplaned.domain import gpu_budget, queue
from gpuplaned.domain.scheduling import waiting_reason
from gpuplaned.domain.secret_values import looks_secret, mask_url_passwords
from gpuplaned.home import attempt_dir
from gpuplaned.protocol import cursors
from gpuplaned.protocol.agent import Cancel
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.evaluation_wire import RetryBody
from gpuplaned.protocol.job_states import RETRYABLE, JobState
from gpuplaned.protocol.job_wire import Job, JobSubmit, to_spec
from gpuplaned.protocol.submit_plan import SubmitPlan
from gpuplaned.service import access
from gpuplaned.service.api import budgets, evaluations
from gpuplaned.service.api.tokens import grants
from gpuplaned.service.link.registry import NodeUnavailable, now_ms
from gpuplaned.service.passes import resume
from gpuplaned.service.passes.dispatch import (
    change_queue,
    insert_and_place,
    placement_of,
    util_rule_of,
    wake_scheduler,
)
from gpuplaned.service.sealing import seal_env
from gpuplaned.store import dependency_rows, event_rows, group_rows, job_rows, resume_rows
from gpuplaned.store.event_rows import EventRow
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.api.ui_sessions import Caller
    from gpuplaned.service.context import ServerContext

JOB_STATES = tuple(state.value for state in JobState)
STREAMS = ("stdout", "stderr")


def _store(shared: ServerContext) -> Any:
    return access.store_port(shared, "jobs")


def _readers(shared: ServerContext) -> Any:
    return access.readers(shared, "jobs")


async def submit(shared: ServerContext, body: JobSubmit, *, caller: Caller | None = None) -> Job:
    """Queue a job. ``caller``: who asks (None: the trusted local socket); a token with limits
    is checked against them in the insert's own transaction (``gpuplaned.service.api.budgets``) and
    the job records the token.

    Raises:
        ApiError: ``forbidden`` naming the limit (and the budget's ``remaining_gpu_hours``), or
            ``bad_request`` for a job no node could run; nothing is written then.
    """
    spec = budgets.shaped(to_spec(body), caller)
    if body.secret_env:
        spec = attrs.evolve(spec, secret_env_names=tuple(body.secret_env),
                            secret_env_sealed=seal_env(shared.config.home, body.secret_env))

    def insert(conn: Any) -> Job:
        token_id = budgets.admit(conn, caller, spec)
        nodes = job_rows.capacities(conn, shared.nodes.connected(), shared.nodes.snapshots())
        now = now_ms()
        job_id = job_rows.insert_job(conn, spec, now, nodes, token_id)
        if body.group is not None:  # its group's limit and pause hold it (gpuplaned.domain.groups)
            group_rows.put_in_group(conn, job_id, body.group)
        if body.after is not None:  # held until they end; cancelled at once if they never can be met
            dependency_rows.attach(conn, job_id, body.after.ids, body.after.when, now)
        job = job_rows.get_job(conn, job_id)
        assert job is not None
        return job

    return await insert_and_place(shared, _store(shared), insert)


async def plan(shared: ServerContext, body: JobSubmit, *, caller: Caller | None = None) -> SubmitPlan:
    """What ``submit`` would do, without doing it: the same checks, the scheduler's own placement
    (``gpuplaned.domain.queue.assign`` over the queue with this job in its place, under
    ``[scheduler] placement``), and the
    budget left after it. Nothing is written."""
    limits = caller.limits if budgets.limited(caller) else None
    spec = budgets.as_limited(to_spec(body), limits)
    facts = budgets.facts(spec)

    def look(conn: Any) -> SubmitPlan:
        reasons: list[str] = []
        after = None
        if caller is not None and limits is not None:
            refusals, used = budgets.refusals(conn, caller, facts)
            reasons += [r.message for r in refusals]
            after = gpu_budget.budget_after(limits, facts, used)
        nodes = job_rows.capacities(conn, shared.nodes.connected(), shared.nodes.snapshots(),
                                    shared.nodes.withheld(util_rule_of(shared)))
        planned = attrs.evolve(queue.as_queued(spec, _PLANNED, now_ms()), group=body.group)
        refused = queue.refusal(planned, nodes)
        if refused is not None:
            reasons.append(refused.message)
        held = dependency_rows.preview(conn, body.after.ids, body.after.when) if body.after is not None else None
        if held is not None and held[0]:  # an unknown id
            reasons.append(held[1])
        if reasons:
            return SubmitPlan("refuse", None, [], None, after, reasons)
        if held is not None:  # it waits for its dependencies (or would be cancelled at once), not for a slot
            return SubmitPlan("queue", None, [], None, after, [held[1]])
        line, position = queue.in_line(list(job_rows.queued_jobs(conn)), planned)
        passed = queue.place(line, nodes, placement_of(shared), group_rows.holds(conn))
        placed = next((a for a in passed.assignments if a.job_id == _PLANNED), None)
        if placed is not None:
            return SubmitPlan("dispatch", placed.node_id, list(placed.gpu_indexes), None, after, [])
        # The scheduler's own reason when no node could take it whatever frees up (a GPU model or
        # memory no node has, a drained node); else it waits its turn for capacity.
        why = passed.waiting.get(_PLANNED) or waiting_reason(planned, nodes) or (
            "no matching node has enough free GPUs now" if spec.gpu else "no matching node has a free CPU slot now")
        return SubmitPlan("queue", None, [], position, after, [why])

    return await _readers(shared).run(look)


_PLANNED = "planned"  # the job a dry run places: no real job has this id


def parse_statuses(raw: str | None) -> list[str]:
    if not raw:
        return []
    statuses = [s.strip().upper() for s in raw.split(",") if s.strip()]
    bad = [s for s in statuses if s not in JOB_STATES]
    if bad:
        raise ApiError(ErrorCode.BAD_REQUEST, f"status: unknown job state(s) {', '.join(bad)}",
                       {"field": "status", "states": list(JOB_STATES)})
    return statuses


async def list_jobs(shared: ServerContext, statuses: list[str], limit: int,
                    cursor: str | None = None, group: str | None = None,
                    sweep: str | None = None) -> tuple[list[Job], str | None]:
    """A page of jobs, newest first, and the cursor of the next page (None: no more); ``group``:
    only that group's; ``sweep``: only that sweep's trials."""
    before = cursors.decode("jobs", cursor, (int, str))
    found = await _readers(shared).run(
        lambda conn: job_rows.list_jobs(conn, statuses=statuses, limit=limit + 1, before=before,  # type: ignore[arg-type]
                                        group=group, sweep=sweep))
    return cursors.split_page("jobs", found, limit)


async def get_job(shared: ServerContext, job_id: str) -> Job:
    job = await _readers(shared).run(lambda conn: job_rows.get_job(conn, job_id))
    if job is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no job {job_id!r}", {"job_id": job_id})
    return job


async def cancel(shared: ServerContext, job_id: str, *, caller: Caller | None = None,
                 because: EventRow | None = None) -> Job:
    """Cancel a queued or running job. A token with limits may cancel only the jobs it submitted.
    ``because``: the event that says why (a spent budget), stored in the cancel's own
    transaction, so a kill -9 can leave neither without the other."""
    def apply(conn: Any) -> tuple[job_rows.CancelOutcome, list[Any]]:
        budgets.check_owner(conn, caller, job_id, "cancel")
        now = now_ms()
        outcome = job_rows.cancel_job(conn, job_id, now)
        reasons = [because] if because is not None else []
        event_rows.insert_events(conn, reasons)
        return outcome, reasons + evaluations.after_cancel(conn, outcome.job, now)  # a queued evaluation's job

    outcome, events = await write(_store(shared), apply, small=True)
    for row in events:  # after the commit
        shared.event_feed.publish(row)
    if outcome.node_id is not None:
        try:
            with trio.CancelScope(shield=True):  # on record now: the node must hear of it, client or not
                await shared.nodes.send(outcome.node_id, Cancel(job_id, outcome.job.attempt))
        except NodeUnavailable:
            pass  # cancel_requested is on record; the node acts on it when it says hello again
    else:
        wake_scheduler(shared)
    return outcome.job


async def retry(shared: ServerContext, job_id: str, body: RetryBody | None = None, *,
                caller: Caller | None = None) -> Job:
    """Queue an ended job again; with ``resume_from`` (best, last or a checkpoint id of its
    lineage: ``gpuplaned.service.passes.resume``) its next attempts resume from that checkpoint,
    without it they start afresh. ``with_dependants``: its dependants cancelled because it failed
    (DEPENDENCY_FAILED), and theirs, are queued again behind it. A token with limits may retry
    only its own jobs, and the job is checked against its limits and budget as a new submit is."""
    which = body.resume_from if body is not None else None
    point = await resume.choose(shared, job_id, which) if which else None

    with_dependants = body is not None and body.with_dependants

    def apply(conn: Any) -> Job:
        budgets.check_owner(conn, caller, job_id, "retry")
        for dependant in dependency_rows.cancelled_chain(conn, job_id) if with_dependants else ():
            budgets.check_owner(conn, caller, dependant, "retry")  # the chain too: each one its own
        if budgets.limited(caller):
            ended = job_rows.get_job(conn, job_id)
            if ended is not None and ended.status in RETRYABLE:  # else retry_job says why not
                budgets.check(conn, caller, ended)
        if point is not None:
            current = resume_rows.resume_point(conn, point.checkpoint_id)
            if current is None or current.deleted_at is not None:  # deleted since it was chosen
                raise ApiError(ErrorCode.CONFLICT, f"checkpoint {point.checkpoint_id} was deleted: its file is gone",
                               {"job_id": job_id, "checkpoint_id": point.checkpoint_id})
        job_rows.retry_job(conn, job_id, asked_ms=now_ms(), with_dependants=with_dependants)
        resume_rows.set_resume_from(conn, job_id, point.checkpoint_id if point else None)
        evaluations.after_retry(conn, job_id)
        job = job_rows.get_job(conn, job_id)
        assert job is not None
        return job

    return await change_queue(shared, apply, small=True)


def env_view(job: Job, *, values: bool) -> Job:
    """``job`` as a caller sees it: env names only, or with ``values`` the values of the
    names that do not look secret; a URL's password masked in those values and in its argv
    (which ``ps`` on the node shows anyway: secrets belong in ``secret_env``)."""
    return attrs.evolve(job, command=[mask_url_passwords(arg) for arg in job.command],
                        env={name: mask_url_passwords(value) if values and not looks_secret(name) and value is not None
                             else None for name, value in job.env.items()})


def view_for(job: Job, caller: Caller | None) -> Job:
    """One job as ``caller`` sees it, on every front (REST's one job, MCP's ``get_job`` and write
    tools): its env values for the trusted local socket (None) and a caller who may write,
    secret-looking names excepted; names only for a read-only caller."""
    return env_view(job, values=caller is None or grants(caller.scopes, "write"))


def log_path(shared: ServerContext, job: Job, stream: str, attempt: int | None = None) -> Path:
    if stream not in STREAMS:
        raise ApiError(ErrorCode.BAD_REQUEST, f"stream: must be stdout or stderr, not {stream!r}",
                       {"field": "stream"})
    attempt = job.attempt if attempt is None else attempt
    if attempt < 1 or attempt > job.attempt:
        raise ApiError(ErrorCode.NOT_FOUND, f"job {job.id} has no attempt {attempt} (it has {job.attempt})",
                       {"job_id": job.id, "attempts": job.attempt})
    return attempt_dir(shared.config.jobs_home, job.id, attempt) / f"{stream}.log"
