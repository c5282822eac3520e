"""``gpuplanectl job logs JOB [-f | --full]``: a job's output, as a tail, followed live, or
whole; ``run logs RUN``: an imported run's log files (``logs``, the hidden old spelling, takes
either).

Without ``-f``: the last ``--tail`` lines of each stream (``GET /api/v1/jobs/{id}/logs``).
With ``-f``: those lines, then everything the job prints, from the Server-Sent Events
stream ``/api/v1/jobs/{id}/logs/stream``. Each event's id is where to resume, so a dropped
connection (or a restarted daemon) is picked up again with ``Last-Event-ID`` and no line is
lost or repeated. When an attempt that is retried ends, following moves on to the next
attempt; when the job ends, a last line like ``[job job_... SUCCEEDED, exit code 0]`` goes
to stderr and the command exits with the job's exit code (``exit_codes.for_job_end``). A job
on a remote agent's node is followed the same way: the server relays its lines.

With ``--full``: the whole file of each stream of the attempt, as written so far, paged with
``GET /api/v1/jobs/{id}/logs?offset=..&limit=..`` (``FULL_PAGE`` lines a page). A remote
agent's job is read through its agent, so its node must be online: while its agent is not
connected the server answers ``unavailable`` (with ``node`` and ``stored_lines``), and the
command prints the server's stored tail instead, says on stderr that only those last lines
are shown and why, and exits 1. ``--full`` with ``-f`` or ``--tail`` is a usage error.

Where lines go: with both streams shown, stdout lines to stdout and stderr lines to stderr,
so redirections keep them apart; with ``--stream`` the one stream goes to stdout. ``--json``
prints the API's pages (``{"stdout": page, "stderr": page}``); with ``--full`` each page as
it comes, one JSON object a line (the stored tail's page too, then the ``{"error": ...}``
when the agent is offline); with ``-f`` one JSON object per line: ``{"stream", "line"}``,
and at the end ``{"end": {...}}``.

A run id (``run_...``): the stdout and stderr files ``run import`` registered for it, the last
``--tail`` lines of each (``GET /api/v1/runs/{id}/logs``), with a ``==> path <==`` line before
each when there are several; a file gone or changed since the import is said on stderr (a
file that cannot be read: exit 1). The files come from any dir, so control characters are
printed as escapes. They are finished: ``-f``, ``--full`` and ``--attempt`` are usage errors.
"""
from __future__ import annotations

import enum
import json
import os
import sys
import time
from collections.abc import Sequence
from contextlib import closing
from typing import Annotated, Any, TextIO
from urllib.parse import quote, urlencode

import typer
from gpuplanectl import render
from gpuplanectl.client import DaemonClient, DaemonUnreachable, NoDaemon
from gpuplanectl.commands import Globals, JsonOption, connect, fail, globals_of, reporting
from gpuplanectl.exit_codes import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, for_job_end

from gpuplaned.protocol.errors import ApiError, ErrorCode

STREAMS = ("stdout", "stderr")
MAX_TAIL = 100_000  # the most lines a page of the API gives
RUN_PREFIX = "run_"
# How long -f keeps trying to get the stream back before it gives up.
RECONNECT_FOR = 30.0
RECONNECT_DELAYS = (0.1, 0.2, 0.5, 1.0, 2.0)
# Answers that mean "the daemon is coming back", worth waiting out like a dropped connection.
TRANSIENT = frozenset({ErrorCode.NOT_READY, ErrorCode.STOPPING, ErrorCode.UNAVAILABLE})
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports `... | head`
DEFAULT_TAIL = 100
FULL_PAGE = 20_000  # lines a page of --full asks for (the API allows up to 100,000)


class Stream(str, enum.Enum):
    stdout = "stdout"
    stderr = "stderr"


def logs(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(metavar="JOB|RUN", help="A job id (job_...), or an imported run's id "
                                          "(run_...): its log files.", show_default=False)],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until the job ends; "
                                         "exit with its exit code.")] = False,
    stream: Annotated[Stream | None, typer.Option("--stream", show_default=False,
                                                  help="Only this stream [default: both].")] = None,
    tail: Annotated[int | None, typer.Option("--tail", "-n", metavar="N", min=0, show_default=False,
                                             help="The last N lines of each stream (a run's: of each file; with "
                                                  f"-f: to start from) [default: {DEFAULT_TAIL}].")] = None,
    full: Annotated[bool, typer.Option("--full", help="The whole file of each stream of the attempt (a remote "
                                       "job's: read through its agent, which must be online).")] = False,
    attempt: Annotated[int | None, typer.Option("--attempt", metavar="K", min=1, show_default=False,
                                                help="An earlier attempt's output [default: the latest]; with -f, follow only that attempt.")] = None,
    json_output: JsonOption = False,
) -> None:
    """Print a job's output; -f follows it live, --full prints it whole. With a run id: an
    imported run's log files.

    With both streams, the job's stderr lines go to stderr. With -f, the exit code is the
    job's: 0 when it SUCCEEDED, its own exit code when it FAILED, 128+N when signal N
    killed it, 1 otherwise (cancelled, timed out, lost); 130 when Ctrl-C stops following.
    With --full, a remote job's node must be online: while its agent is not, only the
    server's stored tail is printed, and the exit code is 1.
    """
    g = globals_of(ctx)
    names = (stream.value,) if stream is not None else STREAMS
    out = _Output(json_output, split=len(names) > 1)
    if target.startswith(RUN_PREFIX):
        _refuse_for_run(target, follow, full, attempt, json_output)
    if full:
        _refuse_with_full(follow, tail, json_output)
    tail = DEFAULT_TAIL if tail is None else tail
    try:
        if target.startswith(RUN_PREFIX):
            code = _print_run_logs(g, target, stream.value if stream is not None else None, tail, out)
        elif full:
            code = _print_full(g, target, names, attempt, out)
        elif follow:
            code = _follow(g, target, names, tail, attempt, out)
        else:
            code = _print_tail(g, target, names, tail, attempt, out)
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python's own final flush quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(EXIT_BROKEN_PIPE) from None
    raise typer.Exit(code)


def run_logs(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="An imported run's id (run_...).", show_default=False)],
    stream: Annotated[Stream | None, typer.Option("--stream", show_default=False,
                                                  help="Only this stream [default: both].")] = None,
    tail: Annotated[int | None, typer.Option("--tail", "-n", metavar="N", min=0, show_default=False,
                                             help=f"The last N lines of each file [default: {DEFAULT_TAIL}].")] = None,
    json_output: JsonOption = False,
) -> None:
    """Print an imported run's log files: the last lines of each."""
    logs(ctx, run_id, stream=stream, tail=tail, json_output=json_output)


class _Output:
    """Prints log lines as they arrive (flushed, so `-f | grep` sees them at once)."""

    def __init__(self, json_output: bool, *, split: bool) -> None:
        self.json = json_output
        self.split = split  # both streams shown: stderr lines go to our stderr

    def line(self, stream: str, text: str) -> None:
        if self.json:
            self._write(sys.stdout, json.dumps({"stream": stream, "line": text}))
        else:
            self._write(sys.stderr if self.split and stream == "stderr" else sys.stdout, text)

    def end(self, job_id: str, end: dict[str, Any]) -> None:
        if self.json:
            self._write(sys.stdout, json.dumps({"end": end}))
        self._write(sys.stderr, render.end_line(job_id, end))

    def note(self, text: str) -> None:
        self._write(sys.stderr, text)

    @staticmethod
    def _write(to: TextIO, text: str) -> None:
        to.write(text + "\n")
        to.flush()


def _path(job_id: str) -> str:
    return f"/api/v1/jobs/{quote(job_id, safe='')}"


def _page(client: DaemonClient, job_id: str, stream: str, tail: int, attempt: int | None) -> dict[str, Any]:
    query: dict[str, Any] = {"stream": stream, "tail": tail}
    if attempt is not None:
        query["attempt"] = attempt
    return client.get(f"{_path(job_id)}/logs?{urlencode(query)}")


def _print_tail(g: Globals, job_id: str, names: Sequence[str], tail: int, attempt: int | None, out: _Output) -> int:
    with reporting(g, out.json):
        client = connect(g)
        pages = {name: _page(client, job_id, name, tail, attempt) for name in names}
    if out.json:
        render.print_json(pages)
        return EXIT_OK
    for name, page in pages.items():
        for line in page["lines"]:
            out.line(name, line["line"])
    return EXIT_OK


def _refuse_for_run(run_id: str, follow: bool, full: bool, attempt: int | None, json_output: bool) -> None:
    """A run's logs are finished files: nothing to follow, no attempts to choose from."""
    if follow:
        fail(json_output, ErrorCode.BAD_REQUEST,
             f"--follow: {run_id} is a run, whose logs are the finished files `run import` registered: there is "
             "nothing to follow", {"field": "follow"}, hint=f"Drop -f: `gpuplanectl run logs {run_id}` prints them.")
    if full:
        fail(json_output, ErrorCode.BAD_REQUEST, f"--full: {run_id} is a run; --full reads a job's log files",
             {"field": "full"}, hint=f"`gpuplanectl run logs {run_id} --tail N` prints the last N lines of its files.")
    if attempt is not None:
        fail(json_output, ErrorCode.BAD_REQUEST, f"--attempt: {run_id} is a run; only a job has attempts",
             {"field": "attempt"})


def _refuse_with_full(follow: bool, tail: int | None, json_output: bool) -> None:
    """--full prints the whole file once: it neither follows nor starts at a tail."""
    if follow:
        fail(json_output, ErrorCode.BAD_REQUEST, "--full and --follow do not go together: --full prints the "
             "whole file as it is now, -f its last lines and then what comes", {"field": "full"},
             hint="Use one of them: `job logs JOB --full`, or `job logs JOB -f --tail N`.")
    if tail is not None:
        fail(json_output, ErrorCode.BAD_REQUEST, "--full and --tail do not go together: --full prints every line",
             {"field": "full"}, hint="Drop --tail for the whole file, or --full for the last N lines.")


def _print_full(g: Globals, job_id: str, names: Sequence[str], attempt: int | None, out: _Output) -> int:
    """Each stream's whole file, page by page; EXIT_FAILURE when only a stored tail could be shown."""
    code = EXIT_OK
    with reporting(g, out.json):
        client = connect(g)
        for name in names:
            code = max(code, _print_full_stream(client, job_id, name, attempt, out))
    return code


def _print_full_stream(client: DaemonClient, job_id: str, stream: str, attempt: int | None, out: _Output) -> int:
    last = -1  # the offset of the last line printed (the stored tail, if it comes to that, goes on after it)
    query: dict[str, Any] = {"stream": stream, "offset": 0, "limit": FULL_PAGE}
    if attempt is not None:
        query["attempt"] = attempt
    while True:
        try:
            page = client.get(f"{_path(job_id)}/logs?{urlencode(query)}")
        except ApiError as exc:
            if exc.code is ErrorCode.UNAVAILABLE and "stored_lines" in exc.details:
                return _print_stored_instead(client, job_id, stream, attempt, last, exc, out)
            raise
        lines = page["lines"]
        fresh = [line for line in lines if line["offset"] > last]
        if fresh:
            _print_page(page, fresh, stream, out)
            last = fresh[-1]["offset"]
        if not fresh or len(lines) < FULL_PAGE or page.get("next_offset") is None:
            return EXIT_OK  # the end of what is written now: a running job's file goes on growing
        query["offset"] = page["next_offset"]


def _print_stored_instead(client: DaemonClient, job_id: str, stream: str, attempt: int | None, last: int,
                          refusal: ApiError, out: _Output) -> int:
    """The node's agent is offline: the stored tail (what follows the lines printed), and why only that."""
    stored = max(0, int(refusal.details.get("stored_lines") or 0))
    node = refusal.details.get("node") or refusal.details.get("node_id") or "?"
    page = _page(client, job_id, stream, min(stored, MAX_TAIL), attempt)
    fresh = [line for line in page["lines"] if line["offset"] > last]
    _print_page(page, fresh, stream, out)
    message = (f"only the last {stored} stored lines of {stream} are shown: node {node}'s agent is offline, and "
               "the whole file is on that node; try again when it is back")
    if out.json:
        print(json.dumps(ApiError(ErrorCode.UNAVAILABLE, message, {**refusal.details, "stream": stream}).body()),
              flush=True)
    else:
        out.note(f"[{message}]")
    return EXIT_FAILURE


def _print_page(page: dict[str, Any], lines: list[dict[str, Any]], stream: str, out: _Output) -> None:
    if out.json:
        print(json.dumps({**page, "lines": lines}), flush=True)
        return
    for line in lines:
        out.line(stream, line["line"])


def _print_run_logs(g: Globals, run_id: str, stream: str | None, tail: int, out: _Output) -> int:
    query: dict[str, Any] = {"tail": tail, **({"stream": stream} if stream else {})}
    with reporting(g, out.json):
        found = connect(g).get(f"/api/v1/runs/{quote(run_id, safe='')}/logs?{urlencode(query)}")
    if out.json:
        render.print_json(found)
        return EXIT_OK
    chosen = [log for log in found["logs"] if stream is None or log["stream"] == stream]
    if not chosen:
        out.note(_no_logs(run_id, stream, found.get("job_id")))
        return EXIT_OK
    codes = [_print_run_log(log, out, header=len(chosen) > 1) for log in chosen]
    return max(codes)


def _print_run_log(log: dict[str, Any], out: _Output, *, header: bool) -> int:
    """One file's lines (escaped), after its ``==> path <==`` line; EXIT_FAILURE when it could not be read."""
    path = render.printable(log["path"])
    if header:
        out.line(log["stream"], f"==> {path} <==")
    if log.get("problem"):
        out.note(f"[{path}: {render.printable(log['problem'])}]")
    if log.get("page") is None:
        return EXIT_FAILURE
    for line in log["page"]["lines"]:
        out.line(log["stream"], render.printable(line["line"]))
    return EXIT_OK


def _no_logs(run_id: str, stream: str | None, job_id: str | None) -> str:
    said = f"run {run_id} has no {stream + ' ' if stream else ''}log files"
    return f"[{said}; it is a run of job {job_id}: gpuplanectl job logs {job_id}]" if job_id else f"[{said}]"


def _follow(g: Globals, job_id: str, names: Sequence[str], tail: int, pinned: int | None, out: _Output) -> int:
    """Print the last ``tail`` lines, then follow; returns the exit code."""
    with reporting(g, out.json):
        client = connect(g)
        # One more line than shown, so the position after the shown ones is known even for
        # --tail 0 (an empty page has no position: it would mean "from the start").
        pages = [_page(client, job_id, name, max(tail, 1), pinned) for name in names]
    attempt = pinned or pages[0].get("attempt") or None  # keep to the attempt the positions belong to
    positions = []
    for name, page in zip(names, pages):
        for line in page["lines"][-tail:] if tail else []:
            out.line(name, line["line"])
        # The SSE resume position is the last line sent (next_offset is where the line after it starts).
        positions.append(page["lines"][-1]["offset"] if page["lines"] else -1)
    resume = ",".join(map(str, positions)) if any(p != -1 for p in positions) else None
    selected = names[0] if len(names) == 1 else "all"

    lost_since: float | None = None
    delays = iter(RECONNECT_DELAYS)
    while True:
        query: dict[str, Any] = {"stream": selected}
        if attempt is not None:
            query["attempt"] = attempt
        path = f"{_path(job_id)}/logs/stream?{urlencode(query)}"
        end = None
        try:
            with closing(client.events(path, last_event_id=resume)) as events:
                lost_since, delays = None, iter(RECONNECT_DELAYS)
                for event in events:
                    if event.event in STREAMS:
                        out.line(event.event, event.data)
                        resume = event.id
                    elif event.event == "end":
                        end = _decode_end(event.data)
                        break
        except DaemonUnreachable as exc:
            lost = str(exc)
        except ApiError as exc:
            if exc.code not in TRANSIENT:
                fail(out.json, exc.code, exc.message, exc.details)
            lost = exc.message
        else:
            lost = "the stream ended before the job did"

        if end is not None:
            status = end.get("status")
            if status in render.ENDED or not isinstance(status, str):
                out.end(job_id, end)
                return for_job_end(end)
            # This attempt ended and the job was queued again (status RETRIED): follow the next one.
            ended = end.get("attempt") or attempt or 1
            if pinned is not None:
                out.note(f"[job {job_id} attempt {ended} ended; the job was retried]")
                return EXIT_FAILURE
            attempt, resume = ended + 1, None
            out.note(f"[job {job_id} attempt {ended} ended; following attempt {attempt}]")
            continue

        # Dropped: reconnect (to whatever daemon now serves the runtime dir) and resume.
        now = time.monotonic()
        if lost_since is None:
            lost_since = now
        if now - lost_since > RECONNECT_FOR:
            fail(out.json, ErrorCode.UNAVAILABLE,
                 f"lost the log stream of {job_id} and could not get it back for {RECONNECT_FOR:g} s: {lost}",
                 {"job_id": job_id, "resume": resume})
        time.sleep(next(delays, RECONNECT_DELAYS[-1]))
        try:
            client = connect(g)
        except NoDaemon:
            pass  # keep the old client: its next try fails fast and counts towards the limit


def _decode_end(data: str) -> dict[str, Any]:
    try:
        end = json.loads(data)
    except ValueError:
        end = None
    return end if isinstance(end, dict) else {"status": None}
