"""``gpuplanectl event-hook --types OOM,RUN_FINISHED [--severity S] [--max-events N] -- CMD...``:
run CMD once per matching event, the way a local agent session gets woken.

CMD gets the event's JSON on stdin and ``GPUPLANE_EVENT_ID``, ``_TYPE``, ``_SEVERITY``,
``_TS``, ``_JOB_ID``, ``_RUN_ID``, ``_NODE_ID``, ``_STEP`` and ``_MESSAGE`` in its
environment (an absent field is an empty variable). Events come from the SSE stream
``/api/v1/events/stream``, filtered by the daemon, resumed with ``Last-Event-ID``.

The cursor: the id of the last event handled, in a file (default under
``$XDG_STATE_HOME/gpuplane/event-hooks/``, ``~/.local/state`` without it, named by the
filter, so two hooks with the same filter share it: give ``--cursor-file`` to keep them
apart). It is written atomically after CMD finished, so a hook killed while CMD runs runs
that event's CMD again when restarted (at least once per crash of the hook itself; exactly
once otherwise), and a restarted hook or daemon resumes after it: nothing twice, nothing
skipped. With no cursor yet the hook starts after the newest matching event (it handles
new ones only) and writes that cursor at once. A CMD that fails (non-zero exit, or cannot
be started) is reported on stderr and the cursor moves past its event all the same: a
hook that retried a failing CMD forever would stop every later event.

A daemon away (killed, restarting) is retried with backoff (at most 5 s apart) for as long
as it takes. ``--max-events N`` exits 0 after N events handled.

``--json``: stdout is the hook's own, one JSON object a line per event handled,
``{"event": {...}, "exit_code": N}`` (``null`` when CMD could not be started), written after
CMD finished; CMD's stdout goes to stderr then, so it cannot break the lines. An error is the
API's error body on stdout, as with every command.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

import typer
from gpuplanectl.client import DaemonUnreachable, NoDaemon
from gpuplanectl.commands import Globals, JsonOption, connect, fail, globals_of, reporting
from gpuplanectl.commands.logs import TRANSIENT

from gpuplaned.protocol.errors import ApiError

BACKOFF = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
FROM_THE_START = "0"  # the stream's "every event": the cursor of a filter that matched none yet
ENV_FIELDS = ("id", "type", "severity", "ts", "job_id", "run_id", "node_id", "step", "message")


def event_hook(
    ctx: typer.Context,
    command: Annotated[list[str], typer.Argument(metavar="-- CMD...", help="What to run for each event.")],
    types: Annotated[str | None, typer.Option("--types", "--type", metavar="TYPE[,TYPE]", show_default=False,
                                              help="Only events of these types, e.g. OOM,RUN_FINISHED.")] = None,
    severity: Annotated[str | None, typer.Option("--severity", metavar="S[,S]", show_default=False,
                                                 help="Only events of this severity: info, warning, critical.")] = None,
    job: Annotated[str | None, typer.Option("--job", metavar="JOB", show_default=False,
                                            help="Only events about this job.")] = None,
    max_events: Annotated[int | None, typer.Option("--max-events", metavar="N", min=1, show_default=False,
                                                   help="Exit 0 after N events.")] = None,
    cursor_file: Annotated[Path | None, typer.Option("--cursor-file", metavar="PATH", show_default=False,
                                                     help="Where the cursor is kept (default: under the "
                                                          "user's state dir, named by the filter).")] = None,
    json_output: JsonOption = False,
) -> None:
    """Run CMD once per matching event (event JSON on stdin, GPUPLANE_EVENT_* in its
    environment), resuming from a durable cursor after a restart of the hook or the daemon.

    --json: one line per event handled, {"event": ..., "exit_code": N}; CMD's stdout goes to stderr.
    """
    g = globals_of(ctx)
    query = {k: v for k, v in (("type", (types or "").upper()), ("severity", (severity or "").lower()),
                               ("job_id", job or "")) if v}
    path = cursor_file or default_cursor_file(query)
    with reporting(g, json_output):
        client = connect(g)
        # Refuses a bad filter (unknown type, severity) before anything is written.
        newest = client.get(f"/api/v1/events?{urlencode({**query, 'limit': 1})}")["events"]
    cursor = read_cursor(path)
    if cursor is None:
        cursor = str(newest[0]["id"]) if newest else FROM_THE_START
        write_cursor(path, cursor)
    handled = 0
    stream_path = "/api/v1/events/stream?" + urlencode(query) if query else "/api/v1/events/stream"
    delays = iter(BACKOFF)
    while True:
        try:
            with closing(client.events(stream_path, last_event_id=cursor)) as stream:
                delays = iter(BACKOFF)
                for sse in stream:
                    if sse.event == "lagged":  # the live feed dropped some: read them from the store
                        break
                    if sse.event != "event" or sse.id is None:
                        continue
                    event = json.loads(sse.data)
                    exit_code = run_command(command, event, stdout=sys.stderr if json_output else None)
                    cursor = sse.id
                    write_cursor(path, cursor)
                    if json_output:
                        _print_line({"event": event, "exit_code": exit_code})
                    handled += 1
                    if max_events is not None and handled >= max_events:
                        raise typer.Exit(0)
        except DaemonUnreachable:
            pass
        except ApiError as exc:
            if exc.code not in TRANSIENT:
                fail(json_output, exc.code, exc.message, exc.details)
        time.sleep(next(delays, BACKOFF[-1]))
        client = _reconnect(g, client)


def _reconnect(g: Globals, old: Any) -> Any:
    try:
        return connect(g)
    except NoDaemon:
        return old  # its next try fails fast; we keep trying


def run_command(command: list[str], event: dict[str, Any], stdout: Any = None) -> int | None:
    """Run CMD for ``event`` (its stdout to ``stdout``, default ours); its exit code, None if it
    could not be started. A failure is reported on stderr, never raised."""
    env = dict(os.environ)
    for name in ENV_FIELDS:
        value = event.get(name)
        env[f"GPUPLANE_EVENT_{name.upper()}"] = "" if value is None else str(value)
    try:
        done = subprocess.run(command, input=json.dumps(event).encode(), env=env, stdout=stdout, check=False)
    except OSError as exc:
        _note(f"event-hook: {command[0]} could not be started for {event.get('id')}: {exc}")
        return None
    if done.returncode != 0:
        _note(f"event-hook: {command[0]} exited {done.returncode} for {event.get('id')} "
              f"({event.get('type')}); going on")
    return done.returncode


def _print_line(value: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()  # a reader waits on each line as it comes


def default_cursor_file(query: dict[str, str], env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    base = Path(env.get("XDG_STATE_HOME") or Path(env.get("HOME") or Path.home()) / ".local" / "state")
    key = hashlib.sha1(json.dumps(query, sort_keys=True).encode()).hexdigest()[:16]
    return base / "gpuplane" / "event-hooks" / f"{key}.cursor"


def read_cursor(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return text or None


def write_cursor(path: Path, cursor: str) -> None:
    """Replace the file atomically and durably: a crash leaves the old cursor or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cursor-")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(cursor + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _note(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()

