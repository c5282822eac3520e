"""What a sweep does about its failing trials: pure, table-tested
(``gpuplaned.service.passes.sweep_failures`` carries it out).

- ``retry_on`` (``{"causes": ["OOM", "PREEMPTED", "LOST"], "times": N}``): a trial whose attempt
  failed for one of the causes is queued again, at most N times; a failure of any other cause is
  final. The causes, from the attempt's failure reason:
  - ``OOM``: out of memory (the kernel's OOM killer, or the message in stderr);
  - ``PREEMPTED``: killed from outside by SIGTERM, SIGKILL, SIGINT or SIGHUP (GPUPlane's own
    stops end CANCELLED or TIMEOUT, never these: ``failure_policies.PREEMPT_SIGNALS``);
  - ``LOST``: nothing tells how it ended (no exit record). A job whose node fell silent is LOST,
    not ended, and is left alone: its node may yet say how it did.
  The retries of a trial are counted on its runs: each attempt that failed for a cause of
  ``retry_on`` is one (so the N-th retry's own failure is final).
- Flapping: ``FLAPPING_TRIALS`` trials of one sweep whose attempts failed within their first
  ``FLAPPING_WINDOW_MS`` of running pause the sweep (``FLAPPING_REASON``), with a
  ``SWEEP_PAUSED`` event: a sweep whose command is broken would otherwise burn its whole queue
  one failure after another. Failures count from the sweep's last such pause on, so a sweep
  resumed after a fix is paused again only by three new ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from gpuplaned.domain.failure_policies import PREEMPTIONS
from gpuplaned.protocol.job_states import FailureReason

SWEEP_PAUSED = "SWEEP_PAUSED"  # a sweep paused by the daemon, with why
RETRY_ON = "retry_on"  # the policy name its POLICY_ACTION events carry
FLAPPING_TRIALS = 3
FLAPPING_WINDOW_MS = 60_000
FLAPPING_REASON = f"{FLAPPING_TRIALS} trials failed within their first minute"


def retry_cause(failure_reason: str | None) -> str | None:
    """The ``retry_on`` cause of a failed attempt's reason: OOM, PREEMPTED or LOST; None for
    any other (an exit code, a timeout, a crash signal, a command that could not start)."""
    if failure_reason == FailureReason.OOM:
        return "OOM"
    if failure_reason in PREEMPTIONS:
        return "PREEMPTED"
    if failure_reason == FailureReason.LOST:
        return "LOST"
    return None


RETRY_REASONS = ("OOM", "LOST", *sorted(PREEMPTIONS))  # the failure reasons a cause names


def covered(failure_reason: str | None, retry_on: Mapping[str, Any]) -> bool:
    """Whether an attempt that failed with ``failure_reason`` is one of ``retry_on``'s causes."""
    cause = retry_cause(failure_reason)
    return cause is not None and cause in _causes(retry_on)


def _causes(retry_on: Mapping[str, Any]) -> list[str]:
    return [str(c).upper() for c in retry_on.get("causes", ())]


@attrs.frozen
class RetryDecision:
    retry: bool
    reason: str


def decide_retry(failure_reason: str | None, retry_on: Mapping[str, Any], failed_for_causes: int) -> RetryDecision:
    """Whether to queue a FAILED trial again.

    Args:
        failure_reason: its last attempt's.
        retry_on: the sweep's (``causes``, ``times``).
        failed_for_causes: its attempts that failed for one of ``causes``, the last one included.
    """
    cause = retry_cause(failure_reason)
    causes = _causes(retry_on)
    times = int(retry_on.get("times", 1))
    if cause is None or cause not in causes:
        return RetryDecision(False, f"failed with {failure_reason or 'no reason'}, not a cause of retry_on "
                                    f"({', '.join(causes)}): final")
    if failed_for_causes > times:
        return RetryDecision(False, f"{cause}: retry_on's {times} {'retry is' if times == 1 else 'retries are'} spent")
    return RetryDecision(True, f"{cause} ({failure_reason}): retry {failed_for_causes} of {times}")


def failed_fast(started_at: int | None, finished_at: int | None) -> bool:
    """Whether an attempt that failed ran less than ``FLAPPING_WINDOW_MS`` (one that never
    started counts: its command could not even begin)."""
    if finished_at is None:
        return False
    return started_at is None or finished_at - started_at < FLAPPING_WINDOW_MS


def flapping(fast_failures: int) -> bool:
    """Whether this many trials failing fast pause their sweep."""
    return fast_failures >= FLAPPING_TRIALS
