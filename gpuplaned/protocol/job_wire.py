"""Job submissions and job views on the wire, and the validation of a submission.

``JobSubmit`` is the ``POST /api/v1/jobs`` body: structured by the one converter, a bad
submission is an ``ApiError`` (400 ``bad_request``) whose message and ``details.field`` name
the problem; nothing is created. Its bounds are declared with its fields, for its validators
and the OpenAPI document alike.
"""

from __future__ import annotations

import math
import os
from typing import Any
import attrs

from gpuplaned.protocol.converter import FieldInvalid
from gpuplaned.protocol.fields import UNSET, doc, field
from gpuplaned.protocol.group_wire import GROUP_MESSAGE, GROUP_PATTERN
from gpuplaned.protocol.job_policies import (
    EvaluatePolicy,
    JobPolicies,
    OomPolicy,
    PreemptedPolicy,
    RetentionPolicy,
    StalledPolicy,
    env_refusal,
)
from gpuplaned.protocol.job_states import AfterCondition, FailureReason, JobState, signal_failure
from gpuplaned.protocol.vocabulary import PLACEMENTS

JOB_TYPES = ("TRAIN", "EVALUATE", "INFERENCE", "EXPORT", "CUSTOM")
AFTER_CONDITIONS = tuple(c.value for c in AfterCondition)
MAX_DEPENDENCIES = 1000
DEFAULT_STOP_GRACE_S = 10.0
MAX_PRIORITY = 1_000_000


@attrs.frozen
class JobSpec:
    name: str
    command: tuple[str, ...]
    cwd: str
    env: dict[str, str]
    gpu: int = 1
    labels: tuple[str, ...] = ()
    node: str | None = None
    priority: int = 0
    max_attempts: int = 1
    timeout_s: float | None = None
    stop_grace_s: float = DEFAULT_STOP_GRACE_S
    type: str = "TRAIN"
    policies: JobPolicies = JobPolicies()
    gpu_model: str | None = None
    min_gpu_memory_mb: int | None = None
    placement: str | None = None
    # The secret env, sealed by the service (gpuplaned.service.sealing) before it is stored, and
    # its names; ``to_spec`` leaves both empty.
    secret_env_names: tuple[str, ...] = ()
    secret_env_sealed: str | None = None


_MS = "ms since the epoch"
# A job's failure reasons (REQUEUED is a run's only: the job itself went back to the queue).
_FAILURES = ", ".join(reason.value for reason in FailureReason if reason is not FailureReason.REQUEUED)


@attrs.frozen
class JobLink:
    """A job another one depends on, or one that depends on it, with its status now."""

    job_id: str = doc("job_<ULID>")
    status: JobState = attrs.field(converter=JobState)


@attrs.frozen
class Job:
    id: str = doc("job_<ULID>")
    name: str
    type: str = doc(enum=JOB_TYPES)
    status: JobState = attrs.field(converter=JobState)  # a string not in it is refused
    priority: int
    command: list[str]
    cwd: str | None
    env: dict[str, str | None] = doc("name -> value; null where the value is not shown: in lists, to read-only "
                                     "callers, and always for names with a word such as PASS, PASSWORD, AUTH, "
                                     "TOKEN, KEY, SECRET or CREDENTIAL (gpuplaned.domain.secret_values); a URL's "
                                     "password shows as ***")
    gpu: int = doc(minimum=0)
    labels: list[str]
    node: str | None = doc("the selector: run only on this node")
    node_id: str | None = doc("where the job was dispatched")
    attempt: int = doc("0 until the first dispatch", minimum=0)
    max_attempts: int = doc(minimum=1)
    timeout_s: float | None
    stop_grace_s: float
    run_id: str | None
    gpu_indexes: list[int]
    created_at: int = doc(_MS)
    started_at: int | None = doc(_MS)
    finished_at: int | None = doc(_MS)
    exit_code: int | None
    failure_reason: str | None = doc(f"a code: {_FAILURES}, or {signal_failure('SIGSEGV')} for a signal")
    failure_message: str | None = doc("why it failed, in words")
    cancel_requested: bool
    retention: RetentionPolicy | None = doc("keep the best K and last K checkpoints; null: keep all")
    evaluate: EvaluatePolicy | None = doc("queue an evaluation of each new (or each new best) checkpoint")
    resume_from: str | None = doc("the checkpoint its next attempts resume from (job retry --resume-from)",
                                  default=None)
    on_oom: OomPolicy | None = doc("retry after an out-of-memory failure, halving variables", default=None)
    on_nan: str | None = doc("stop: SIGTERM the job when its loss turns NaN", default=None)
    on_lost: str | None = doc("requeue: queue a lost job again", default=None)
    on_stalled: StalledPolicy | None = doc("what to do when the run stalls", default=None)
    on_preempted: PreemptedPolicy | None = doc("requeue a job killed from outside, resuming", default=None)
    gpu_model: str | None = doc("every GPU it gets has a model containing this (any case)", default=None)
    min_gpu_memory_mb: int | None = doc("every GPU it gets has at least this much memory (MiB)", default=None)
    placement: str | None = doc("pack or spread; null: the daemon's [scheduler] placement", enum=PLACEMENTS,
                                default=None)
    queue_reason: str | None = doc("while QUEUED: the dependencies it waits for (after job_... (RUNNING)), why "
                                   "no node can take it whatever frees up (the selector or constraint no node "
                                   "meets, every node that could run it drained), its group, sweep or the queue "
                                   "holding it, or the GPU no job holds that takes none for now (GPU 1: foreign "
                                   "process 4 GiB (pid 123)); null: it waits for a free slot, or is not queued",
                                   default=None)
    wait_reason: str | None = doc("while DISPATCHING: why its node's runner has not started it yet, in the runner's "
                                  "words (Slurm: Resources, Slurm: Priority); null: it is not waiting so",
                                  default=None)
    secret_env: list[str] = doc("the names of its secret env (--secret-env, [secrets]); their values are "
                                "never shown", factory=list)
    after: str | None = doc("when it may run after its dependencies: succeeded (every one SUCCEEDED), ended (every "
                            "one ended) or failed (every one ended, one not SUCCEEDED); null: it has none",
                            enum=AFTER_CONDITIONS, default=None)
    dependencies: list[JobLink] = doc("the jobs it waits for (submit --after), with their status", factory=list)
    dependants: list[JobLink] = doc("the jobs that wait for it, with their status", factory=list)
    group: str | None = doc("its group (submit --group), whose parallel limit and pause hold it back; null: "
                            "the default group", default=None)
    sweep_id: str | None = doc("the sweep it is a trial of (swp_...); null: none", default=None)
    sweep_trial: int | None = doc("its trial number in that sweep, from 0", default=None)
    sweep_values: dict[str, Any] | None = doc("the trial's parameter values (name -> value)", default=None,
                                              additionalProperties={"type": ["string", "number", "boolean"]})


def _argv(command: list[str]) -> str | None:
    if not command[0] or "\x00" in "".join(command):
        return "every argument must be a string and the program name non-empty, without NUL bytes"
    return None


def _env_names(env: dict[str, str]) -> str | None:
    for key, value in env.items():
        if not key or "=" in key or "\x00" in key:
            return f"bad variable name {key!r}"
        if "\x00" in value:  # exec cannot pass it: the job could never start
            return f"the value of {key} contains a NUL byte"
    return None


def _finite(value: float) -> str | None:
    return None if math.isfinite(value) else f"must be a positive number of seconds, got {value!r}"


@attrs.frozen(kw_only=True)
class JobAfter:
    """A job's dependencies: it stays queued until they have ended. One that can never run (a
    dependency FAILED or CANCELLED under succeeded; all SUCCEEDED under failed) is CANCELLED with
    failure reason DEPENDENCY_FAILED, and so are its own dependants."""

    ids: list[str] = field(min_items=1, max_items=MAX_DEPENDENCIES, items={"pattern": "^job_[0-9A-Za-z]{1,64}$"},
                           message="must be one or more job ids (job_...), got {value!r}",
                           description="the jobs it depends on (each must exist)")
    when: str = field(default=AfterCondition.SUCCEEDED.value, enum=AFTER_CONDITIONS,
                      description="succeeded: run once every one SUCCEEDED (--after); ended: once every one ended, "
                                  "whatever the outcome (--after-any); failed: once every one ended, if one did not "
                                  "succeed (--after-failed)")


_SECONDS = {"exclusive_minimum": 0, "message": "must be a positive number of seconds, got {value!r}", "check": _finite}
_NO_NUL = "^[^\\x00]*$"
_DIRECTORY = "an existing absolute directory"
_ABSOLUTE = "must be an absolute path, got {value!r}"


@attrs.frozen(kw_only=True)
class JobSubmit:
    """A job to queue. Unknown fields are refused; cwd (or its alias dir) is required."""

    command: list[str] = field(min_items=1, description="argv; no shell unless you write sh -c", check=_argv,
                               message='must be a non-empty list of arguments (argv), e.g. ["python", "train.py"]',
                               schema={"prefixItems": [{"type": "string", "minLength": 1, "pattern": _NO_NUL}],
                                       "items": {"type": "string", "pattern": _NO_NUL}})
    cwd: str = field(default=UNSET, pattern="^/", description=_DIRECTORY, message=_ABSOLUTE)
    dir: str = field(default=UNSET, pattern="^/", description="alias of cwd", message=_ABSOLUTE)
    env: dict[str, str] = field(factory=dict, check=_env_names,
                                schema={"propertyNames": {"minLength": 1, "pattern": "^[^=\\x00]*$"},
                                        "additionalProperties": {"type": "string", "pattern": _NO_NUL}})
    secret_env: dict[str, str] = field(factory=dict, check=_env_names,
                                       description="variables only the job's process gets: sealed at rest, never "
                                                   "shown (names only) nor audited",
                                       schema={"propertyNames": {"minLength": 1, "pattern": "^[^=\\x00]*$"},
                                               "additionalProperties": {"type": "string", "pattern": _NO_NUL}})
    name: str | None = field(default=None, max_length=200, description="default: the program's base name",
                             message="must be a string of at most 200 characters")
    type: str = field(default="TRAIN", enum=JOB_TYPES)
    gpu: int = field(default=1, minimum=0, maximum=64, description="GPUs to reserve; 0 runs on a CPU slot")
    gpus: int = field(default=UNSET, minimum=0, maximum=64, description="alias of gpu")
    labels: list[str] = field(factory=list)
    node: str | None = field(default=None, min_length=1, description="run only on this node",
                             message="must be a node name")
    priority: int = field(default=0, minimum=-MAX_PRIORITY, maximum=MAX_PRIORITY)
    max_attempts: int = field(default=1, minimum=1, maximum=101)
    retry: int = field(default=UNSET, minimum=0, maximum=100,
                       description="retries after a failure: max_attempts = retry + 1 (wins over max_attempts)")
    timeout_s: float | None = field(default=None, **_SECONDS, description="kill the attempt after this long; "
                                                                          "null: never")
    stop_grace_s: float | None = field(default=DEFAULT_STOP_GRACE_S, **_SECONDS,
                                       description="SIGTERM to SIGKILL on cancel or timeout")
    retention: RetentionPolicy | None = field(default=None, description="delete all but the best K and the last "
                                                                        "K checkpoints as new ones arrive")
    evaluate: EvaluatePolicy | None = field(default=None, description="queue an EVALUATE job for each new, or "
                                                                      "each new best, checkpoint")
    on_oom: OomPolicy | None = field(default=None, description="after an OOM: queue again, changing env")
    on_nan: str | None = field(default=None, enum=("stop",), description="stop: SIGTERM when the loss is NaN, "
                                                                         "keeping the last good checkpoint")
    on_lost: str | None = field(default=None, enum=("requeue",), description="requeue: queue a LOST job again")
    on_stalled: StalledPolicy | None = field(default=None, description="restart, stop or notify on a stall")
    on_preempted: PreemptedPolicy | None = field(default=None, description="queue a job killed from outside "
                                                                            "again, resuming from a checkpoint")

    gpu_model: str | None = field(default=None, min_length=1, max_length=200, pattern=_NO_NUL,
                                  description="run only on GPUs whose model contains this, any case (A100, "
                                              "RTX 4090); every GPU the job gets must match",
                                  message="must be a non-empty part of a GPU model name")
    min_gpu_memory_mb: int | None = field(default=None, minimum=1, maximum=1 << 30,
                                          description="run only on GPUs with at least this much memory (MiB) each")
    placement: str | None = field(default=None, enum=PLACEMENTS,
                                  description="pack: the node with the fewest free GPUs that fit; spread: the most; "
                                              "default: the daemon's [scheduler] placement")

    after: JobAfter | None = field(default=None, description="run only after these jobs: its dependencies "
                                                             "(submit --after, --after-any, --after-failed)")
    group: str | None = field(default=None, pattern=GROUP_PATTERN, message=GROUP_MESSAGE,
                              description="its group: at most the group's parallel limit of its jobs run at once, "
                                          "and none starts while the group is paused (made on first use)")

    __schema__ = {"anyOf": [{"required": ["cwd"]}, {"required": ["dir"]}]}

    def __attrs_post_init__(self) -> None:
        cwd = self.cwd if self.cwd is not UNSET else self.dir
        if cwd is UNSET:
            raise FieldInvalid("cwd", "the working directory is required (absolute path)")
        gpu = self.gpus if self.gpus is not UNSET else self.gpu
        for name in ("gpu_model", "min_gpu_memory_mb"):
            if getattr(self, name) is not None and gpu == 0:
                raise FieldInvalid(name, "a CPU job (gpu 0) gets no GPU to hold to it; ask for gpu >= 1")
        both = sorted(set(self.env) & set(self.secret_env))
        if both:
            raise FieldInvalid("secret_env", f"{', '.join(both)} also in env: give each variable once")
        why = env_refusal(self.on_oom, self.env)
        if why is not None:
            raise FieldInvalid("on_oom", why)


def to_spec(job: JobSubmit) -> JobSpec:
    """The submission with its aliases and defaults resolved: ``dir`` is ``cwd``, ``gpus`` is
    ``gpu``, ``retry`` N means ``max_attempts`` N+1, and the name defaults to the program's."""
    return JobSpec(
        name=job.name or os.path.basename(job.command[0]),
        command=tuple(job.command),
        cwd=job.cwd if job.cwd is not UNSET else job.dir,
        env=dict(job.env),
        gpu=job.gpus if job.gpus is not UNSET else job.gpu,
        labels=tuple(job.labels),
        node=job.node,
        priority=job.priority,
        max_attempts=job.retry + 1 if job.retry is not UNSET else job.max_attempts,
        timeout_s=job.timeout_s,
        stop_grace_s=job.stop_grace_s or DEFAULT_STOP_GRACE_S,
        type=job.type,
        policies=JobPolicies(retention=job.retention, evaluate=job.evaluate, on_oom=job.on_oom, on_nan=job.on_nan,
                             on_lost=job.on_lost, on_stalled=job.on_stalled, on_preempted=job.on_preempted),
        gpu_model=job.gpu_model,
        min_gpu_memory_mb=job.min_gpu_memory_mb,
        placement=job.placement,
    )
