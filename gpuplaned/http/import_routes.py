"""The routes of ``import-run``: a finished run's dir made a run (``gpuplaned.service.api.imports.run``),
and that run's logs read back (``gpuplaned.service.api.run_logs``).

The import is a write (the ``write`` scope on the HTTP front), reading the logs a read. The
dir is read on the daemon's host, so the path is one there; ``gpuplanectl run import`` sends
the absolute path of its argument.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response
from quart_trio import QuartTrio

from gpuplaned.http.queries import RunLogsQuery
from gpuplaned.http.responses import ok
from gpuplaned.http.routes import Param, Reply, Routes
from gpuplaned.protocol.fields import UNSET
from gpuplaned.protocol.import_replies import ImportReply
from gpuplaned.protocol.log_replies import RunLogs
from gpuplaned.service.api import run_logs
from gpuplaned.service.api.imports import run as import_run
from gpuplaned.service.api.imports.run import RunImport

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


api = Routes("runs")

IMPORT = api.post("/api/v1/runs/import", "importRun",
                  "Import a finished run's dir: TensorBoard event files, checkpoints and stdout logs",
                  Reply(201, ImportReply, "The imported run; the same run, nothing added, for a dir imported "
                                          "before."),
                  errors=(400, 409, 413), body=RunImport,
                  description="The daemon reads the dir on its own host. A dir holding several runs (folders "
                              "with event files, none below another: a sweep's, Lightning's versions) makes one run "
                              "per folder, in one experiment (experiment=, else the dir's name), named by its folder; "
                              "what lies outside them is told in problems. Each run is keyed by its realpath: "
                              "importing it again adds nothing (an interrupted import is finished by importing "
                              "again; 409 if the dir changed in between). 400 names the problem: no such dir, not a "
                              "dir, no event files and no checkpoints, a file that cannot be read.")
LOGS = api.get("/api/v1/runs/<run_id>/logs", "getRunLogs", "An imported run's stdout and stderr files and their lines",
               Reply(200, RunLogs, "Every log file of the run with its state, and the lines of those selected."),
               errors=(400, 404), params=(Param("run_id", "the run's id (run_<ULID>)"),), query=RunLogsQuery,
               tag="logs",
               description="The files import-run registered, read on the daemon's host as they are now: each says "
                           "whether it changed since the import (read as it is now), is gone or unreadable. Without "
                           "offset: the last tail lines of each file selected (path=, stream=), read from its end. "
                           "With offset (one file): the lines from that byte offset on (after it, when > 0), up to "
                           "limit. A run without logs (a job's run: see its job's logs) has an empty list. 404: an "
                           "unknown run, or a path that is none of its logs.")


def register(app: QuartTrio, shared: ServerContext) -> None:
    @IMPORT.on(app)
    async def import_dir(body: RunImport) -> Response:
        return ok(await import_run.import_run(shared, body), 201)

    @LOGS.on(app)
    async def run_log_files(run_id: str, query: RunLogsQuery) -> Response:
        selection = run_logs.Selection(path=query.path or None, stream=query.stream, tail=query.tail,
                                       offset=None if query.offset is UNSET else query.offset, limit=query.limit)
        return ok(await run_logs.read_logs(shared, run_id, selection))
