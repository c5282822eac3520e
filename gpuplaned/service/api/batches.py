"""Batch submit (``POST /api/v1/jobs:batch``): many jobs in one request and one transaction,
all of them queued or none.

Each entry goes through a single submit's admission (``gpuplaned.service.api.jobs.submit``):
the body's validation, a limited token's limits and budget (``gpuplaned.service.api.budgets``),
its dependencies (``after``: jobs that exist already; an entry cannot name another entry of
the same batch, whose id it does not know yet), and the queue's admission
(``gpuplaned.domain.queue.admit``, inside ``job_rows.insert_job``). Every entry is looked at
even after one is refused, so the refusal names them all (``details.refused``: index, field,
code, message), and the transaction is rolled back: nothing is written.

A budgeted token's batch must fit its budget together: each entry is checked against the
token's usage plus the worst case of the entries admitted before it, in the one transaction,
so neither a batch nor a submit racing it can overrun.

An ``Idempotency-Key`` works as on every POST (``gpuplaned.http.idempotency``): a repeat gets
the first reply, and no second set of jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs

from gpuplaned.domain import gpu_budget
from gpuplaned.domain.gpu_budget import Usage
from gpuplaned.protocol.batch_wire import BatchRefusal, BatchSubmit
from gpuplaned.protocol.converter import structure
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.job_wire import Job, JobSpec, JobSubmit, to_spec
from gpuplaned.protocol.token_limits import TokenLimits
from gpuplaned.service.api import budgets
from gpuplaned.service.link.registry import now_ms
from gpuplaned.service.passes.dispatch import change_queue
from gpuplaned.service.sealing import seal_env
from gpuplaned.store import dependency_rows, group_rows, job_rows

if TYPE_CHECKING:
    from gpuplaned.service.api.ui_sessions import Caller
    from gpuplaned.service.context import ServerContext
    from gpuplaned.store.connection import Connection


@attrs.frozen
class Entry:
    """One job to admit: its place in the request, its body (group, after) and its spec."""

    index: int
    body: JobSubmit
    spec: JobSpec


# Called in the transaction once an entry's job is inserted (a sweep marks its trial).
Placed = Callable[["Connection", str, Entry], None]


async def submit_many(shared: ServerContext, batch: BatchSubmit, *, caller: Caller | None = None) -> list[Job]:
    """Queue every job of ``batch``, in its order, or none; the scheduler is woken once, after
    the commit.

    Raises:
        ApiError: naming every refused entry in ``details.refused``; ``forbidden`` when each of
            them broke a token's limit, else ``bad_request``. Nothing is written then.
    """
    entries, refused = _parse(shared, batch.jobs, caller)

    def insert(conn: Connection) -> list[Job]:
        ids, remaining = admit(shared, conn, entries, caller, refused)
        if refused:  # raised inside the write: its transaction is rolled back
            raise refusal(refused, len(batch.jobs), remaining)
        return [job for job in (job_rows.get_job(conn, job_id) for job_id in ids) if job is not None]

    return await change_queue(shared, insert)  # one pass for the lot places as many as fit


def _parse(shared: ServerContext, raw: list[Any], caller: Caller | None) -> tuple[list[Entry], list[BatchRefusal]]:
    """Each entry as a single submit reads its body; the bad ones as refusals, all of them."""
    entries: list[Entry] = []
    refused: list[BatchRefusal] = []
    for index, item in enumerate(raw):
        try:
            body = structure(item, JobSubmit, what=f"jobs[{index}]")
        except ApiError as exc:
            refused.append(_refused(index, exc))
            continue
        entries.append(Entry(index, body, spec_of(shared, body, caller)))
    return entries, refused


def spec_of(shared: ServerContext, body: JobSubmit, caller: Caller | None) -> JobSpec:
    """The job a single submit of ``body`` makes: shaped by the caller's limits, its secret env sealed."""
    spec = budgets.shaped(to_spec(body), caller)
    if body.secret_env:
        spec = attrs.evolve(spec, secret_env_names=tuple(body.secret_env),
                            secret_env_sealed=seal_env(shared.config.home, body.secret_env))
    return spec


def admit(shared: ServerContext, conn: Connection, entries: Iterable[Entry], caller: Caller | None,
          refused: list[BatchRefusal], placed: Placed | None = None) -> tuple[list[str], float | None]:
    """Insert each entry that passes, as a single submit would (its limits counted with the
    entries before it, its group, its dependencies); ``placed`` is called for each job inserted.
    A refused one is added to ``refused`` and the rest go on (the caller rolls it all back).
    Returns the ids inserted and, for a budgeted token, the GPU-hours it had left before them
    (None: no budget)."""
    token_id = caller.token_id if caller is not None else None
    limits = caller.limits if budgets.limited(caller) else None
    used = budgets.usage(conn, token_id, limits) if token_id is not None and limits is not None else None
    remaining = (max(0.0, limits.gpu_hours - used.committed_gpu_hours)
                 if limits is not None and used is not None and limits.gpu_hours is not None else None)
    nodes = job_rows.capacities(conn, shared.nodes.connected(), shared.nodes.snapshots())
    now = now_ms()
    ids: list[str] = []
    for entry in entries:
        try:
            if caller is not None and limits is not None and used is not None:
                _check_limits(caller, limits, entry.spec, used)
            job_id = job_rows.insert_job(conn, entry.spec, now, nodes, token_id)
            if entry.body.group is not None:  # as a single submit's (gpuplaned.service.api.jobs.submit)
                group_rows.put_in_group(conn, job_id, entry.body.group)
            if entry.body.after is not None:
                dependency_rows.attach(conn, job_id, entry.body.after.ids, entry.body.after.when, now)
            if placed is not None:
                placed(conn, job_id, entry)
        except ApiError as exc:
            refused.append(_refused(entry.index, exc))
            continue
        ids.append(job_id)
        if limits is not None and used is not None:
            used = _with(used, entry.spec, limits)
    return ids, remaining


def _check_limits(caller: Caller, limits: TokenLimits, spec: JobSpec, used: Usage) -> None:
    """``budgets.check`` against the usage so far of this batch, not only of the stored jobs.

    Raises:
        ApiError: ``forbidden`` for the first limit the entry breaks.
    """
    found = gpu_budget.check_submit(limits, budgets.facts(spec), used, token=budgets.token_name(caller))
    if found:
        raise ApiError(ErrorCode.FORBIDDEN, found[0].message, {"limit": found[0].limit, **found[0].details})


def _with(used: Usage, spec: JobSpec, limits: TokenLimits) -> Usage:
    """The token's usage once this queued job is counted: open, and its worst case reserved
    (as ``gpu_budget.job_reserved_gpu_hours`` counts a job not started)."""
    hours = gpu_budget.job_hours(spec.timeout_s, limits) or 0.0
    return Usage(used.used_gpu_hours, used.committed_gpu_hours + spec.gpu * hours, used.open_jobs + 1)


def _refused(index: int, exc: ApiError) -> BatchRefusal:
    field = exc.details.get("field")
    if isinstance(field, str) and field.startswith(f"jobs[{index}]."):
        field = field.removeprefix(f"jobs[{index}].")
    limit = exc.details.get("limit")
    return BatchRefusal(index=index, field=field if isinstance(field, str) else None, code=exc.code.value,
                        limit=limit if isinstance(limit, str) else None, message=exc.message)


def refusal(refused: list[BatchRefusal], total: int, remaining: float | None, what: str = "jobs") -> ApiError:
    """The one error for a refused batch (or sweep: ``what`` is "trials"), naming every entry."""
    refused.sort(key=lambda r: r.index)
    code = ErrorCode.FORBIDDEN if all(r.code == ErrorCode.FORBIDDEN.value for r in refused) else ErrorCode.BAD_REQUEST
    first = refused[0]
    details: dict[str, Any] = {"refused": [attrs.asdict(r) for r in refused], "count": len(refused)}
    if remaining is not None and any(r.limit == "budget" for r in refused):
        details["remaining_gpu_hours"] = round(remaining, 6)
    noun = "job(s)" if what == "jobs" else "trial(s)"
    return ApiError(code, f"{len(refused)} of {total} {noun} refused, so none was queued; the first, "
                          f"{what}[{first.index}]: {first.message}", details)
