"""Log lines as the API shows them: a page of a job's stdout or stderr, and an imported run's log files."""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import doc

LOG_FILE_STATES = ("ok", "changed", "gone", "unreadable")  # an imported run's log file now, against its import


@attrs.frozen
class LogLine:
    offset: int = doc("the line's byte offset in the file", minimum=0)
    line: str


@attrs.frozen
class LogPage:
    job_id: str
    attempt: int = doc("0: the job has not run yet (no lines)", minimum=0)
    stream: str
    lines: list[LogLine]
    next_offset: int | None = doc("where the line after the page's last starts: pass it as offset= for the next "
                                  "page; null when the page is empty")


@attrs.frozen(kw_only=True)
class RunLogPage:
    lines: list[LogLine]
    next_offset: int | None = doc("where the line after the page's last starts: pass it as offset= (with path=) for "
                                  "the next page; null when the page is empty")


@attrs.frozen(kw_only=True)
class RunLogFile:
    path: str = doc("where import-run found it, on the daemon's host")
    stream: str = doc(enum=("stdout", "stderr"))
    size_bytes: int = doc("its size when imported", minimum=0)
    lines: int = doc("its line count when imported", minimum=0)
    state: str = doc("ok; changed: its size differs since the import (read as it is now); gone; unreadable",
                     enum=LOG_FILE_STATES)
    problem: str | None = doc("what is wrong with it, for a state other than ok")
    size_now: int | None = doc("its size now; null when gone or unreadable", minimum=0)
    page: RunLogPage | None = doc("its lines; null when not asked for (path=, stream=) or gone or unreadable")


@attrs.frozen(kw_only=True)
class RunLogs:
    """An imported run's stdout and stderr files (import-run registers them, never copied), read on the daemon's
    host as they are now."""

    run_id: str
    job_id: str | None = doc("the run's job, if it has one: its output is GET /api/v1/jobs/{job_id}/logs")
    logs: list[RunLogFile] = doc("every log file of the run, by path; empty: it has none")
