"""``gpuplanectl run import DIR`` (``import-run``, the hidden old spelling): a finished run's dir
(TensorBoard event files, checkpoints, stdout logs) made a run with source ``import``
(``POST /api/v1/runs/import``).

The daemon reads the dir on its own host: with the local daemon a relative DIR is taken from
here (this machine is the daemon's); with ``--server`` it must be absolute, a path on the
server's host. Importing the same dir again adds nothing and prints the same run id. A dir
holding several runs (a folder each, as ``tensorboard --logdir`` shows them) makes a run of
each, in one experiment (``--experiment``, else the dir's name). Prints the run id (one a
line) on stdout (``--json``: the API's body: the runs, what was added and imported, the
records skipped); what was skipped and a dir changed since its import go to stderr.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer
from gpuplanectl import render
from gpuplanectl.commands import JsonOption, connect, fail, globals_of, reporting

from gpuplaned.protocol.errors import ErrorCode

IMPORT_TIMEOUT = 600.0  # a large dir: the daemon reads and stores it before it answers


def import_run(
    ctx: typer.Context,
    directory: Annotated[str, typer.Argument(metavar="DIR", help="The run's dir: TensorBoard event files, "
                                             "checkpoints, *.log / stdout*.txt logs.", show_default=False)],
    project: Annotated[str | None, typer.Option("--project", "-p", metavar="P", show_default=False,
                                                help="The project (made on first use).")] = None,
    experiment: Annotated[str | None, typer.Option("--experiment", "-e", metavar="E", show_default=False,
                                                   help="The experiment (made on first use).")] = None,
    name: Annotated[str | None, typer.Option("--name", metavar="N", show_default=False,
                                             help="The run's name [default: the dir's name].")] = None,
    json_output: JsonOption = False,
) -> None:
    """Import a finished TensorBoard log dir, its logs and checkpoints as a run; print its id."""
    g = globals_of(ctx)
    with reporting(g, json_output):
        remote = g.remote is not None
        path = os.path.expanduser(directory)
        if not os.path.isabs(path):
            if remote:
                fail(json_output, ErrorCode.BAD_REQUEST, f"dir: {directory} is relative; the server reads it on "
                                                         "its own host, so give an absolute path there",
                     {"field": "dir"})
            path = os.path.abspath(path)
        body = {"dir": path, **{k: v for k, v in (("project", project), ("experiment", experiment),
                                                  ("name", name)) if v is not None}}
        found = connect(g, timeout=IMPORT_TIMEOUT).post("/api/v1/runs/import", body)
    if json_output:
        render.print_json(found)
        return
    for run in found.get("runs") or [found]:  # a dir of several runs: one id a line
        print(run["run_id"])
    for problem in found["problems"]:
        print(f"skipped: {render.printable(problem['path'])} at byte {problem['offset']}: {problem['what']}",
              file=sys.stderr)
    if found["more_problems"]:
        print(f"skipped: {found['more_problems']} more records", file=sys.stderr)
    if not found["created"]:
        if found["changed"]:
            said = ("changed since it was imported; the run is as it was imported (import a copy under another "
                    "path for a new run)")
        elif any(found["added"].values()):
            said = "an interrupted import of it is finished"
        else:
            said = "imported before; nothing added"
        print(f"{render.printable(found['dir'] or path)}: {said}", file=sys.stderr)
