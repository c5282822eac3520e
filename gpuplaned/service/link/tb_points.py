"""The server's side of the TensorBoard tailer (``actors/tbtail.py``): a pass's points stored
exactly once, and the stored cursors a restarted tailer starts from.

``store_points`` runs inside one write transaction (the store actor's), so for each file the
points, the cuts, the run summary and the file's cursor commit together or not at all; a
daemon killed mid-file resumes from the cursor after the last committed points. Per file,
in TensorBoard's file order:

1. the cursor moves only from the one the node continued from (``tb_cursor_rows.advance``):
   a part resent or read from a stale cursor is skipped and named in ``TbStored.stale``;
2. a series the script also logs with the SDK is the SDK's (``series_owner``): its points
   and cuts are skipped here, so a point is never stored twice;
3. cuts first: a newer file replacing a series from a step on drops the stored points of
   that series from the step (``tsdb.drop_from_step``), and the run summary's count,
   latest, best and loss window of it are made again from what is left;
4. then the new points go into the run's series as SDK points do (``tsdb.ingest``, the run
   summary and its loss events, ``sessions.summarize``), counted in ``runs.tb_points``;
5. records the reader skipped become ``TB_RECORD_SKIPPED`` events (``TB_FILE_REPLACED`` for
   a file read again from its start).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpuplaned import tsdb
from gpuplaned.config import DetectorConfig
from gpuplaned.domain.event_types import TB_FILE_REPLACED, TB_RECORD_SKIPPED
from gpuplaned.protocol import columns
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.ids import new_id
from gpuplaned.protocol.tb_frames import TbCursors, TbFile, TbPoints, TbStored
from gpuplaned.service.api.series_owner import for_tensorboard, recount
from gpuplaned.service.api.sessions import summarize
from gpuplaned.store import event_rows, run_rows, tb_cursor_rows
from gpuplaned.store.connection import Connection
from gpuplaned.store.event_rows import EventRow
from gpuplaned.tsdb.ingest import MAX_BATCH_POINTS

__all__ = ["store_points", "stored_cursors"]


def stored_cursors(conn: Connection, request: TbCursors) -> TbCursors:
    return TbCursors(request.job_id, request.attempt,
                     tuple(tb_cursor_rows.stored(conn, request.job_id, request.attempt)))


def store_points(conn: Connection, batch: TbPoints, now: int,
                 stored: list[dict[str, Any]] | None = None,
                 rules: DetectorConfig = DetectorConfig()) -> tuple[TbStored, list[EventRow]]:
    """Store one tailer pass (a write function); returns the answer and the events to publish
    after the commit. ``stored`` gets each ingested slice's columns (for the live metric feed);
    ``rules``: the daemon's ``[detector]``, as for the SDK's points.

    Raises:
        ApiError: the run is not that job attempt's (nothing stored), or a file's columns
            are not whole (that pass is refused).
    """
    origin = run_rows.origin(conn, batch.run_id)
    if origin is None or (origin.job_id, origin.attempt) != (batch.job_id, batch.attempt):
        raise ApiError(ErrorCode.NOT_FOUND, f"run {batch.run_id} is not attempt {batch.attempt} of job {batch.job_id}",
                       {"run_id": batch.run_id})
    node_id = origin.node_id
    stale: list[str] = []
    events: list[EventRow] = []
    problems: list[EventRow] = []
    for part in batch.files:
        read = tb_cursor_rows.advance(conn, batch.job_id, batch.attempt, part.path, part.after, part.cursor,
                                      part.rewinds, now)
        if read is None:
            stale.append(part.path)
            continue
        decoded = _columns(part)
        # The series the script also logs with the SDK are the SDK's (series_owner): skipped here.
        ours = for_tensorboard(conn, batch.run_id, {*decoded, *(name for name, _ in part.cuts)})
        for name, step in part.cuts:
            if name in ours and tsdb.drop_from_step(conn, batch.run_id, name, step):
                recount(conn, batch.run_id, name)
        kept = {name: cols for name, cols in decoded.items() if name in ours}
        # One ingest per slice of at most a batch's points: a first read of a big file is one part.
        # Named by the read's number, not its offsets: those repeat in a file truncated and
        # written anew under the same inode, whose points would then be taken for old ones.
        for piece, metrics in enumerate(_slices(kept, MAX_BATCH_POINTS)):
            source = f"tb:{batch.job_id}/{batch.attempt}:{piece}:{part.path}"
            try:
                result = tsdb.ingest(conn, "run", batch.run_id, metrics, source=source, seq=read, now_ms=now)
            except ValueError as exc:
                raise ApiError(ErrorCode.BAD_REQUEST, f"{part.path}: {exc}", {"field": "files"}) from None
            if not result.duplicate:
                if stored is not None:
                    stored.append(metrics)
                events += summarize(conn, batch.run_id, metrics, now, rules)
                tb_cursor_rows.count_points(conn, batch.run_id, result.points)
        problems += _problems(batch, part, node_id, now)
    event_rows.insert_events(conn, problems)
    return TbStored(batch.job_id, batch.attempt, tuple(stale)), events + problems


def _columns(part: TbFile) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for series in part.series:
        try:
            out[series.name] = {key: columns.decode(getattr(series, key), key) for key in ("step", "ts", "value")}
        except ValueError as exc:
            raise ApiError(ErrorCode.BAD_REQUEST, f"{part.path}: {series.name}: {exc}", {"field": "files"}) from None
    return out


def _slices(metrics: dict[str, dict[str, Any]], limit: int) -> Iterator[dict[str, dict[str, Any]]]:
    """``metrics`` in pieces of at most ``limit`` points (a series cut where it must be)."""
    piece: dict[str, dict[str, Any]] = {}
    room = limit
    for name, cols in metrics.items():
        start, n = 0, len(cols["ts"])
        while start < n:
            take = min(room, n - start)
            piece[name] = {k: v[start:start + take] for k, v in cols.items()}
            start += take
            room -= take
            if not room:
                yield piece
                piece, room = {}, limit
    if piece:
        yield piece


def _problems(batch: TbPoints, part: TbFile, node_id: str | None, now: int) -> list[EventRow]:
    rows = []
    for problem in part.problems:
        if problem.what == "file replaced":
            kind, severity, message = TB_FILE_REPLACED, "info", f"{part.path} is another file now: read from its start"
        else:
            kind, severity = TB_RECORD_SKIPPED, "warning"
            message = f"skipped a record of {part.path} at byte {problem.offset}: {problem.what}"
        rows.append(EventRow(new_id("ev"), now, kind, severity, node_id, batch.job_id, batch.run_id, None, message,
                             {"path": part.path, "offset": problem.offset, "problem": problem.what}))
    return rows
