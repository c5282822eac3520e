"""The replies about jobs: one job, a page of them, and the log stream's own events."""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.job_states import JobState
from gpuplaned.protocol.job_wire import Job
from gpuplaned.protocol.reply_words import next_cursor_field
from gpuplaned.protocol.submit_plan import SubmitPlan


@attrs.frozen(kw_only=True)
class JobReply:
    job: Job


@attrs.frozen(kw_only=True)
class JobList:
    jobs: list[Job]
    next_cursor: str | None = next_cursor_field()


@attrs.frozen(kw_only=True)
class Lagged:
    skipped: int = doc(minimum=1)


@attrs.frozen(kw_only=True)
class LogEnd:
    status: str = doc("RETRIED: a later attempt has begun", enum=(*(state.value for state in JobState), "RETRIED"))
    attempt: int = doc(minimum=0)
    exit_code: int | None
    failure_reason: str | None


@attrs.frozen(kw_only=True)
class SubmitPlanReply:
    plan: SubmitPlan
