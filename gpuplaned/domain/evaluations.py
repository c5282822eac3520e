"""How an evaluation ends, and what its command runs (pure: no I/O).

An EVALUATE job's evaluation follows the job: CANCELLED with it, FAILED with it (the job's
failure, in words), and when the job SUCCEEDED, SUCCEEDED only if there are metrics, from its
result file or the SDK's ``run.log_evaluation``; a result file that is not an object of
finite numbers fails it with the reason, even when the SDK logged some.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from gpuplaned.protocol.job_states import JobState
from gpuplaned.protocol.converter import FieldInvalid, check
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.evaluation_wire import (
    EVAL_RESULT_VAR,
    MAX_METRICS,
    PLACEHOLDER,
    EvalResult,
    metrics_fault,
)
from gpuplaned.protocol.fields import field

EVALUATION_FINISHED = "EVALUATION_FINISHED"
MAX_RECORDS = 1000  # log_evaluation calls in one SDK batch (the SDK sends at most as many)
NO_METRICS = (f"no metrics: the job wrote no ${EVAL_RESULT_VAR} file and logged no evaluation "
              "(run.log_evaluation)")


def command_for(command: Sequence[str], checkpoint_path: str) -> list[str]:
    """The evaluation's argv: every ``{checkpoint}`` replaced by the checkpoint's path."""
    return [arg.replace(PLACEHOLDER, checkpoint_path) for arg in command]


@attrs.frozen
class Verdict:
    status: str  # SUCCEEDED, FAILED or CANCELLED
    error: str | None = None
    metrics: Mapping[str, float] = attrs.field(factory=dict)  # to add to what the evaluation holds


def judge(job_state: str, result: EvalResult | None, held: Mapping[str, float], *,
          failure_reason: str | None = None, failure_message: str | None = None) -> Verdict:
    """The evaluation's end, given the job's ended state, what its result file held (None:
    no file) and the metrics the evaluation holds already (the SDK's)."""
    found = dict(result.metrics or {}) if result is not None else {}
    if job_state == JobState.CANCELLED.value:
        return Verdict("CANCELLED", None, found)
    if job_state != JobState.SUCCEEDED.value:
        why = f"the evaluation job failed ({failure_reason or 'unknown'})"
        return Verdict("FAILED", f"{why}: {failure_message}" if failure_message else why, found)
    if result is not None and result.error is not None:
        return Verdict("FAILED", result.error)
    if not found and not held:
        return Verdict("FAILED", NO_METRICS)
    return Verdict("SUCCEEDED", None, found)


@attrs.frozen
class EvaluationRecord:
    """``{"metrics": {name: number}, "ts"?}`` in an SDK batch's ``evaluations``."""

    metrics: dict[str, float] = field(check=metrics_fault)
    ts: int | None = field(default=None, minimum=0, maximum=(1 << 62) - 1, message="a non-negative integer")


def parse_evaluations(items: Any) -> list[EvaluationRecord]:
    """A batch's ``evaluations`` (None: none).

    Raises:
        ApiError: bad_request naming the first bad field (``evaluations[0].metrics.acc``).
    """
    if items is None:
        return []
    if type(items) is not list or len(items) > MAX_RECORDS:
        raise _bad("evaluations", f"a list of at most {MAX_RECORDS} objects")
    out = []
    for i, item in enumerate(items):
        try:
            out.append(check(item, EvaluationRecord))
        except FieldInvalid as fault:
            where = f"evaluations[{i}]" + (f".{fault.field}" if fault.field else "")
            raise _bad(where, fault.message) from None
    return out


def merged(records: Sequence[EvaluationRecord]) -> dict[str, float]:
    """The records' metrics as one object (a later value of a name wins), at most MAX_METRICS."""
    out: dict[str, float] = {}
    for record in records:
        out.update(record.metrics)
    return dict(list(out.items())[:MAX_METRICS])


def _bad(field: str, message: str) -> ApiError:
    return ApiError(ErrorCode.BAD_REQUEST, f"{field}: {message}", {"field": field})
