"""RUN_STARTED and RUN_FINISHED: a run's start and end, once each, for notifications and
event hooks ("tell me when it finishes").

Pure: the wording from the run's row. Both are info, whatever the run's status: they say
that something happened, and what went wrong has its own event at its own severity
(JOB_FAILED, OOM, JOB_TIMEOUT, LOSS_NAN...), so a run that fails is not counted twice as a
warning. The detector finds the runs that started
or ended since its last look (``gpuplaned.service.passes.detector.lifecycle_pass``); each event is
raised once per run (the events table is the episode's memory). Imported runs are history
and raise neither.
"""

from __future__ import annotations

from typing import Any

RUN_STARTED = "RUN_STARTED"
RUN_FINISHED = "RUN_FINISHED"


def started(run_id: str, name: str | None, job_id: str | None) -> tuple[str, str]:
    what = f"run {run_id}" + (f" ({name})" if name else "")
    return "info", f"{what} started" + (f" under job {job_id}" if job_id else "")


def finished(run_id: str, name: str | None, status: str, started_at: int | None, finished_at: int,
             failure_reason: str | None) -> tuple[str, str, dict[str, Any]]:
    """``(severity, message, context)``: always info (the failure has its own event)."""
    what = f"run {run_id}" + (f" ({name})" if name else "")
    took = None if started_at is None else max(0, finished_at - started_at)
    message = f"{what} finished: {status}" + (f" ({failure_reason})" if failure_reason else "")
    if took is not None:
        message += f" after {took / 60000:.1f} min"
    return "info", message, {"status": status, "failure_reason": failure_reason, "duration_ms": took}
