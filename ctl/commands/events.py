"""``gpuplanectl events [-f]``: what the daemon noticed (a disk running low, a GPU lost, a job
idling on its GPUs, a process on a GPU it was not given).

Without ``-f``: the newest ``--limit`` events (``GET /api/v1/events``), printed oldest first
so the newest is the last line, like a log. With ``-f``: those, then each new one as it
happens, from the Server-Sent Events stream ``/api/v1/events/stream``, until Ctrl-C (exit
130). Each event's id is where to resume, so a dropped connection (or a restarted daemon)
is picked up again with ``Last-Event-ID``.

The filters map to the API's query parameters, for the list and the stream alike;
``--node`` takes a name or an id (the API filters by id).

``--json`` prints the API's body (``{"events": [...]}``, newest first), or with ``-f`` one
event object per line, oldest first.
"""

from __future__ import annotations

import enum
import json
import os
import sys
import time
from collections.abc import Mapping
from contextlib import closing
from typing import Annotated, Any
from urllib.parse import urlencode

import typer
from gpuplanectl import render
from gpuplanectl.client import DaemonClient, DaemonUnreachable, NoDaemon
from gpuplanectl.commands import Globals, JsonOption, connect, fail, globals_of, reporting
from gpuplanectl.commands.logs import EXIT_BROKEN_PIPE, RECONNECT_DELAYS, RECONNECT_FOR, TRANSIENT
from gpuplanectl.exit_codes import EXIT_INTERRUPTED

from gpuplaned.protocol.errors import ApiError, ErrorCode


class Severity(str, enum.Enum):
    info = "info"
    warning = "warning"
    critical = "critical"


def events(
    ctx: typer.Context,
    severity: Annotated[list[Severity] | None, typer.Option(
        "--severity", metavar="SEVERITY", case_sensitive=False, show_default=False,
        help="Only events of this severity: info, warning or critical (repeatable).")] = None,
    type_: Annotated[str | None, typer.Option("--type", metavar="TYPE[,TYPE]", show_default=False,
                                              help="Only events of these types, e.g. DISK_LOW, GPU_LOST, "
                                                   "GPU_UNDERUTILIZED, GPU_PINNING_VIOLATION.")] = None,
    node: Annotated[str | None, typer.Option("--node", metavar="NODE", show_default=False,
                                             help="Only events of this node (name or id).")] = None,
    job: Annotated[str | None, typer.Option("--job", metavar="JOB", show_default=False,
                                            help="Only events about this job (job_...).")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", metavar="N", min=0,
                                       help="The newest N events (with -f: to start from).")] = 50,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events until Ctrl-C.")] = False,
    json_output: JsonOption = False,
) -> None:
    """List the daemon's events, newest last; -f follows new ones live.

    Columns: TIME, SEVERITY (info, warning, critical), TYPE, NODE, JOB and MESSAGE.
    With -f, Ctrl-C stops following (exit 130).
    """
    g = globals_of(ctx)
    query: dict[str, str] = {}
    if severity:
        query["severity"] = ",".join(dict.fromkeys(s.value for s in severity))
    if type_:
        query["type"] = type_.upper()
    if job:
        query["job_id"] = job
    try:
        with reporting(g, json_output):
            client = connect(g)
            names, node_id = _nodes(client, node)
            if node_id is not None:
                query["node_id"] = node_id
            # The API takes limit >= 1; --limit 0 (follow from now) still asks for one, for its id.
            listed = client.get(f"/api/v1/events?{urlencode({**query, 'limit': max(limit, 1)})}")["events"]
        if not follow:
            _print_list(listed[:limit], names, json_output)
            return
        out = _Printer(json_output, names)
        out.header()
        for event in reversed(listed[:limit]):
            out.event(event)
        # Resume after the newest event listed, or from the first ("0") when none was: an
        # event recorded between the list and the stream is not missed either way.
        resume = str(listed[0]["id"]) if listed and listed[0].get("id") is not None else "0"
        _follow(g, client, query, resume, out)
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python's own final flush quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(EXIT_BROKEN_PIPE) from None


def _nodes(client: DaemonClient, node: str | None) -> tuple[dict[str, str], str | None]:
    """Node names by id (to show names), and the id ``node`` names (None without ``--node``).

    Raises:
        ApiError: ``not_found`` when ``node`` names no node.
    """
    try:
        nodes = client.get("/api/v1/nodes")["nodes"]
    except ApiError as exc:
        if exc.code not in (ErrorCode.UNAVAILABLE, ErrorCode.NOT_FOUND):
            raise
        return {}, node  # a daemon that keeps no node registry: filter by what was given
    names = {n["id"]: n["name"] for n in nodes}
    if node is None:
        return names, None
    for found in nodes:
        if node in (found["id"], found["name"]):
            return names, found["id"]
    known = ", ".join(sorted(names.values())) or "none"
    raise ApiError(ErrorCode.NOT_FOUND, f"no node {node!r} (nodes: {known})", {"node": node})


def _print_list(listed: list[dict[str, Any]], names: Mapping[str, str], json_output: bool) -> None:
    if json_output:
        render.print_json({"events": listed})
    elif listed:
        print(render.event_table(listed, names))
    else:
        print("no events")


class _Printer:
    """Prints followed events as they arrive (flushed, so `-f | grep` sees them at once)."""

    def __init__(self, json_output: bool, names: Mapping[str, str]) -> None:
        self.json = json_output
        self.names = names

    def header(self) -> None:
        if not self.json:
            self._write(render.event_line(None))

    def event(self, event: Mapping[str, Any]) -> None:
        self._write(json.dumps(event) if self.json else render.event_line(event, self.names))

    @staticmethod
    def note(text: str) -> None:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()

    @staticmethod
    def _write(text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def _follow(g: Globals, client: DaemonClient, query: dict[str, str], resume: str | None, out: _Printer) -> None:
    """Print events from the stream until interrupted; reconnects (resuming) when it drops."""
    path = "/api/v1/events/stream" + (f"?{urlencode(query)}" if query else "")
    lost_since: float | None = None
    delays = iter(RECONNECT_DELAYS)
    while True:
        try:
            with closing(client.events(path, last_event_id=resume)) as stream:
                lost_since, delays = None, iter(RECONNECT_DELAYS)
                for sse in stream:
                    if sse.id is not None:
                        resume = sse.id
                    if sse.event == "lagged":  # this follower fell behind; the daemon dropped some
                        out.note(f"[{_skipped(sse.data)} events skipped: reading too slowly; "
                                 f"`events` lists them]")
                        continue
                    if sse.event != "event":
                        continue
                    try:
                        event = json.loads(sse.data)
                    except ValueError:
                        continue
                    if isinstance(event, dict):
                        out.event(event)
            lost = "the daemon closed the event stream"
        except DaemonUnreachable as exc:
            lost = str(exc)
        except ApiError as exc:
            if exc.code not in TRANSIENT:
                fail(out.json, exc.code, exc.message, exc.details)
            lost = exc.message

        # Dropped: reconnect (to whatever daemon now serves the runtime dir) and resume.
        now = time.monotonic()
        if lost_since is None:
            lost_since = now
        if now - lost_since > RECONNECT_FOR:
            fail(out.json, ErrorCode.UNAVAILABLE,
                 f"lost the event stream and could not get it back for {RECONNECT_FOR:g} s: {lost}",
                 {"resume": resume})
        time.sleep(next(delays, RECONNECT_DELAYS[-1]))
        try:
            client = connect(g)
        except NoDaemon:
            pass  # keep the old client: its next try fails fast and counts towards the limit


def _skipped(data: str) -> str:
    try:
        return str(int(json.loads(data)["skipped"]))
    except (ValueError, KeyError, TypeError):
        return "some"
