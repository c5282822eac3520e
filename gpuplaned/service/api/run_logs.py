"""An imported run's logs for the API (``GET /api/v1/runs/{id}/logs``, ``gpuplanectl run logs RUN``).

``import-run`` registers a dir's stdout and stderr files as the run's log artifacts
(``store.import_rows``), never copied; this reads them where the daemon runs, as ``ckpt
verify`` reads a checkpoint, read-only and on a worker thread. A job's output is its
attempts' files (``service.logs``); an imported run has no job, so its logs are these.

Each registered file is told with what it was at import (size, lines) and what it is now,
its ``state``: ``ok``; ``changed`` (its size differs: appended to or rewritten since; read
as it is now); ``gone``; ``unreadable`` (no longer a regular file, or the OS refuses). Its
lines are read as a job's are (``gpuplaned.logtail``): the last ``tail`` by seeking back
from the end, never the whole file, or a page from a line's byte offset (``next_offset`` of
the page before), long lines cut into 64 KiB pieces. The files are finished, so a last line
without its newline is a line. The text is the file's, decoded as UTF-8 with replacement;
printing it safely is the reader's part (``gpuplanectl run logs`` escapes control characters).
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any

import attrs
import trio

from gpuplaned.logtail import Line, read_page, tail_page
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.log_replies import LogLine, RunLogFile, RunLogPage, RunLogs
from gpuplaned.service import access
from gpuplaned.store import import_rows, run_rows

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

DEFAULT_TAIL = 100  # as a job's logs
MAX_LINES = 10_000  # per file and request: the reply stays a page, whatever the file's size


@attrs.frozen
class Selection:
    """Which files to read and how: the last ``tail`` lines, or ``limit`` lines from ``offset``."""

    path: str | None = None
    stream: str = "all"
    tail: int = DEFAULT_TAIL
    offset: int | None = None
    limit: int = 1000

    def wants(self, log: dict[str, Any]) -> bool:
        return (self.path is None or log["path"] == self.path) and self.stream in ("all", log.get("stream"))


async def read_logs(shared: ServerContext, run_id: str, selection: Selection) -> RunLogs:
    """The run's log files, each with its state and, when selected, its lines.

    Raises:
        ApiError: not_found for an unknown run or a path= that is none of its logs;
            bad_request for offset= with more than one file selected.
    """

    def query(conn: Any) -> tuple[Any, list[dict[str, Any]]]:
        return run_rows.get_run(conn, run_id), import_rows.list_logs(conn, run_id)

    run, logs = await access.readers(shared, "runs").run(query)
    if run is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no run {run_id!r}", {"run_id": run_id})
    _check(run_id, logs, selection)
    files = await trio.to_thread.run_sync(lambda: [_read(log, selection) for log in logs])
    return RunLogs(run_id=run_id, job_id=run.job_id, logs=files)


def _check(run_id: str, logs: list[dict[str, Any]], selection: Selection) -> None:
    if selection.path is not None and not any(log["path"] == selection.path for log in logs):
        raise ApiError(ErrorCode.NOT_FOUND, f"run {run_id} has no log {selection.path!r}",
                       {"run_id": run_id, "field": "path"})
    chosen = sum(selection.wants(log) for log in logs)
    if selection.offset is not None and chosen > 1:
        raise ApiError(ErrorCode.BAD_REQUEST, f"offset: pages one file, and {chosen} are selected; give path=",
                       {"field": "offset"})


def _read(log: dict[str, Any], selection: Selection) -> RunLogFile:
    """Runs on a worker thread: the file as it is now, and its lines when selected."""
    path, was = log["path"], int(log.get("size_bytes") or 0)
    state, problem, size = _examine(path, was)
    page = None
    if selection.wants(log) and state in ("ok", "changed"):
        try:
            page = _page(_lines(path, selection))
        except OSError as exc:
            state, problem, size = "unreadable", _os_problem(exc), None
    return RunLogFile(path=path, stream=log.get("stream") or "stdout", size_bytes=was,
                      lines=int(log.get("lines") or 0), state=state, problem=problem, size_now=size, page=page)


def _examine(path: str, was: int) -> tuple[str, str | None, int | None]:
    """(state, problem, size now) of the file at ``path``, registered with ``was`` bytes."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "gone", "the file is gone since the import", None
    except OSError as exc:
        return "unreadable", _os_problem(exc), None
    if not stat.S_ISREG(st.st_mode):  # a link or a dir put in its place: never followed
        return "unreadable", "no longer a regular file (replaced since the import): not read", None
    if st.st_size != was:
        return "changed", f"{st.st_size} bytes now, {was} when imported: read as it is now", st.st_size
    return "ok", None, st.st_size


def _lines(path: str, selection: Selection) -> tuple[list[Line], int | None]:
    if selection.offset is not None:
        return read_page(path, selection.offset, selection.limit, partial=True)
    return tail_page(path, selection.tail, partial=True)


def _page(found: tuple[list[Line], int | None]) -> RunLogPage:
    lines = [LogLine(offset, text) for offset, text in found[0]]
    return RunLogPage(lines=lines, next_offset=found[1] if lines else None)


def _os_problem(exc: OSError) -> str:
    return f"cannot be read: {type(exc).__name__}: {exc.strerror or exc}"
