"""A job's per-job policies (issue 15): what happens to its checkpoints as they arrive.

``retention`` keeps the best K and the last K of a run's checkpoints and deletes the rest
that GPUPlane registered (``gpuplaned.service.passes.retention``); ``evaluate`` queues an EVALUATE
job for each new checkpoint, or for each new best one (``gpuplaned.service.api.evaluations``).
Both come in the ``POST /api/v1/jobs`` body and as tables in a job file
(``retention = {keep_best = 1, keep_last = 2}``), and are kept as JSON in ``jobs.policies``.

The failure policies (issue 16), carried out by ``gpuplaned.service.passes.failure_policies``, each
once per trigger event: ``on_oom`` (retry N times, halving integer variables), ``on_nan``
(stop), ``on_lost`` (requeue), ``on_stalled`` (after a stall lasted ``after``: restart, stop or
notify), ``on_preempted`` (requeue resuming from the last checkpoint).
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

from gpuplaned.protocol.converter import FieldInvalid, check, unstructure
from gpuplaned.protocol.fields import field

MAX_KEEP = 10_000
EVERY = ("best", "each")
_NO_NUL = "^[^\\x00]*$"


@attrs.frozen(kw_only=True)
class RetentionPolicy:
    """Keep the ``keep_best`` best checkpoints by the primary metric and the ``keep_last``
    newest; the rest registered by GPUPlane are deleted as new ones arrive."""

    keep_best: int = field(default=1, minimum=0, maximum=MAX_KEEP, description="the best K by the primary metric")
    keep_last: int = field(default=1, minimum=0, maximum=MAX_KEEP, description="the newest K by step")

    def __attrs_post_init__(self) -> None:
        if self.keep_best == 0 and self.keep_last == 0:
            raise FieldInvalid("keep_last", "keep_best and keep_last are both 0: that would delete every checkpoint")


@attrs.frozen(kw_only=True)
class EvaluatePolicy:
    """Queue an EVALUATE job running ``command`` (``{checkpoint}`` replaced by its path) for
    each new checkpoint (``each``) or each one that is the run's new best (``best``)."""

    every: str = field(enum=EVERY, description="each: every new checkpoint; best: each new best one")
    command: list[str] = field(min_items=1, description="argv; {checkpoint} is replaced by the checkpoint's path",
                               schema={"prefixItems": [{"type": "string", "minLength": 1, "pattern": _NO_NUL}],
                                       "items": {"type": "string", "pattern": _NO_NUL}})


MAX_RETRIES = 100
ENV_RULES = ("half",)
_ENV_NAME = "^[A-Za-z_][A-Za-z0-9_]*$"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")
STALLED_ACTIONS = ("restart", "stop", "notify")
RESUME_FROM = ("last", "best")


def duration_s(text: str) -> float | None:
    """``"20m"`` -> 1200.0 (s, m or h; a bare number is seconds); None when it is no duration."""
    found = _DURATION.match(text.strip())
    if found is None:
        return None
    return float(found.group(1)) * {"s": 1, "m": 60, "h": 3600}[found.group(2) or "s"]


def _duration(value: str) -> str | None:
    seconds = duration_s(value)
    if seconds is None:
        return "must be a duration like 90s, 20m or 2h"
    return None if 0 < seconds <= 7 * 86_400 else "must be more than 0 and at most 7 days"


def _env_rules(value: dict[str, str]) -> str | None:
    for name, rule in value.items():
        if not re.match(_ENV_NAME, name):
            return f"{name!r} is not an environment variable name"
        if rule not in ENV_RULES:
            return f"{name}: the only rule is \"half\" (halve its integer value), not {rule!r}"
    return None


@attrs.frozen(kw_only=True)
class OomPolicy:
    """After an out-of-memory failure, queue the job again, at most ``retry`` times, with each
    variable of ``env`` changed by its rule (``half``: an integer halved, at least 1)."""

    retry: int = field(default=1, minimum=1, maximum=MAX_RETRIES, description="at most this many OOM retries")
    env: dict[str, str] = field(factory=dict, check=_env_rules, description='NAME = "half": halve the job\'s '
                                "integer variable NAME on each retry")


@attrs.frozen(kw_only=True)
class StalledPolicy:
    """When the run stalled (``RUN_STALLED``) and the stall lasted ``after``: ``restart`` (stop
    it, queue it again), ``stop`` (SIGTERM with its grace) or ``notify`` (an event only)."""

    after: str = field(default="20m", check=_duration, description="how long the stall lasts first: 90s, 20m, 2h")
    action: str = field(default="notify", enum=STALLED_ACTIONS)


@attrs.frozen(kw_only=True)
class PreemptedPolicy:
    """A job killed from outside (SIGTERM, SIGKILL, SIGINT, SIGHUP not sent by GPUPlane) is
    queued again, resuming from its ``last`` (or ``best``) checkpoint, or afresh with none."""

    resume_from: str = field(default="last", enum=RESUME_FROM)


@attrs.frozen(kw_only=True)
class JobPolicies:
    retention: RetentionPolicy | None = None
    evaluate: EvaluatePolicy | None = None
    on_oom: OomPolicy | None = None
    on_nan: str | None = field(default=None, enum=("stop",))
    on_lost: str | None = field(default=None, enum=("requeue",))
    on_stalled: StalledPolicy | None = None
    on_preempted: PreemptedPolicy | None = None

    def failure_policies(self) -> bool:
        return any(v is not None for v in (self.on_oom, self.on_nan, self.on_lost, self.on_stalled,
                                            self.on_preempted))


def env_refusal(policy: OomPolicy | None, env: dict[str, str]) -> str | None:
    """Why ``on_oom.env`` cannot apply to a job with ``env`` (a name it lacks, a value that is
    no positive integer); None when it can."""
    for name in (policy.env if policy is not None else {}):
        value = env.get(name)
        if value is None:
            return f"{name} is not in the job's env: the rule halves a variable the job has"
        if not value.strip().isdigit() or int(value) < 1:
            return f"{name}={value!r} is not a positive integer: it cannot be halved"
    return None


def dump_policies(policies: JobPolicies) -> str | None:
    """``jobs.policies``: None when the job has none."""
    if all(v is None for v in attrs.astuple(policies, recurse=False)):
        return None
    return json.dumps({k: v for k, v in unstructure(policies).items() if v is not None}, sort_keys=True)


def load_policies(text: str | None) -> JobPolicies:
    """The stored policies (written by ``dump_policies``; checked again all the same)."""
    data: Any = json.loads(text) if text else {}
    return check(data, JobPolicies)
