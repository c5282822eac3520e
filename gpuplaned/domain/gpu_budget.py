"""GPU-hour accounting and the submit limits of a capability token: pure functions.

Charged: each attempt of a token's job costs ``gpus x (end - start)``, from its run's start and
end times (an attempt still going ends ``now``). Committed: what is charged plus what the jobs
not yet ended may still use, each up to one attempt's worst case (``gpus x`` its timeout, or
the token's ``max_job_hours``) less what its current attempt has used. A submit is refused
when committed plus the new job's worst case would pass the budget. Attempts beyond the first
(``max_attempts``, retries) are not reserved ahead: the budget pass stops the token's jobs
once the charge reaches the budget, which bounds them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import attrs

from gpuplaned.protocol.job_states import ENDED
from gpuplaned.protocol.token_limits import TokenLimits

MS_PER_HOUR = 3_600_000
BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"  # an event: a job stopped because its token spent its budget


@attrs.frozen
class Attempt:
    started_at: int | None  # ms; None: never started (charged nothing)
    finished_at: int | None  # ms; None: still going (charged up to now)


@attrs.frozen
class TokenJob:
    """What the budget needs of one of a token's jobs."""

    job_id: str
    status: str
    gpus: int
    timeout_s: float | None
    attempts: tuple[Attempt, ...] = ()  # the current attempt (when one is going) last


@attrs.frozen
class Usage:
    used_gpu_hours: float
    committed_gpu_hours: float  # used, plus what the jobs not ended may still use
    open_jobs: int  # jobs not ended (queued, dispatching, running, lost: it may run on, charged)


def attempt_hours(attempt: Attempt, now_ms: int) -> float:
    if attempt.started_at is None:
        return 0.0
    end = attempt.finished_at if attempt.finished_at is not None else now_ms
    return max(0, end - attempt.started_at) / MS_PER_HOUR


def job_used_gpu_hours(job: TokenJob, now_ms: int) -> float:
    return job.gpus * sum(attempt_hours(a, now_ms) for a in job.attempts)


def job_hours(timeout_s: float | None, limits: TokenLimits) -> float | None:
    """The hours one attempt may run for budget purposes: its timeout, else ``max_job_hours``;
    None when it has neither (unbounded)."""
    if timeout_s is not None:
        return timeout_s / 3600
    return limits.max_job_hours


def job_reserved_gpu_hours(job: TokenJob, limits: TokenLimits, now_ms: int) -> float:
    """What a job not ended may still use: its current attempt's worst case less what that
    attempt used (an ended job reserves nothing)."""
    if job.status in ENDED:
        return 0.0
    hours = job_hours(job.timeout_s, limits)
    if hours is None:
        return 0.0  # only a job from before the limits were known: the pass bounds it
    current = job.attempts[-1] if job.attempts and job.attempts[-1].finished_at is None else None
    spent = attempt_hours(current, now_ms) if current is not None else 0.0
    return max(0.0, job.gpus * (hours - spent))


def usage(jobs: Iterable[TokenJob], limits: TokenLimits, now_ms: int) -> Usage:
    used = committed = 0.0
    open_jobs = 0
    for job in jobs:
        charged = job_used_gpu_hours(job, now_ms)
        used += charged
        committed += charged + job_reserved_gpu_hours(job, limits, now_ms)
        open_jobs += job.status not in ENDED
    return Usage(used, committed, open_jobs)


def spent(limits: TokenLimits | None, used_gpu_hours: float) -> bool:
    """Whether a budgeted token has used all its GPU-hours (its running jobs are to stop)."""
    return limits is not None and limits.gpu_hours is not None and used_gpu_hours >= limits.gpu_hours


# --- the submit limits ----------------------------------------------------------


@attrs.frozen
class Refusal:
    limit: str  # the TokenLimits field at fault, or "budget"
    message: str
    details: dict[str, object] = attrs.field(factory=dict)


@attrs.frozen
class SubmitFacts:
    """What the limits look at of a job to be queued (``cwd`` with its symlinks resolved)."""

    gpus: int
    node: str | None
    cwd: str
    timeout_s: float | None


def inside(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` or lies under it (both absolute and already resolved)."""
    path, directory = os.path.normpath(path), os.path.normpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def check_submit(limits: TokenLimits, job: SubmitFacts, used: Usage, *, token: str) -> list[Refusal]:
    """Every limit the job would break, in the order the fields are declared; [] when none.

    ``used``: the token's usage before this job. ``token``: its name, for messages.
    """
    out: list[Refusal] = []
    if limits.max_gpus_per_job is not None and job.gpus > limits.max_gpus_per_job:
        out.append(Refusal("max_gpus_per_job", f"token {token!r} may use at most {limits.max_gpus_per_job} GPU(s) "
                                               f"per job; this job asks for {job.gpus}",
                           {"max_gpus_per_job": limits.max_gpus_per_job, "requested": job.gpus}))
    if limits.allowed_nodes is not None and job.node not in limits.allowed_nodes:
        allowed = ", ".join(limits.allowed_nodes)
        what = f"is pinned to {job.node!r}" if job.node is not None else "names no node"
        out.append(Refusal("allowed_nodes", f"token {token!r} may run jobs only on {allowed}: set node to one of "
                                            f"them (this job {what})",
                           {"allowed_nodes": list(limits.allowed_nodes), "node": job.node}))
    if limits.allowed_dirs is not None and not any(inside(job.cwd, d) for d in limits.allowed_dirs):
        dirs = ", ".join(limits.allowed_dirs)
        out.append(Refusal("allowed_dirs", f"token {token!r} may run jobs only inside {dirs}; "
                                           f"the working directory resolves to {job.cwd}",
                           {"allowed_dirs": list(limits.allowed_dirs), "cwd": job.cwd}))
    if limits.max_queued_jobs is not None and used.open_jobs >= limits.max_queued_jobs:
        out.append(Refusal("max_queued_jobs", f"token {token!r} already has {used.open_jobs} job(s) not ended, its "
                                              f"limit is {limits.max_queued_jobs}",
                           {"max_queued_jobs": limits.max_queued_jobs, "open_jobs": used.open_jobs}))
    if (limits.max_job_hours is not None and job.timeout_s is not None
            and job.timeout_s > limits.max_job_hours * 3600):
        out.append(Refusal("max_job_hours", f"token {token!r} allows jobs of at most {limits.max_job_hours:g} h; "
                                            f"timeout_s is {job.timeout_s:g} s",
                           {"max_job_hours": limits.max_job_hours, "timeout_s": job.timeout_s}))
    if limits.gpu_hours is not None:
        out.extend(_budget_refusal(limits, job, used, token))
    return out


def _budget_refusal(limits: TokenLimits, job: SubmitFacts, used: Usage, token: str) -> list[Refusal]:
    assert limits.gpu_hours is not None
    remaining = max(0.0, limits.gpu_hours - used.committed_gpu_hours)
    base = {"gpu_hours": limits.gpu_hours, "used_gpu_hours": round(used.used_gpu_hours, 6),
            "remaining_gpu_hours": round(remaining, 6)}
    hours = job_hours(job.timeout_s, limits)
    if hours is None:
        return [Refusal("budget", f"token {token!r} has a GPU-hour budget: the job must set timeout_s (the token "
                                  "sets no max_job_hours)", {**base, "reason": "no_timeout"})]
    worst = job.gpus * hours
    if worst > remaining + 1e-9:
        return [Refusal("budget", f"token {token!r} has {remaining:.4g} GPU-hour(s) left of {limits.gpu_hours:g}; "
                                  f"this job could use {worst:.4g} ({job.gpus} GPU(s) x {hours:.4g} h)",
                        {**base, "reason": "budget_exceeded", "job_gpu_hours": round(worst, 6)})]
    return []


def budget_after(limits: TokenLimits | None, job: SubmitFacts, used: Usage) -> float | None:
    """GPU-hours left once the job's worst case is reserved (None: no budget)."""
    if limits is None or limits.gpu_hours is None:
        return None
    hours = job_hours(job.timeout_s, limits) or 0.0
    return round(limits.gpu_hours - used.committed_gpu_hours - job.gpus * hours, 6)
