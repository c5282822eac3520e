"""The budget pass: stop the jobs of every capability token whose GPU-hour budget is spent.

Run every ``[tokens] budget_interval_s`` by the policies actor. Charged GPU-hours come from the
attempts' start and end times (``gpuplaned.domain.gpu_budget``), so a running job is charged as
it runs. Each job not ended of a spent token (queued ones too: they would only start to be
stopped) is cancelled through ``gpuplaned.service.api.jobs.cancel`` and gets a ``BUDGET_EXHAUSTED``
event naming the token, its budget and what was used. A job asked to stop is not listed again
(``cancel_requested``), so each gets one event.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs

from gpuplaned.domain import gpu_budget
from gpuplaned.domain.gpu_budget import BUDGET_EXHAUSTED
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.ids import new_id
from gpuplaned.service import access
from gpuplaned.service.api import jobs
from gpuplaned.service.link.registry import now_ms
from gpuplaned.store import budget_rows, token_rows
from gpuplaned.store.connection import Connection
from gpuplaned.store.event_rows import EventRow

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.budgets")


@attrs.frozen
class Spent:
    token_id: str
    name: str
    budget: float
    used: float
    job_ids: tuple[str, ...]


def _spent(conn: Connection, now: int) -> list[Spent]:
    out = []
    for row in token_rows.budgeted_tokens(conn):
        assert row.limits is not None and row.limits.gpu_hours is not None
        used = gpu_budget.usage(budget_rows.token_jobs(conn, row.id), row.limits, now).used_gpu_hours
        if gpu_budget.spent(row.limits, used):
            jobs = budget_rows.open_jobs(conn, row.id)
            if jobs:
                out.append(Spent(row.id, row.name, row.limits.gpu_hours, used, tuple(jobs)))
    return out


async def enforce(shared: ServerContext) -> int:
    """Stop the jobs of every token whose budget is spent; the number of jobs asked to stop."""
    found = await access.readers(shared, "budgets").run(lambda conn: _spent(conn, now_ms()))
    stopped = 0
    for spent in found:
        for job_id in spent.job_ids:
            try:
                await jobs.cancel(shared, job_id, because=_event(spent, job_id))  # published by cancel
            except ApiError as error:
                if error.code is not ErrorCode.CONFLICT:  # ended meanwhile: nothing to stop
                    log.warning("could not stop job %s of token %s: %s", job_id, spent.name, error)
                continue
            stopped += 1
            log.info("stopped job %s: token %s spent its budget (%.4g of %g GPU-hours)", job_id, spent.name,
                     spent.used, spent.budget)
    return stopped


def _event(spent: Spent, job_id: str) -> EventRow:
    return EventRow(new_id("ev"), now_ms(), BUDGET_EXHAUSTED, "warning", None, job_id, None, None,
                     f"token {spent.name!r} used {spent.used:.4g} of its {spent.budget:g} GPU-hour budget: "
                     "job stopped", {"token_id": spent.token_id, "token": spent.name, "budget_gpu_hours": spent.budget,
                                     "used_gpu_hours": round(spent.used, 6)})
