"""Why a finished job failed, from its exit record and the tail of its stderr.

Pure: the caller reads the files (``gpuplaned.launching.job_files``: ``read_exit``,
``tail_text``) and the kernel's OOM counters, and passes what they say.
"""

from __future__ import annotations

from typing import Protocol

from gpuplaned.shim.records import signal_name

OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError")
MAX_LOG_LINE = 500  # characters of the line that tells why a job failed


class ExitFacts(Protocol):
    """What is read of an exit record (``gpuplaned.launching.job_files.ExitRecord``)."""

    @property
    def exit_code(self) -> int | None: ...
    @property
    def signal(self) -> int | None: ...
    @property
    def signal_name(self) -> str | None: ...
    @property
    def reason(self) -> str: ...
    @property
    def error(self) -> str | None: ...


def classify_failure(
    record: ExitFacts, stderr_tail: str = "", oom_killed: bool = False
) -> tuple[str | None, str | None]:
    """Why a finished job failed, as ``(failure_reason, detail)``; ``(None, None)`` on success.

    ``failure_reason`` is one of ``SPAWN_FAILED``, ``CANCELLED`` (the caller maps it to the
    CANCELLED state), ``TIMEOUT``, ``OOM`` (``oom_killed`` from the kernel's cgroup
    counters, or an out-of-memory message in ``stderr_tail``), ``SIGNAL(SIGSEGV)``-style,
    or ``EXIT_CODE``. A job that exited 0 succeeded whatever its stderr says.
    """
    if record.reason == "spawn_failed":
        return "SPAWN_FAILED", record.error or f"exit code {record.exit_code}"
    if record.reason == "cancelled":
        return "CANCELLED", "cancelled"
    if record.reason == "timeout":
        return "TIMEOUT", "timed out"
    if record.exit_code == 0 and record.signal is None:
        return None, None
    if oom_killed:
        return "OOM", "killed by the kernel's OOM killer"
    for marker in OOM_MARKERS:
        if marker in stderr_tail:
            return "OOM", f"stderr: {marker}"
    if record.signal is not None:
        name = record.signal_name or signal_name(record.signal)
        return f"SIGNAL({name})", f"killed by {name}"
    return "EXIT_CODE", f"exit code {record.exit_code}"


def failure_line(stderr_tail: str, failure_reason: str | None) -> str | None:
    """The line of a failed job's stderr that tells why: for ``OOM`` the last one with an
    out-of-memory message, else the last one that is not blank; None when stderr is empty.
    At most ``MAX_LOG_LINE`` characters."""
    lines = [line.strip() for line in stderr_tail.splitlines() if line.strip()]
    if failure_reason == "OOM":
        lines = [line for line in lines if any(marker in line for marker in OOM_MARKERS)] or lines
    return lines[-1][:MAX_LOG_LINE] if lines else None
