"""Which scope each tool needs and how it is marked: one table that must cover every tool.

``validate_coverage`` runs when the server is built: a tool added without a line here cannot
be served (after MLflow's ``validate_coverage``). ``read`` serves read, semantic and wake-up
tools; ``write`` the tools that change something. A destructive tool asks for confirmation
(``confirm``) unless the token allows unattended use.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs


@attrs.frozen
class Policy:
    family: str  # read | semantic | wake | write
    scope: str  # the token scope it needs
    read_only: bool
    destructive: bool = False
    idempotent: bool = True


_READ = Policy("read", "read", read_only=True)
_SEMANTIC = Policy("semantic", "read", read_only=True)

POLICY: dict[str, Policy] = {
    "list_nodes": _READ, "get_node_status": _READ, "list_jobs": _READ, "get_job": _READ,
    "get_run_summary": _READ, "query_metrics": _READ, "tail_logs": _READ, "list_events": _READ,
    "list_checkpoints": _READ, "list_evaluations": _READ,
    "diagnose_run": _SEMANTIC, "compare_runs": _SEMANTIC, "compare_checkpoints": _SEMANTIC,
    "get_best_checkpoint": _SEMANTIC, "explain_failure": _SEMANTIC,
    "wait_for_events": Policy("wake", "read", read_only=True),
    "submit_job": Policy("write", "write", read_only=False, idempotent=False),
    "retry_job": Policy("write", "write", read_only=False, idempotent=False),
    "evaluate_checkpoint": Policy("write", "write", read_only=False, idempotent=False),
    # Cancelling twice leaves the job as cancelling once does.
    "cancel_job": Policy("write", "write", read_only=False, destructive=True, idempotent=True),
    "list_groups": _READ,
    "set_group_limit": Policy("write", "write", read_only=False),
    "pause_group": Policy("write", "write", read_only=False),
    "pause_queue": Policy("write", "write", read_only=False),
    "set_job_priority": Policy("write", "write", read_only=False),
    # Removing twice: the second finds no job, and changes nothing.
    "remove_job": Policy("write", "write", read_only=False, destructive=True, idempotent=True),
    # A second clean removes the jobs that have ended since.
    "clean_jobs": Policy("write", "write", read_only=False, destructive=True, idempotent=False),
    "get_sweep": _READ,
    # The same name and values again queue no trial twice (the sweep's dedupe).
    "submit_sweep": Policy("write", "write", read_only=False, idempotent=True),
    "cancel_sweep": Policy("write", "write", read_only=False, destructive=True, idempotent=True),
    "pause_sweep": Policy("write", "write", read_only=False, idempotent=True),
    "set_sweep_max_parallel": Policy("write", "write", read_only=False, idempotent=True),
    "resume_sweep": Policy("write", "write", read_only=False, idempotent=True),
    # A second retry queues the trials that failed since.
    "retry_failed_sweep": Policy("write", "write", read_only=False, idempotent=False),
}


class PolicyGap(RuntimeError):
    """A tool without a policy line, or a line for no tool."""


def validate_coverage(names: Iterable[str], policy: dict[str, Policy] = POLICY) -> None:
    names = list(names)
    missing = sorted(set(names) - set(policy))
    stale = sorted(set(policy) - set(names))
    if missing or stale:
        raise PolicyGap(f"MCP tool policy out of step: no policy for {missing or 'none'}; "
                        f"policy for no tool {stale or 'none'} (gpuplaned/mcp/policy.py)")
