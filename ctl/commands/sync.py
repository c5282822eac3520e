"""``gpuplanectl sync``: deliver the training metrics the SDK spooled while no daemon answered.

A training script that could not reach the daemon (none running, or it died mid-run) leaves
its batches in ``$GPUPLANE_HOME/spool/sdk-<session>.jsonl`` (default
``~/.local/share/gpuplane/spool``). The daemon replays that dir when it starts; ``sync``
replays it now, to the local daemon or the one ``--server`` names, and says per file what it
stored. Replaying is exactly once: the daemon keeps each (session, batch seq) once, so a file
replayed again, or one the script had partly delivered itself, stores nothing twice.

A file whose script is still running is locked by it and skipped (``busy``): the script
replays it itself once the daemon answers. A fully replayed file is removed; one with
unreadable lines is kept as ``*.jsonl.corrupt`` after the rest was replayed, and each such
line is named in a warning on stderr. ``--json`` prints ``{"dir", "files": [...], "points",
"batches", "duplicates"}``. Exit 0 when nothing is left to do (busy files aside), 1 when a
file could not be replayed to its end (it stays for the next sync) or no daemon runs, 2
when ``--dir`` names no directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from gpuplanectl import render
from gpuplanectl.client import DaemonClient, DaemonUnreachable
from gpuplanectl.commands import JsonOption, connect, fail, globals_of, reporting
from gpuplanectl.exit_codes import EXIT_FAILURE

from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.sdk_spool import FileReport, Refused, Step, default_spool_dir, replay_file, spool_files


def sync(
    ctx: typer.Context,
    directory: Annotated[str | None, typer.Option(
        "--dir", metavar="DIR", show_default=False,
        help="The spool dir [default: $GPUPLANE_HOME/spool, else ~/.local/share/gpuplane/spool].")] = None,
    json_output: JsonOption = False,
) -> None:
    """Replay the SDK's spooled metrics (left while no daemon answered) into the daemon."""
    g = globals_of(ctx)
    where = Path(directory).expanduser().absolute() if directory else default_spool_dir(os.environ)
    if directory and not where.is_dir():  # the default dir is made only once a script spools
        fail(json_output, ErrorCode.BAD_REQUEST, f"--dir {where}: no such directory", {"field": "dir"})
    files = spool_files(where)
    reports: list[FileReport] = []
    if files:
        with reporting(g, json_output):
            client = connect(g)
            for path in files:
                report = replay_file(path, _sender(client))
                reports.append(report)
                for warning in report.warnings:
                    print(f"warning: {render.printable(warning)}", file=sys.stderr)
                if report.status == "interrupted":  # the daemon went away or is stopping: later
                    reports.extend(FileReport(str(p), None, status="pending") for p in files[len(reports):])
                    break
    summary = _summary(where, reports)
    if json_output:
        render.print_json(summary)
    else:
        _print(where, reports, summary)
    if any(r.status in ("interrupted", "failed", "pending") for r in reports):
        raise typer.Exit(EXIT_FAILURE)


def _sender(client: DaemonClient) -> Any:
    def send(step: Step) -> Any:
        try:
            return client.post(step.path, step.body)
        except ApiError as exc:
            raise Refused(exc.code.http_status, exc.message) from None
        except DaemonUnreachable as exc:
            raise ConnectionError(str(exc)) from None

    return send


def _summary(where: Path, reports: list[FileReport]) -> dict[str, Any]:
    return {"dir": str(where), "files": [r.to_json() for r in reports],
            "points": sum(r.points for r in reports), "batches": sum(r.batches for r in reports),
            "duplicates": sum(r.duplicates for r in reports)}


def _print(where: Path, reports: list[FileReport], summary: dict[str, Any]) -> None:
    shown = render.printable(str(where))
    if not reports:
        print(f"nothing to sync in {shown}")
        return
    for r in reports:
        name = render.printable(Path(r.file).name)
        if r.status == "replayed":
            ended = f"finished {r.finished}" if r.finished else "not finished (its process ended without saying)"
            refused = f", {r.rejected} refused" if r.rejected else ""
            print(f"{name}: run {r.run_id}: {r.batches} batch(es) stored ({r.points} points), "
                  f"{r.duplicates} already there{refused}; {ended}")
            if r.kept:
                print(f"{name}: had unreadable lines {', '.join(map(str, r.corrupt_lines))}; "
                      f"kept as {render.printable(r.kept)}")
        elif r.status == "busy":
            print(f"{name}: busy: its process is still running and delivers it itself")
        elif r.status == "gone":
            print(f"{name}: replayed meanwhile by someone else")
        elif r.status == "pending":
            print(f"{name}: not tried (the daemon went away)")
        else:
            print(f"{name}: {r.status}: {render.printable(r.error or '')}; it stays for the next sync")
    done = sum(r.status == "replayed" for r in reports)
    print(f"synced {done} of {len(reports)} spool file(s) in {shown}: {summary['points']} point(s) stored")
