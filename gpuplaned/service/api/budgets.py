"""A capability token's limits, checked on submit, dry run, retry and a checkpoint's evaluation
(``admit``, the one admission of a job a caller creates); what a limited token may act on
(``check_owner``, ``check_run_owner``: what it submitted; ``refuse_node_change``: no node).

``check`` runs inside the submit's (or retry's) own write transaction, so two submits racing
for the last GPU-hours cannot both pass; a refusal raises before anything is written
(``forbidden``, ``details.limit`` the field at fault, and for the budget
``remaining_gpu_hours``). The accounting itself is ``gpuplaned.domain.gpu_budget``.

A limited token's job without ``timeout_s`` gets ``max_job_hours`` as its timeout (so the
reserved worst case is what it can really use); a budgeted token's job with neither is refused.
With ``allowed_dirs`` the job runs in its working directory as resolved and checked.

The pass that stops a spent budget's jobs is ``gpuplaned.service.passes.budget``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import attrs

from gpuplaned.domain import gpu_budget
from gpuplaned.domain.gpu_budget import SubmitFacts, Usage
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.job_wire import Job, JobSpec
from gpuplaned.protocol.token_limits import TokenLimits
from gpuplaned.service.link.registry import now_ms
from gpuplaned.store import budget_rows, job_rows, run_rows, token_rows
from gpuplaned.store.connection import Connection

if TYPE_CHECKING:
    from gpuplaned.service.api.ui_sessions import Caller


def submitter(conn: Connection, job_id: str) -> Caller | None:
    """The token that submitted ``job_id``, as the caller of what the job's policies queue for it
    (its evaluations): its limits and budget apply as they do to its own submits. None for a
    job the local socket submitted.

    Raises:
        ApiError: ``forbidden``, the token is revoked or has expired: it queues nothing more.
    """
    from gpuplaned.service.api.ui_sessions import Caller  # the service's caller, built for the daemon's own act

    token_id = job_rows.job_token(conn, job_id)
    token = token_rows.get_token(conn, token_id) if token_id is not None else None
    if token is None:
        return None
    if token.revoked_at is not None or (token.expires_at is not None and token.expires_at <= now_ms()):
        raise ApiError(ErrorCode.FORBIDDEN, f"token {token.name!r}, which submitted job {job_id}, is revoked or "
                       "has expired: nothing more is queued on its behalf", {"token": token.name})
    return Caller.of_token(token)


def limited(caller: Caller | None) -> bool:
    return caller is not None and caller.limits is not None and caller.token_id is not None


def token_name(caller: Caller) -> str:
    return caller.name.removeprefix("token ").strip("'")


def as_limited(spec: JobSpec, limits: TokenLimits | None) -> JobSpec:
    """The job as a limited token queues it: without a timeout it gets ``max_job_hours``; with
    ``allowed_dirs`` it runs in its directory resolved (the one checked: a symlink changed
    after the check cannot move it elsewhere)."""
    if limits is None:
        return spec
    if spec.timeout_s is None and limits.max_job_hours is not None:
        spec = attrs.evolve(spec, timeout_s=limits.max_job_hours * 3600)
    if limits.allowed_dirs is not None:
        spec = attrs.evolve(spec, cwd=os.path.realpath(spec.cwd))
    return spec


def shaped(spec: JobSpec, caller: Caller | None) -> JobSpec:
    """The job as ``caller`` may queue it (``as_limited`` with a limited token's limits)."""
    return as_limited(spec, caller.limits if limited(caller) else None)


def admit(conn: Connection, caller: Caller | None, spec: JobSpec) -> str | None:
    """The one admission of every job a caller creates (submit, a checkpoint's evaluation): its
    limits and budget checked inside the insert's own transaction; the token to record as the
    job's submitter (None: the local socket or the daemon itself).

    Raises:
        ApiError: ``forbidden`` as ``check``; nothing is written then.
    """
    check(conn, caller, spec)
    return caller.token_id if caller is not None else None


def facts(job: JobSpec | Job) -> SubmitFacts:
    """What the limits read of a job to queue, or of an ended one to queue again (a retry); its
    directory with symlinks and ``..`` resolved."""
    return SubmitFacts(job.gpu, job.node, os.path.realpath(job.cwd or "/"), job.timeout_s)


def usage(conn: Connection, token_id: str, limits: TokenLimits) -> Usage:
    return gpu_budget.usage(budget_rows.token_jobs(conn, token_id), limits, now_ms())


def remaining(conn: Connection, caller: Caller | None) -> float | None:
    """GPU-hours left of the caller's budget, its open jobs' worst cases reserved (None: no budget)."""
    limits = caller.limits if caller is not None and limited(caller) else None
    if caller is None or caller.token_id is None or limits is None or limits.gpu_hours is None:
        return None
    return round(max(0.0, limits.gpu_hours - usage(conn, caller.token_id, limits).committed_gpu_hours), 6)


def refusals(conn: Connection, caller: Caller, job: SubmitFacts) -> tuple[list[gpu_budget.Refusal], Usage]:
    assert caller.limits is not None and caller.token_id is not None
    used = usage(conn, caller.token_id, caller.limits)
    return gpu_budget.check_submit(caller.limits, job, used, token=token_name(caller)), used


def check(conn: Connection, caller: Caller | None, job: JobSpec | Job) -> None:
    """``job`` (one to queue, or an ended one to queue again) against a limited caller's limits
    and budget; its ``facts`` (a realpath: a syscall a path part) are read only for such a caller.

    Raises:
        ApiError: ``forbidden`` for the first limit the job breaks (all of them in ``details.refusals``).
    """
    if not limited(caller):
        return
    assert caller is not None
    found, _ = refusals(conn, caller, facts(job))
    if found:
        first = found[0]
        raise ApiError(ErrorCode.FORBIDDEN, first.message,
                       {"limit": first.limit, **first.details, "token": token_name(caller),
                        "refusals": [{"limit": r.limit, "message": r.message} for r in found]})


def submitted(conn: Connection, caller: Caller, job_id: str | None) -> bool:
    """The ownership rule of a limited token, in one place: the token submitted the job."""
    if job_id is None:
        return False
    owner = job_rows.job_token(conn, job_id)
    return owner is not None and owner == caller.token_id


def check_owner(conn: Connection, caller: Caller | None, job_id: str, action: str) -> None:
    """A limited token may cancel or retry only the jobs it submitted.

    Raises:
        ApiError: ``forbidden`` for another's job (``not_found`` is left to the action itself).
    """
    if not limited(caller):
        return
    assert caller is not None
    if job_rows.job_exists(conn, job_id) and not submitted(conn, caller, job_id):
        raise ApiError(ErrorCode.FORBIDDEN, f"token {token_name(caller)!r} may {action} only the jobs it submitted; "
                                            f"{job_id} is not one of them", {"limit": "owner", "job_id": job_id})


def check_run_owner(conn: Connection, caller: Caller | None, run_id: str, action: str) -> None:
    """A limited token may ``action`` (prune) only a run of a job it submitted, or a run its own
    SDK session created.

    Raises:
        ApiError: ``forbidden`` naming the run (``not_found`` is left to the action itself).
    """
    if not limited(caller):
        return
    assert caller is not None
    origin = run_rows.origin(conn, run_id)
    if (origin is None or submitted(conn, caller, origin.job_id)
            or (origin.created_by is not None and origin.created_by == caller.token_id)):
        return
    raise ApiError(ErrorCode.FORBIDDEN, f"token {token_name(caller)!r} may {action} only the runs of jobs it "
                                        f"submitted; run {run_id} is not one of them",
                   {"limit": "owner", "run_id": run_id})


def refuse_node_change(caller: Caller | None, action: str, node: str) -> None:
    """A limited token submits jobs; nodes are no token's, so it may not drain, undrain or forget one.

    Raises:
        ApiError: ``forbidden`` naming the action and the node.
    """
    if limited(caller):
        assert caller is not None
        raise ApiError(ErrorCode.FORBIDDEN, f"token {token_name(caller)!r} has limits, so it may not {action} "
                                            f"node {node}: nodes are changed from the local socket or with a token "
                                            "without limits", {"limit": "nodes", "node": node})
