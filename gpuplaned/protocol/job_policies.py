"""A job's per-job policies (issue 15): what happens to its checkpoints as they arrive.

``retention`` keeps the best K and the last K of a run's checkpoints and deletes the rest
that GPUPlane registered (``gpuplaned.service.retention``); ``evaluate`` queues an EVALUATE
job for each new checkpoint, or for each new best one (``gpuplaned.service.evaluations``).
Both come in the ``POST /api/v1/jobs`` body and as tables in a job file
(``retention = {keep_best = 1, keep_last = 2}``), and are kept as JSON in ``jobs.policies``.
"""

from __future__ import annotations

import json
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


@attrs.frozen(kw_only=True)
class JobPolicies:
    retention: RetentionPolicy | None = None
    evaluate: EvaluatePolicy | None = None


def dump_policies(policies: JobPolicies) -> str | None:
    """``jobs.policies``: None when the job has none."""
    if policies.retention is None and policies.evaluate is None:
        return None
    return json.dumps({k: v for k, v in unstructure(policies).items() if v is not None}, sort_keys=True)


def load_policies(text: str | None) -> JobPolicies:
    """The stored policies (written by ``dump_policies``; checked again all the same)."""
    data: Any = json.loads(text) if text else {}
    return check(data, JobPolicies)
