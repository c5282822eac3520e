"""A capability token's limits, checked on submit, dry run and retry.

``check`` runs inside the submit's (or retry's) own write transaction, so two submits racing
for the last GPU-hours cannot both pass; a refusal raises before anything is written
(``forbidden``, ``details.limit`` the field at fault, and for the budget
``remaining_gpu_hours``). The accounting itself is ``gpuplaned.domain.gpu_budget``.

A limited token's job without ``timeout_s`` gets ``max_job_hours`` as its timeout (so the
reserved worst case is what it can really use); a budgeted token's job with neither is refused.
With ``allowed_dirs`` the job runs in its working directory as resolved and checked.

The pass that stops a spent budget's jobs is ``gpuplaned.service.budget_pass``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import attrs

from gpuplaned.domain import gpu_budget
from gpuplaned.domain.gpu_budget import SubmitFacts, Usage
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.protocol.token_limits import TokenLimits
from gpuplaned.service.registry import now_ms
from gpuplaned.store import budget_rows

if TYPE_CHECKING:
    import sqlite3

    from gpuplaned.service.ui_sessions import Caller


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


def facts(spec: JobSpec) -> SubmitFacts:
    """What the limits read of a job; its directory with symlinks and ``..`` resolved."""
    return SubmitFacts(spec.gpu, spec.node, os.path.realpath(spec.cwd), spec.timeout_s)


def usage(conn: sqlite3.Connection, token_id: str, limits: TokenLimits) -> Usage:
    return gpu_budget.usage(budget_rows.token_jobs(conn, token_id), limits, now_ms())


def refusals(conn: sqlite3.Connection, caller: Caller, job: SubmitFacts) -> tuple[list[gpu_budget.Refusal], Usage]:
    assert caller.limits is not None and caller.token_id is not None
    used = usage(conn, caller.token_id, caller.limits)
    return gpu_budget.check_submit(caller.limits, job, used, token=token_name(caller)), used


def check(conn: sqlite3.Connection, caller: Caller | None, job: SubmitFacts) -> None:
    """Raises:
        ApiError: ``forbidden`` for the first limit the job breaks (all of them in ``details.refusals``).
    """
    if not limited(caller):
        return
    assert caller is not None
    found, _ = refusals(conn, caller, job)
    if found:
        first = found[0]
        raise ApiError(ErrorCode.FORBIDDEN, first.message,
                       {"limit": first.limit, **first.details, "token": token_name(caller),
                        "refusals": [{"limit": r.limit, "message": r.message} for r in found]})


def check_owner(conn: sqlite3.Connection, caller: Caller | None, job_id: str, action: str) -> None:
    """A limited token may cancel or retry only the jobs it submitted.

    Raises:
        ApiError: ``forbidden`` for another's job (``not_found`` is left to the action itself).
    """
    if not limited(caller):
        return
    assert caller is not None
    owner = conn.execute("SELECT token_id FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if owner is not None and owner[0] != caller.token_id:
        raise ApiError(ErrorCode.FORBIDDEN, f"token {token_name(caller)!r} may {action} only the jobs it submitted; "
                                            f"{job_id} is not one of them", {"limit": "owner", "job_id": job_id})
