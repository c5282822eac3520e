"""Task handles: long work (a job) returned at once, with how and how often to poll it.

A task is its job: the task id is the job id, and every state lives in the daemon, so a
handle survives the client, the connection and a daemon restart. ``pollIntervalMs`` is short
while the job is queued or just started (something will change soon), longer for a long run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuplaned.mcp.table import TaskHandle, next_action
from gpuplaned.protocol.job_states import OPEN, JobState
from gpuplaned.protocol.run_replies import RunSummary
from gpuplaned.service.api import jobs, runs
from gpuplaned.service.link.registry import now_ms

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

QUICK_MS = 5_000
SLOW_MS = 30_000
SETTLING_MS = 60_000  # a run younger than this is "just started"

# An open job's task is working (a LOST one too: its node may yet tell how it ended), an ended one's is over.
TASK_STATUS = {**{state.value: "working" for state in OPEN},
               JobState.SUCCEEDED.value: "completed", JobState.FAILED.value: "failed",
               JobState.CANCELLED.value: "cancelled"}


def _loss(summary: RunSummary) -> tuple[str, float] | None:
    metrics = summary.metrics
    primary = summary.primary_metric
    names = [primary.name] if primary is not None and primary.name in metrics else []
    names += sorted(n for n in metrics if "loss" in n.lower())
    for name in names:
        value = ((metrics.get(name) or {}).get("latest") or {}).get("value")
        if isinstance(value, (int, float)):
            return name, float(value)
    return None


def describe_progress(summary: RunSummary) -> str:
    """Step, loss and ETA of a run's summary, in one sentence."""
    progress = summary.progress
    parts = [f"run {summary.run_id}"]
    step, total = progress.step, progress.max_steps
    if step is not None:
        parts.append(f"step {step}" + (f"/{total}" if total else ""))
    else:
        parts.append("no step logged yet")
    loss = _loss(summary)
    if loss is not None:
        parts.append(f"{loss[0]} {loss[1]:.4g}")
    if progress.eta_s is not None:
        parts.append(f"ETA {round(progress.eta_s)} s")
    if summary.health:
        parts.append(f"{len(summary.health)} health warning(s): {summary.health[0].type}")
    text = ", ".join(parts)
    return text[0].upper() + text[1:] + "."


def poll_interval_ms(job: Any, now_ms: int) -> int:
    if job.status != "RUNNING" or job.started_at is None or now_ms - job.started_at < SETTLING_MS:
        return QUICK_MS
    return SLOW_MS


async def status_message(shared: ServerContext, job: Any) -> str:
    if job.status == "RUNNING" and job.run_id:
        try:
            return describe_progress(await runs.get_summary(shared, job.run_id))
        except Exception:  # a summary not written yet must not fail the handle
            return f"Running (attempt {job.attempt})."
    if job.failure_reason:
        return f"{job.status}: {job.failure_reason}" + (f" ({job.failure_message})" if job.failure_message else "")
    return job.status.capitalize() + "."


async def handle_for(shared: ServerContext, job: Any) -> TaskHandle:

    poll = [next_action("get_job", "its state", job_id=job.id),
            next_action("wait_for_events", "be woken when it ends", job_id=job.id,
                        types=["RUN_FINISHED", "JOB_FAILED", "JOB_TIMEOUT", "OOM"], timeout_s=45)]
    if job.run_id:
        poll.insert(1, next_action("get_run_summary", "step, loss, ETA", run_id=job.run_id))
    return TaskHandle(task_id=job.id, job_id=job.id, status=job.status, task_status=TASK_STATUS.get(job.status, "working"),
                      status_message=await status_message(shared, job), poll_interval_ms=poll_interval_ms(job, now_ms()),
                      poll=poll)


async def handle_of(shared: ServerContext, job_id: str) -> TaskHandle:
    return await handle_for(shared, await jobs.get_job(shared, job_id))
