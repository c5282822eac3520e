"""Every type of event the daemon records: what ``GET /api/v1/events?type=`` may filter on.

A type outside this list matches nothing, ever, so a filter naming one (a typo, ``NOPE``) is
refused with the list rather than answered with no events. A rule that records a new type
adds it here (tests/domain/test_event_types.py checks that what the rules raise is in).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuplaned.domain import (
    early_stopping,
    evaluations,
    failure_policies,
    gpu_budget,
    node_conditions,
    node_health,
    run_records,
    sweep_policies,
)
from gpuplaned.domain.job_states import FAILURE_EVENTS, JOB_FAILED
from gpuplaned.domain.rules import lifecycle, overfitting, stall

NODE_EVENTS = (node_health.DISK_LOW, node_health.DISK_OK, node_health.GPU_LOST, node_health.GPU_RECOVERED,
               node_health.GPU_PINNING_VIOLATION, node_health.GPU_UNDERUTILIZED,
               *node_conditions.EVENT_TYPES)  # a condition a node's part raised (slurm_unreachable), cleared
# A DISPATCHING job's node says why it has not started it yet (Slurm's pending reason), once per
# change of reason (service/link/nodes.py); info, the reason in its context.
JOB_WAITING = "JOB_WAITING"
JOB_EVENTS = (JOB_FAILED[0], *(kind for kind, _severity in FAILURE_EVENTS.values()), JOB_WAITING)
RUN_EVENTS = ("LOSS_NAN", "LOSS_SPIKE", run_records.USER_EVENT, run_records.CHECKPOINT_CREATED)  # run_summary's rules
# The TensorBoard tailer's (service/link/tb_points.py): a record skipped after its CRC grace; a file
# whose path now names another file, read again from its start.
TB_RECORD_SKIPPED = "TB_RECORD_SKIPPED"
TB_FILE_REPLACED = "TB_FILE_REPLACED"
TB_EVENTS = (TB_RECORD_SKIPPED, TB_FILE_REPLACED)
# The node's readers' (actors/tbtail.py, actors/ckptwatch.py): a file in a job's folders that no
# process of any job of the node wrote, reported once and not taken (context: path, pid, kind).
UNATTRIBUTED_FILE = "UNATTRIBUTED_FILE"
# The detector's rules (gpuplaned.domain.rules): overfitting in the summary fold, stalls in actors/detector.py.
DETECTOR_EVENTS = (overfitting.OVERFITTING_SUSPECTED, stall.RUN_STALLED, lifecycle.RUN_STARTED, lifecycle.RUN_FINISHED)
# Retention's (service/passes/retention.py): a checkpoint's file deleted, recorded once it is gone.
CHECKPOINT_DELETED = "CHECKPOINT_DELETED"
# The failure policies' (service/passes/failure_policies.py): what a policy did about a trigger, or why it could not.
POLICY_EVENTS = (failure_policies.POLICY_ACTION, failure_policies.POLICY_SKIPPED)
# The sweeps' policies (service/passes/early_stop.py, sweep_failures.py): a trial stopped early by its
# sweep's rule (rule, value, threshold, step); a sweep paused because its trials fail at once.
SWEEP_EVENTS = (early_stopping.EARLY_STOPPED, sweep_policies.SWEEP_PAUSED)
# A remote agent's link (service/link/agent_link.py): silent for 3 heartbeats (its node OFFLINE, its
# jobs LOST, their ids in the context), and back again with a hello.
AGENT_DISCONNECTED = "AGENT_DISCONNECTED"
AGENT_RECONNECTED = "AGENT_RECONNECTED"
# An agent's spool (gpuplaned.uplink.spool) full or too old: the records it trimmed unsent, by stream.
SPOOL_DROPPED = "SPOOL_DROPPED"
AGENT_EVENTS = (AGENT_DISCONNECTED, AGENT_RECONNECTED, SPOOL_DROPPED)
# A failed attempt raises one event, typed by its cause: OOM, JOB_TIMEOUT, or JOB_FAILED for
# every other (the failure reason in its context). JOB_FAILED is also the family's name: a
# filter or subscription on it hears every failed attempt, its more specific kinds included.
FAILURE_KINDS = (FAILURE_EVENTS["OOM"][0], FAILURE_EVENTS["TIMEOUT"][0])
_KINDS = {JOB_FAILED[0]: FAILURE_KINDS}


def with_kinds(types: Sequence[str]) -> tuple[str, ...]:
    """The event types a filter on ``types`` matches: each, and the more specific kinds of each
    (JOB_FAILED: OOM and JOB_TIMEOUT), without repeats, in order."""
    return tuple(dict.fromkeys(t for kind in types for t in (kind, *_KINDS.get(kind, ()))))


EVENT_TYPES = tuple(sorted({*NODE_EVENTS, *AGENT_EVENTS, *JOB_EVENTS, *RUN_EVENTS, *TB_EVENTS, *DETECTOR_EVENTS, *POLICY_EVENTS,
                            *SWEEP_EVENTS,
                            CHECKPOINT_DELETED, UNATTRIBUTED_FILE,
                            gpu_budget.BUDGET_EXHAUSTED,  # service/passes/budget.py: a token's budget is spent
                            evaluations.EVALUATION_FINISHED}))  # service/api/evaluations.py: an evaluation ended
