"""Evaluations on the wire (issue 15): the metrics an EVALUATE job reports, the body that
queues one, and the retry body that resumes from a checkpoint.

An evaluation's metrics are one flat JSON object of names to finite numbers. They come from
the file the job writes at ``$GPUPLANE_EVAL_RESULT`` (read by the node at the attempt's end:
``EvalResult`` travels on the end's ``JobStatus``) or from the SDK's
``run.log_evaluation(metrics)``. ``read_metrics`` is the one reading of such an object, for
both: its fault names the metric in words ("metrics.acc: must be a number, got the string
'high'"), for the evaluation's ``error``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import attrs

from gpuplaned.protocol.converter import FieldInvalid, check
from gpuplaned.protocol.fields import field
from gpuplaned.protocol.job_states import FINISH_STATES

EVAL_CHECKPOINT_VAR = "GPUPLANE_CHECKPOINT"  # the checkpoint's path, for the evaluation job
EVAL_RESULT_VAR = "GPUPLANE_EVAL_RESULT"  # where the node wants the job's result object
RESUME_FROM_VAR = "GPUPLANE_RESUME_FROM"  # the checkpoint's path, for a resumed attempt
RESUME_STEP_VAR = "GPUPLANE_RESUME_STEP"  # its step, when it is known
PLACEHOLDER = "{checkpoint}"  # in an evaluation's command: the checkpoint's path

MAX_RESULT_BYTES = 1 << 20  # the result file; larger is refused unread
MAX_METRICS = 1000
MAX_METRIC_NAME = 200
MAX_ERROR = 2000
EVALUATION_STATES = ("QUEUED", "RUNNING", *FINISH_STATES)
_NO_NUL = "^[^\\x00]*$"


def metrics_fault(metrics: dict[str, float]) -> str | None:
    if len(metrics) > MAX_METRICS:
        return f"at most {MAX_METRICS} metrics, got {len(metrics)}"
    for name, value in metrics.items():
        if not 0 < len(name) <= MAX_METRIC_NAME or "\x00" in name:
            return f"metric names are 1 to {MAX_METRIC_NAME} characters without NUL, got {name[:40]!r}"
        if not math.isfinite(value):
            return f"{name}: must be a finite number, got {value!r}"
    return None


@attrs.frozen
class EvalMetrics:
    """``{"metrics": {name: number}}``: what ``read_metrics`` structures."""

    metrics: dict[str, float] = field(check=metrics_fault)


@attrs.frozen
class EvalResult:
    """What an EVALUATE attempt left in its result file, read by the node at its end: the
    metrics, or why there are none (a file too big, not JSON, not an object of numbers)."""

    metrics: dict[str, float] | None = field(default=None, check=metrics_fault)
    error: str | None = field(default=None, max_length=MAX_ERROR)


class BadMetrics(ValueError):
    """Metrics that cannot be taken; the message says why, in words."""


def read_metrics(data: Any) -> dict[str, float]:
    """``data`` (decoded JSON) as metrics: a flat object of names to finite numbers.

    Raises:
        BadMetrics: naming the first fault.
    """
    if type(data) is not dict:
        raise BadMetrics(f"must be a JSON object of metric names to numbers, got {_kind(data)}")
    try:
        return dict(check({"metrics": data}, EvalMetrics).metrics)
    except FieldInvalid as fault:
        raise BadMetrics(f"{fault.field}: {fault.message}" if fault.field else fault.message) from None


def parse_result(raw: bytes) -> EvalResult:
    """The result file's bytes as an ``EvalResult``: its metrics, or the fault in words."""
    if len(raw) > MAX_RESULT_BYTES:
        return EvalResult(error=f"the result file is over {MAX_RESULT_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return EvalResult(error="the result file is not UTF-8 text")
    except (ValueError, RecursionError) as exc:
        return EvalResult(error=f"the result file is not JSON: {str(exc)[:200]}")
    try:
        return EvalResult(metrics=read_metrics(data))
    except BadMetrics as exc:
        return EvalResult(error=f"the result file: {str(exc)[:MAX_ERROR - 20]}")


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number" if isinstance(value, (int, float)) else type(value).__name__


_TEXT = {"min_length": 1, "max_length": 200, "pattern": _NO_NUL, "message": "a string of 1 to 200 characters"}
_ARGV = {"prefixItems": [{"type": "string", "minLength": 1, "pattern": _NO_NUL}],
         "items": {"type": "string", "pattern": _NO_NUL}}


def _argv(argv: list[str]) -> str | None:
    if not argv[0] or "\x00" in "".join(argv):
        return "every argument must be a string and the program name non-empty, without NUL bytes"
    return None


def _finite_seconds(value: float) -> str | None:
    return None if math.isfinite(value) else f"must be a positive number of seconds, got {value!r}"


def _env_names(env: dict[str, str]) -> str | None:
    for key, value in env.items():
        if not key or "=" in key or "\x00" in key or "\x00" in value:
            return f"bad variable {key!r}"
    return None


@attrs.frozen(kw_only=True)
class EvaluationCreate:
    """``POST /api/v1/checkpoints/{id}/evaluations``: an EVALUATE job for the checkpoint."""

    command: list[str] = field(min_items=1, schema=_ARGV,
                               description="argv; every {checkpoint} is replaced by the checkpoint's path",
                               message='must be a non-empty list of arguments (argv), e.g. ["python", "eval.py", '
                                       '"{checkpoint}"]', check=_argv)
    cwd: str | None = field(default=None, pattern="^/", description="default: the training job's cwd",
                            message="must be an absolute path, got {value!r}")
    env: dict[str, str] = field(factory=dict, check=_env_names,
                                description="the job's variables; GPUPLANE_CHECKPOINT and GPUPLANE_EVAL_RESULT are added")
    gpu: int = field(default=1, minimum=0, maximum=64, description="GPUs to reserve; 0 runs on a CPU slot")
    name: str | None = field(default=None, **_TEXT, description="default: eval-<checkpoint id>")
    suite: str | None = field(default=None, **_TEXT)
    dataset: str | None = field(default=None, **_TEXT)
    dataset_version: str | None = field(default=None, **_TEXT)
    node: str | None = field(default=None, min_length=1, description="run only on this node")
    labels: list[str] = field(factory=list)
    priority: int = field(default=0, minimum=-1_000_000, maximum=1_000_000)
    timeout_s: float | None = field(default=None, exclusive_minimum=0, check=_finite_seconds,
                                    description="kill the evaluation after this long; null: never")


@attrs.frozen(kw_only=True)
class RetryBody:
    """``POST /api/v1/jobs/{id}/retry``: optionally, the checkpoint the next attempt resumes from,
    and whether its cancelled chain of dependants comes back with it."""

    resume_from: str | None = field(default=None, pattern=r"^(best|last|ck_[0-9A-Za-z]{1,64})$",
                                    message="best, last or a checkpoint id (ck_...), got {value!r}",
                                    description="best (by the run's primary metric), last (the newest saved) or a "
                                                "checkpoint id of the job's lineage; the attempt gets "
                                                "GPUPLANE_RESUME_FROM and GPUPLANE_RESUME_STEP")
    with_dependants: bool = field(default=False, description="also queue again, behind it, its dependants (and "
                                                             "theirs) that were cancelled with DEPENDENCY_FAILED")
