"""How an attempt ended, from its exit record and the tail of its stderr: the node's report.

``ExitReason`` is what a shim writes in ``exit.json`` (``reason``), ``FailureReason`` (the wire's
vocabulary, ``gpuplaned.protocol.job_states``) what a failed attempt is recorded with
(``failure_reason``: on the job, its run and its event), and
``judge_exit`` the one translation from the first to the node's report (``NodeReport``)
and the second. Pure: the caller reads the files (``gpuplaned.launching.job_files``:
``read_exit``, ``tail_text``) and the kernel's OOM counters, and passes what they say.
"""

from __future__ import annotations

import enum
import signal
from typing import Protocol

import attrs

from gpuplaned.protocol.job_states import FailureReason, NodeReport, signal_failure

OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError")
MAX_LOG_LINE = 500  # characters of the line that tells why a job failed


class ExitReason(enum.StrEnum):
    """``exit.json``'s ``reason`` (the shim writes these values: ``gpuplaned.shim.records``)."""

    EXITED = "exited"  # the main process exited
    SIGNALED = "signaled"  # a signal killed it (not one of ours)
    CANCELLED = "cancelled"  # we stopped it on a cancel
    TIMEOUT = "timeout"  # we stopped it at its timeout
    SPAWN_FAILED = "spawn_failed"  # it never started


class ExitFacts(Protocol):
    """What is read of an exit record (``gpuplaned.launching.job_files.ExitRecord``)."""

    @property
    def exit_code(self) -> int | None: ...
    @property
    def signal(self) -> int | None: ...
    @property
    def signal_name(self) -> str | None: ...
    @property
    def reason(self) -> ExitReason: ...
    @property
    def error(self) -> str | None: ...


@attrs.frozen
class Verdict:
    """How an attempt ended, as its node reports it."""

    report: NodeReport  # SUCCEEDED, FAILED or CANCELLED
    failure: str | None = None  # a FailureReason, or signal_failure(...); None unless FAILED
    detail: str | None = None  # why, in words; None for a success


def judge_exit(record: ExitFacts, stderr_tail: str = "", oom_killed: bool = False) -> Verdict:
    """How a finished attempt ended.

    CANCELLED when the shim stopped it on a cancel. Else FAILED with ``SPAWN_FAILED``,
    ``TIMEOUT``, ``OOM`` (``oom_killed`` from the kernel's cgroup counters, or an
    out-of-memory message in ``stderr_tail``), ``SIGNAL(SIGSEGV)``-style, or ``EXIT_CODE``.
    A job that exited 0 succeeded whatever its stderr says.
    """
    reason = record.reason
    if reason == ExitReason.SPAWN_FAILED:
        return _failed(FailureReason.SPAWN_FAILED, record.error or f"exit code {record.exit_code}")
    if reason == ExitReason.CANCELLED:
        return Verdict(NodeReport.CANCELLED, None, "cancelled")
    if reason == ExitReason.TIMEOUT:
        return _failed(FailureReason.TIMEOUT, "timed out")
    if record.exit_code == 0 and record.signal is None:
        return Verdict(NodeReport.SUCCEEDED)
    if oom_killed:
        return _failed(FailureReason.OOM, "killed by the kernel's OOM killer")
    for marker in OOM_MARKERS:
        if marker in stderr_tail:
            return _failed(FailureReason.OOM, f"stderr: {marker}")
    if record.signal is not None:
        name = record.signal_name or _signal_name(record.signal)
        return _failed(signal_failure(name), f"killed by {name}")
    return _failed(FailureReason.EXIT_CODE, f"exit code {record.exit_code}")


def _signal_name(signum: int) -> str:
    """``SIGSEGV`` for 11 (the shim's own ``signal_name``: the shim runs by path and this
    layer imports no node library, so each keeps its copy; tests/shim pins them equal)."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def _failed(failure: str, detail: str) -> Verdict:
    return Verdict(NodeReport.FAILED, failure, detail)


def failure_line(stderr_tail: str, failure_reason: str | None) -> str | None:
    """The line of a failed job's stderr that tells why: for ``OOM`` the last one with an
    out-of-memory message, else the last one that is not blank; None when stderr is empty.
    At most ``MAX_LOG_LINE`` characters."""
    lines = [line.strip() for line in stderr_tail.splitlines() if line.strip()]
    if failure_reason == FailureReason.OOM:
        lines = [line for line in lines if any(marker in line for marker in OOM_MARKERS)] or lines
    return lines[-1][:MAX_LOG_LINE] if lines else None
