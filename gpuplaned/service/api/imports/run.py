"""``import-run``: a finished run's dir (TensorBoard event files, checkpoints, stdout logs)
made a run with source ``import`` (``POST /api/v1/runs/import``, ``gpuplanectl run import``).

The daemon reads the dir on its own host, as ``ckpt verify`` reads a checkpoint, read-only and
on a worker thread (``import_scan``), so a large dir never blocks the event loop; then it
stores what it read in bounded writes: points go through ``tsdb.ingest`` as the run's series,
``BATCH_POINTS`` at a time, each folded into the run's summary in the same transaction as
SDK batches are (``sessions.summarize``); checkpoints are registered as the watcher's are,
with a CHECKPOINT_CREATED event each (``run_records.store_imported``); logs are registered
as the run's log artifacts (``store.import_rows``).

**Exactly once.** The run's key is the dir's realpath (``runs.import_key``): importing a dir
imported before adds nothing and answers that run. Each points batch is stored once per
(source, seq), the source naming the run and the dir's signature, and checkpoints and logs
once per path, so an import interrupted half-way (the daemon stopped) is finished by
importing the dir again, and two imports of one dir at once store everything once.

**A dir of several runs** (``import_scan.runs_in``: a sweep's folder, Lightning's
``version_*``, as ``tensorboard --logdir`` shows them) is imported as one run per folder, each
keyed and imported as if it were given alone, in one experiment (``experiment``, else the
dir's name), named by its folder relative to the dir (after ``name/`` when a name is given).
The reply's top level adds them up (``run`` and ``run_id`` are the first's) and ``runs`` has
each; checkpoints and logs outside every run's folder are told as problems, not imported.

**A dir that changed since.** A finished import is never read again: the reply says
``changed`` (the dir's files, sizes or mtimes differ from those imported) and the run stays
as it was imported; import a copy of the dir (another path) to get a second run. An
interrupted import whose dir changed since is refused (409): its batches would no longer
line up with those stored.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from gpuplaned import tsdb
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.fields import field
from gpuplaned.protocol.import_replies import (
    ImportCounts,
    ImportedCounts,
    ImportedLog,
    ImportedRun,
    ImportProblem,
    ImportReply,
)
from gpuplaned.service import access
from gpuplaned.service.api.imports import scan as import_scan
from gpuplaned.service.api.imports.scan import ImportRefused, Points, Runs, Survey
from gpuplaned.service.api.run_records import store_imported
from gpuplaned.service.api.sessions import summarize
from gpuplaned.service.link.registry import now_ms
from gpuplaned.service.passes.checkpoint_arrival import checkpoints_arrived
from gpuplaned.store import import_rows, run_rows
from gpuplaned.store.event_rows import EventRow
from gpuplaned.store.writer import write
from gpuplaned.tensorboard.events import Columns

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

BATCH_POINTS = 50_000  # points per write transaction: other writes wait at most one of these
MAX_PROBLEMS = 100  # told in the reply and kept on the run; the rest are counted
MAX_NAME = 200  # characters of a run's name (RunImport.name's limit)
T = TypeVar("T")


def _text(description: str) -> Any:
    return field(default=None, min_length=1, max_length=200, description=description,
                 message="a string of 1 to 200 characters")


@attrs.frozen(kw_only=True)
class RunImport:
    dir: str = field(min_length=2, max_length=4096, pattern="^/[^\\x00]*$",
                     message="an absolute path on the daemon's host",
                     description="the finished run's dir, an absolute path on the daemon's host (read there)")
    project: str | None = _text("the project's name (made on first use)")
    experiment: str | None = _text("the experiment's name (made on first use; without project=, in \"default\")")
    name: str | None = _text("the run's name; absent: the dir's name")


def _store(shared: ServerContext) -> Any:
    return access.store_port(shared, "runs")


async def import_run(shared: ServerContext, body: RunImport) -> ImportReply:
    """Import ``body.dir`` (once): one run, or one per run folder it holds; the runs and what
    this call added.

    Raises:
        ApiError: bad_request naming the problem (no such dir, not a dir, nothing to import,
            an unreadable file), nothing written; conflict for an interrupted import whose
            dir changed since.
    """
    runs: Runs = await _refused_as_400(import_scan.runs_in, body.dir)
    if runs.dirs == [runs.root]:
        one = await _import_one(shared, body)
        return ImportReply(**attrs.asdict(one, recurse=False), runs=[one])
    experiment = body.experiment or os.path.basename(runs.root)
    replies = []
    for folder in runs.dirs:
        named = os.path.relpath(folder, runs.root)
        replies.append(await _import_one(shared, RunImport(
            dir=folder, project=body.project, experiment=experiment,
            name=(f"{body.name}/{named}" if body.name else named)[:MAX_NAME])))
    outside = [ImportProblem(path=p, offset=0, what="in none of the dir's run folders: not imported")
               for p in runs.outside]
    problems = [p for r in replies for p in r.problems] + outside
    return ImportReply(run=replies[0].run, run_id=replies[0].run_id, dir=runs.root,
                       created=any(r.created for r in replies), changed=any(r.changed for r in replies),
                       added=_summed(ImportCounts, [r.added for r in replies]),
                       imported=_summed(ImportedCounts, [r.imported for r in replies]),
                       logs=[log for r in replies for log in r.logs], problems=problems[:MAX_PROBLEMS],
                       more_problems=sum(r.more_problems for r in replies) + max(0, len(problems) - MAX_PROBLEMS),
                       runs=replies)


def _summed(cls: type[T], counts: list[T]) -> T:
    """Each count of ``cls`` added up over ``counts``."""
    return cls(**{a.name: sum(getattr(c, a.name) for c in counts) for a in attrs.fields(cls)})


async def _refused_as_400(read: Callable[[str], Any], path: str) -> Any:
    try:
        return await trio.to_thread.run_sync(read, path)
    except ImportRefused as exc:
        raise ApiError(ErrorCode.BAD_REQUEST, f"dir: {exc}", {"field": "dir", "path": exc.path}) from None


async def _import_one(shared: ServerContext, body: RunImport) -> ImportedRun:
    """Import ``body.dir`` as one run (once)."""
    found: Survey = await _refused_as_400(import_scan.survey, body.dir)
    claim = await write(_store(shared), lambda conn: import_rows.claim(
        conn, found.root, found.signature, name=body.name, project=body.project, experiment=body.experiment,
        now_ms=now_ms()), small=True)
    stored_signature = claim.record.get("signature")
    if claim.finished:
        return await _reply(shared, claim.run_id, created=False, changed=stored_signature != found.signature,
                            added=_counts(), record=claim.record)
    if stored_signature != found.signature:
        raise ApiError(ErrorCode.CONFLICT, f"dir: {found.root} changed since its import into run {claim.run_id} "
                                           "was interrupted; import a copy of it under another path",
                       {"field": "dir", "run_id": claim.run_id})
    points: Points = await trio.to_thread.run_sync(import_scan.read_points, found.events)
    added_points = await _store_points(shared, claim.run_id, found.signature, points)
    now = now_ms()
    checkpoint_events = await write(_store(shared), lambda conn: store_imported(conn, claim.run_id,
                                                                                found.checkpoints, now))
    _publish(shared, checkpoint_events)
    checkpoints_arrived(shared, checkpoint_events)  # as every registration path does (no job: no policies)
    logs = [(log.path, {"stream": log.stream, "size_bytes": log.size_bytes, "lines": log.lines})
            for log in found.logs]
    added_logs = await write(_store(shared), lambda conn: import_rows.add_logs(conn, claim.run_id, logs, now),
                             small=True)
    skipped = found.problems + points.problems
    problems = [attrs.asdict(p) for p in skipped[:MAX_PROBLEMS]]
    record = {"dir": found.root, "points": sum(len(c) for c in points.series.values()), "series": len(points.series),
              "checkpoints": len(found.checkpoints), "logs": len(found.logs), "records": points.records,
              "problems": problems, "more_problems": max(0, len(skipped) - MAX_PROBLEMS)}
    started, finished = _span(points, found)
    await write(_store(shared), lambda conn: import_rows.finish(conn, claim.run_id, record, started_at=started,
                                                                finished_at=finished, now_ms=now_ms()), small=True)
    return await _reply(shared, claim.run_id, created=claim.created, changed=False,
                        added=_counts(added_points, len(checkpoint_events), added_logs), record=record)


def _batches(series: dict[str, Columns]) -> Iterator[dict[str, dict[str, list]]]:
    """The points as ingest batches of at most BATCH_POINTS, cut the same way for the same points
    (series by name, each in order): a resumed import stores the same (source, seq)s again."""
    import numpy as np  # loaded by the event files' reader already: a lookup

    batch: dict[str, dict[str, list]] = {}
    size = 0
    for name in sorted(series):
        cols = series[name]
        ts = np.rint(cols.walls * 1000.0).astype(np.int64)
        start = 0
        while start < len(cols):
            end = min(len(cols), start + BATCH_POINTS - size)
            batch[name] = {"step": cols.steps[start:end].tolist(), "ts": ts[start:end].tolist(),
                           "value": cols.values[start:end].tolist()}
            size += end - start
            start = end
            if size >= BATCH_POINTS:  # full: the rest of this series starts the next one
                yield batch
                batch, size = {}, 0
    if batch:
        yield batch


async def _store_points(shared: ServerContext, run_id: str, signature: str, points: Points) -> int:
    """Store the points batch by batch, each once; returns how many were new."""
    source = f"import:{run_id}:{signature.removeprefix('sha1:')[:16]}"
    added = 0
    for seq, metrics in enumerate(_batches(points.series)):

        def apply(conn: Any, seq: int = seq, metrics: dict = metrics) -> tuple[int, list[EventRow]]:
            result = tsdb.ingest(conn, "run", run_id, metrics, source=source, seq=seq)
            if result.duplicate:
                return 0, []
            return result.points, summarize(conn, run_id, metrics, now_ms(), shared.config.detector)

        new, events = await write(_store(shared), apply)
        added += new
        _publish(shared, events)
    return added


def _publish(shared: ServerContext, events: list[EventRow]) -> None:
    for event in events:  # after the commit: followers never see an event that was rolled back
        shared.event_feed.publish(event)


def _span(points: Points, found: Survey) -> tuple[int | None, int | None]:
    """When the run ran, by its files: its first and last points (else its checkpoints' mtimes)."""
    walls = [w for cols in points.series.values() if len(cols) for w in (cols.walls.min(), cols.walls.max())]
    if walls:
        return int(min(walls) * 1000), int(max(walls) * 1000)
    mtimes = [ck.mtime_ms for ck in found.checkpoints]
    return (min(mtimes), max(mtimes)) if mtimes else (None, None)


def _counts(points: int = 0, checkpoints: int = 0, logs: int = 0) -> ImportCounts:
    return ImportCounts(points=points, checkpoints=checkpoints, logs=logs)


async def _reply(shared: ServerContext, run_id: str, *, created: bool, changed: bool, added: ImportCounts,
                 record: dict[str, Any]) -> ImportedRun:
    """The run as its import record (kept on the run) tells it."""

    def read(conn: Any) -> tuple[Any, list[dict[str, Any]]]:
        return run_rows.get_run(conn, run_id), import_rows.list_logs(conn, run_id)

    run, logs = await access.readers(shared, "runs").run(read)
    imported = ImportedCounts(points=record.get("points", 0), series=record.get("series", 0),
                              checkpoints=record.get("checkpoints", 0), logs=record.get("logs", 0))
    return ImportedRun(run=run, run_id=run_id, dir=record.get("dir"), created=created, changed=changed, added=added,
                       imported=imported, logs=[ImportedLog(**log) for log in logs],
                       problems=[ImportProblem(**problem) for problem in record.get("problems", [])],
                       more_problems=record.get("more_problems", 0))
