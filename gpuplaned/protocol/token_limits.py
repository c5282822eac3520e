"""What a capability token (an agent's) may do beyond its scopes: ``TokenLimits``.

Set when the token is made (``POST /api/v1/tokens`` ``limits``), kept as JSON on its row,
shown by token list/show, and carried on the authenticated ``Caller``. Every limit is
optional; a token without limits (``None``) is limited by its scopes only.

- ``max_gpus_per_job``: a job may reserve at most this many GPUs (0: CPU jobs only).
- ``allowed_nodes``: a job must be pinned (``node``) to one of these node names.
- ``allowed_dirs``: a job's working directory, symlinks resolved, must lie inside one of these.
- ``max_queued_jobs``: at most this many of the token's jobs not yet ended.
- ``gpu_hours``: the budget: GPUs x hours, charged as the token's jobs run; a submit whose worst
  case (GPUs x its timeout, or ``max_job_hours``) would exceed what is left is refused, and the
  token's running jobs are stopped once it is spent.
- ``max_job_hours``: the longest a job may be given for budget purposes: the worst case of a job
  without a timeout, and the cap on a timeout. With a budget and no ``max_job_hours`` every job
  must set ``timeout_s``.
- ``unattended``: destructive MCP tools run without asking the user to confirm.
"""

from __future__ import annotations

import json
import os
from typing import Any

import attrs

from gpuplaned.protocol.converter import converter
from gpuplaned.protocol.fields import field

MAX_GPUS = 64
MAX_HOURS = 1_000_000.0
MAX_ITEMS = 64


def _absolute_dirs(dirs: Any) -> str | None:
    bad = [d for d in dirs if not isinstance(d, str) or not os.path.isabs(d) or "\x00" in d]
    return f"each directory must be an absolute path; got {bad[0]!r}" if bad else None


@attrs.frozen(kw_only=True)
class TokenLimits:
    """Limits of an agent's token, each optional (absent or null: no such limit)."""

    max_gpus_per_job: int | None = field(default=None, minimum=0, maximum=MAX_GPUS,
                                         description="the most GPUs one job may reserve",
                                         message=f"must be a whole number from 0 to {MAX_GPUS}; got {{value!r}}")
    allowed_nodes: tuple[str, ...] | None = field(
        default=None, min_items=1, max_items=MAX_ITEMS, items={"min_length": 1, "max_length": 200},
        description="jobs must be pinned (node) to one of these nodes",
        message=f"must be a list of 1 to {MAX_ITEMS} node names")
    allowed_dirs: tuple[str, ...] | None = field(
        default=None, min_items=1, max_items=MAX_ITEMS, items={"min_length": 1, "max_length": 4096},
        check=_absolute_dirs, description="a job's working directory (symlinks resolved) must lie inside one of these",
        schema={"items": {"type": "string", "pattern": "^/", "minLength": 1, "maxLength": 4096}},
        message=f"must be a list of 1 to {MAX_ITEMS} absolute directories")
    max_queued_jobs: int | None = field(default=None, minimum=1, maximum=100_000,
                                        description="the most jobs of this token not yet ended",
                                        message="must be a whole number from 1 to 100000; got {value!r}")
    gpu_hours: float | None = field(default=None, exclusive_minimum=0, maximum=MAX_HOURS,
                                    description="the GPU-hour budget (GPUs x hours), charged as jobs run",
                                    message=f"must be a number of GPU-hours above 0, at most {MAX_HOURS:g}; "
                                            "got {value!r}")
    max_job_hours: float | None = field(default=None, exclusive_minimum=0, maximum=MAX_HOURS,
                                        description="the default and the cap of a job's timeout for budget purposes",
                                        message=f"must be a number of hours above 0, at most {MAX_HOURS:g}; "
                                                "got {value!r}")
    unattended: bool = field(default=False, description="destructive MCP tools run without asking for confirmation")

    def __attrs_post_init__(self) -> None:
        # Kept canonical: what is stored and shown is what was meant (no repeats, dirs normalised).
        if self.allowed_nodes is not None:
            object.__setattr__(self, "allowed_nodes", tuple(dict.fromkeys(self.allowed_nodes)))
        if self.allowed_dirs is not None:
            object.__setattr__(self, "allowed_dirs",
                               tuple(dict.fromkeys(os.path.normpath(d) for d in self.allowed_dirs)))


def dump_limits(limits: TokenLimits | None) -> str | None:
    """The JSON kept on the token's row (None: no limits)."""
    if limits is None:
        return None
    return json.dumps(converter.unstructure(limits), sort_keys=True)


def load_limits(raw: str | None) -> TokenLimits | None:
    return None if not raw else converter.structure(json.loads(raw), TokenLimits)
