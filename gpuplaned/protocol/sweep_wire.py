"""Sweeps on the wire (issue 31 item 3): ``POST /api/v1/sweeps``'s body, and a sweep as list and
show give it.

The parameters (``grid``, ``random``, ``trials_list``) are kept as raw JSON here and checked by
``gpuplaned.domain.sweeps``, whose errors name the field at fault (``grid.lr``).
"""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.protocol.converter import FieldInvalid
from gpuplaned.protocol.fields import doc, field
from gpuplaned.protocol.group_wire import GROUP_MESSAGE, GROUP_PATTERN, MAX_PARALLEL
from gpuplaned.protocol.job_wire import JobSubmit

MAX_TRIALS = 10_000  # as gpuplaned.domain.sweeps.MAX_TRIALS and a batch's bound
SWEEP_NAME_PATTERN = GROUP_PATTERN
SWEEP_NAME_MESSAGE = GROUP_MESSAGE
GOALS = ("min", "max")
EARLY_STOP_RULES = ("median", "asha")
RETRY_CAUSES = ("OOM", "PREEMPTED", "LOST")
SWEEP_STATES = ("QUEUED", "RUNNING", "PAUSED", "SUCCEEDED", "FAILED", "CANCELLED", "DONE")
KINDS = ("grid", "random", "list")
_SCALAR = {"type": ["string", "number", "boolean"]}
_VALUES = {"additionalProperties": _SCALAR}


@attrs.frozen(kw_only=True)
class EarlyStop:
    """Stop a trial whose primary metric falls behind the others (gpuplaned.domain.early_stopping)."""

    rule: str = field(enum=EARLY_STOP_RULES, description="median: stop a trial worse than the median of the others "
                                                         "at the same step; asha: successive halving at rungs")
    min_steps: int = field(default=0, minimum=0, maximum=1 << 40, description="no judging before this step")
    grace_s: float = field(default=0.0, minimum=0, maximum=365 * 86400,
                           description="no judging a trial in its first S seconds of running")


@attrs.frozen(kw_only=True)
class RetryOn:
    """Queue a trial again after a failure of one of ``causes``, up to ``times``; any other failure is final."""

    causes: list[str] = field(min_items=1, max_items=len(RETRY_CAUSES), items={"enum": RETRY_CAUSES},
                              description="OOM, PREEMPTED (killed from outside), LOST")
    times: int = field(default=1, minimum=1, maximum=100, description="at most this many retries per trial")


def _one_kind(body: SweepSubmit) -> None:
    given = [k for k in ("grid", "random", "trials_list") if getattr(body, k) is not None]
    if len(given) != 1:
        raise FieldInvalid("grid", "give exactly one of grid, random (with trials) or trials_list"
                           + (f", not {' and '.join(given)}" if given else ""))
    if body.random is None and body.trials is not None:
        raise FieldInvalid("trials", "trials is the number of a random sweep's trials; a grid or list has its own")
    if body.random is not None and body.trials is None:
        raise FieldInvalid("trials", "a random sweep needs its number of trials")


@attrs.frozen(kw_only=True)
class SweepSubmit:
    """A sweep to make: trials of ``job`` over the parameters, each an ordinary job.

    A sweep with the ``name`` of one not cancelled, and the same ``job``, gets only the trials
    whose values are new (none when all exist); another ``job`` under that name is refused (409).
    """

    name: str | None = field(default=None, pattern=SWEEP_NAME_PATTERN, message=SWEEP_NAME_MESSAGE,
                             description="the sweep's name; trials are named NAME-0, NAME-1... Default: the "
                                         "program's base name and a digest of the job, so the same job twice is "
                                         "the same sweep")
    job: JobSubmit = field(description="the job every trial is made from, as POST /api/v1/jobs takes it (without "
                                       "name); {NAME} in an argument becomes the trial's value of parameter NAME")
    grid: dict[str, Any] | None = field(default=None, description="name -> its values: every combination is a "
                                                                  "trial (the first name varies slowest)",
                                        schema={"additionalProperties": {"type": "array", "items": _SCALAR,
                                                                         "minItems": 1}})
    random: dict[str, Any] | None = field(default=None, description="name -> a distribution: uniform:LO:HI, "
                                                                    "log:LO:HI, int:LO:HI or choice:A,B,...",
                                          schema={"additionalProperties": {"type": "string"}})
    trials: int | None = field(default=None, minimum=1, maximum=MAX_TRIALS,
                               description="a random sweep's number of trials")
    seed: int = field(default=0, minimum=0, maximum=(1 << 63) - 1,
                      description="a random sweep's seed: the same seed draws the same trials")
    trials_list: list[dict[str, Any]] | None = field(default=None, min_items=1, max_items=MAX_TRIALS,
                                                     description="the trials' values, one object each",
                                                     schema={"items": {"type": "object", **_VALUES}})
    max_parallel: int | None = field(default=None, minimum=1, maximum=MAX_PARALLEL,
                                     description="at most this many trials run at once (Slurm's %K); null: no limit")
    metric: str | None = field(default=None, min_length=1, max_length=200,
                               description="the primary metric: each trial's best and the sweep's best combination "
                                           "are judged on it")
    goal: str = field(default="min", enum=GOALS, description="whether the metric's lowest or highest value is best")
    experiment: str | None = field(default=None, min_length=1, max_length=200,
                                   description="the experiment (in the default project) the trials' runs land in; "
                                               "default: one named after the sweep")
    early_stop: EarlyStop | None = field(default=None, description="stop trials that fall behind (opt-in)")
    retry_on: RetryOn | None = field(default=None, description="retry trials that fail for these causes only")
    dry_run: bool = field(default=False, description="write nothing: the reply shows the trials the sweep would "
                                                     "make and its worst-case GPU-hours")

    __schema__ = {"anyOf": [{"required": ["grid"]}, {"required": ["random", "trials"]},
                            {"required": ["trials_list"]}]}

    def __attrs_post_init__(self) -> None:
        _one_kind(self)
        if self.job.name is not None:
            raise FieldInvalid("job.name", "a trial's name is the sweep's name and its number: name the sweep instead")


@attrs.frozen(kw_only=True)
class SweepCounts:
    total: int = doc("its trials", minimum=0)
    queued: int = doc(minimum=0)
    running: int = doc("on a node: DISPATCHING, RUNNING or LOST", minimum=0)
    succeeded: int = doc(minimum=0)
    failed: int = doc(minimum=0)
    cancelled: int = doc(minimum=0)


@attrs.frozen(kw_only=True)
class SweepBest:
    """The trial with the best value of the sweep's metric so far."""

    trial: int
    job_id: str
    values: dict[str, Any] = doc("parameter name -> value", additionalProperties=_SCALAR)
    value: float = doc("its best value of the metric")
    step: int | None = doc("the step of that value")


@attrs.frozen(kw_only=True)
class Sweep:
    id: str = doc("swp_<ULID>")
    name: str
    kind: str = doc(enum=KINDS)
    status: str = doc("from its trials: QUEUED, RUNNING, SUCCEEDED (all did), FAILED (none did), DONE (some did); "
                      "PAUSED while paused with trials left; CANCELLED", enum=SWEEP_STATES)
    counts: SweepCounts
    parameters: dict[str, Any] = doc("the spec as submitted: grid, random with trials and seed, or trials_list")
    command: list[str] = doc("its job's argv, with the {NAME} placeholders")
    max_parallel: int | None = doc("at most this many trials run at once; null: no limit")
    paused: bool
    pause_reason: str | None = doc("why it is paused: paused by user, or 3 trials failed within their first minute")
    metric: str | None
    goal: str = doc(enum=GOALS)
    early_stop: EarlyStop | None
    retry_on: RetryOn | None
    experiment: str | None = doc("the experiment its trials' runs land in (its name)")
    experiment_id: str | None
    created_at: int = doc("ms since the epoch")
    cancelled_at: int | None = doc("ms since the epoch")
    best: SweepBest | None = doc("the best combination so far; null: no metric named, or no point of it yet")


@attrs.frozen(kw_only=True)
class SweepTrial:
    trial: int = doc("its number in the sweep, from 0", minimum=0)
    job_id: str
    status: str
    values: dict[str, Any] = doc("parameter name -> value", additionalProperties=_SCALAR)
    attempt: int = doc(minimum=0)
    run_id: str | None
    best: float | None = doc("its run's best value of the sweep's metric so far")
    step_of_best: int | None
    failure_reason: str | None
    queue_reason: str | None = doc("while QUEUED: why it waits (sweep max-parallel 4 reached, sweep NAME paused...)")


@attrs.frozen(kw_only=True)
class SweepDetail(Sweep):
    trials: list[SweepTrial] = doc("every trial, by number")


@attrs.frozen(kw_only=True)
class PlannedTrial:
    trial: int
    values: dict[str, Any] = doc("parameter name -> value", additionalProperties=_SCALAR)
    command: list[str]
    exists: bool = doc("a trial with these values exists already: it would not be made again")


@attrs.frozen(kw_only=True)
class SweepSubmitted:
    sweep: Sweep | None = doc("the sweep (null for a dry run of a new sweep)")
    created: int = doc("trials made by this submit (for a dry run: that it would make)", minimum=0)
    existing: int = doc("trials whose values the sweep had already: not made again", minimum=0)
    worst_case_gpu_hours: float | None = doc("trials made x GPUs x timeout_s / 3600; null: no timeout")
    dry_run: bool
    planned: list[PlannedTrial] = doc("for a dry run: each trial it would have", factory=list)


@attrs.frozen(kw_only=True)
class SweepList:
    sweeps: list[Sweep] = doc("newest first")


@attrs.frozen(kw_only=True)
class SweepReply:
    sweep: Sweep


@attrs.frozen(kw_only=True)
class SweepPatch:
    """A change of a sweep's settings while it runs."""

    max_parallel: int | None = field(minimum=1, maximum=MAX_PARALLEL,
                                     description="at most this many trials run at once; null: no limit. Queued "
                                                 "trials follow it at the next scheduling pass; a Slurm node applies "
                                                 "it to the sweep's array jobs (scontrol update ArrayTaskThrottle)")


@attrs.frozen(kw_only=True)
class SweepShown:
    sweep: SweepDetail
