"""What an import-run answers: the run a finished run's dir made (or each of them, and their sum),
what this call added, what the run holds from the dir, and what was skipped."""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.run_wire import Run


@attrs.frozen(kw_only=True)
class ImportCounts:
    points: int = doc("metric points")
    checkpoints: int
    logs: int = doc("log files")


@attrs.frozen(kw_only=True)
class ImportedCounts:
    points: int = doc("metric points, each series' rewinds resolved as TensorBoard does")
    series: int
    checkpoints: int
    logs: int = doc("log files")


@attrs.frozen(kw_only=True)
class ImportedLog:
    path: str
    stream: str = doc(enum=("stdout", "stderr"))
    size_bytes: int
    lines: int


@attrs.frozen(kw_only=True)
class ImportProblem:
    path: str = doc("the event file (for a series skipped whole: its name)")
    offset: int = doc("the byte offset of the record skipped")
    what: str = doc("bad data crc, bad length crc, ends in a half-written record...")


@attrs.frozen(kw_only=True)
class ImportedRun:
    run: Run
    run_id: str
    dir: str | None = doc("the dir's realpath: the import's key")
    created: bool = doc("false: the dir was imported before, into this run")
    changed: bool = doc("the dir's files changed since it was imported; the run is as it was imported")
    added: ImportCounts = doc("what this call stored: nothing for a dir imported before")
    imported: ImportedCounts = doc("what the run holds from the dir")
    logs: list[ImportedLog] = doc("the stdout and stderr logs registered, never copied")
    problems: list[ImportProblem] = doc("records skipped, the rest of their files imported")
    more_problems: int = doc("problems beyond those listed")


@attrs.frozen(kw_only=True)
class ImportReply(ImportedRun):
    """One run's import, or (a dir of several runs) their sum, with run and run_id the first's."""

    runs: list[ImportedRun] = doc("each run the dir made: one per folder holding a run, as tensorboard --logdir "
                                  "shows them (the dir itself for a dir that is one run)")
