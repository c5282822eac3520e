"""SDK sessions for the API: open one on a run, take its metric batches exactly once, finish it.

A batch is answered only after its transaction has committed, and a (session, seq) already
stored is answered ``duplicate: true`` and stored nothing: the SDK resends what was not
acknowledged, and nothing is lost or counted twice. The SDK names its session itself (a
UUIDv7, so that it can spool batches before any daemon answers); opening a session that
exists returns it, so a spool replayed later, or twice, lands in the same session and run.
A batch already stored is a duplicate even once its session has finished (a replay that was
interrupted after the finish and run again).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from gpuplaned import tsdb
from gpuplaned.domain import run_summary
from gpuplaned.domain.run_records import CheckpointRecord, ScriptEvent, parse_checkpoints, parse_events
from gpuplaned.domain.run_summary import direction_for
from gpuplaned.protocol import columns
from gpuplaned.protocol.bodies import known_object
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.ids import new_id
from gpuplaned.protocol.sdk_spool import SESSION_ID
from gpuplaned.service import access
from gpuplaned.service.registry import now_ms
from gpuplaned.service.run_records import store_records
from gpuplaned.store import event_rows
from gpuplaned.store import session_rows
from gpuplaned.store.event_rows import EventRow
from gpuplaned.store.session_rows import Session, SessionRequest
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext

FINISH_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_FIELDS = {"session_id", "run_id", "job_id", "name", "project", "experiment", "config", "tags", "rank", "host", "pid"}


def _bad(field: str, message: str) -> ApiError:
    return ApiError(ErrorCode.BAD_REQUEST, f"{field}: {message}", {"field": field})


def _text(body: Mapping[str, Any], field: str, limit: int = 200) -> str | None:
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= limit:
        raise _bad(field, f"a string of 1 to {limit} characters")
    return value


def _int(body: Mapping[str, Any], field: str) -> int | None:
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 31:
        raise _bad(field, "a non-negative integer")
    return value


def parse_session(body: Any) -> SessionRequest:
    known_object(body, _FIELDS)
    run_id = _text(body, "run_id", 100)
    if run_id is not None and not _RUN_ID.match(run_id):
        raise _bad("run_id", "letters, digits, '_', '.' and '-' (at most 100)")
    session_id = body.get("session_id")
    if session_id is not None and (not isinstance(session_id, str) or not SESSION_ID.match(session_id)):
        raise _bad("session_id", "a UUIDv7 in lower-case hex (8-4-4-4-12)")
    config = body.get("config")
    if config is not None and not isinstance(config, Mapping):
        raise _bad("config", "a JSON object")
    tags = body.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) and 0 < len(t) <= 100 for t in tags) or len(tags) > 100:
        raise _bad("tags", "a list of at most 100 strings")
    return SessionRequest(run_id, _text(body, "job_id", 100), _text(body, "name"), _text(body, "project"),
                          _text(body, "experiment"), dict(config) if config else None, tuple(tags),
                          _int(body, "rank"), _text(body, "host"), _int(body, "pid"), session_id)


def _store(shared: DaemonContext) -> Any:
    return access.store_port(shared, "runs")


async def open_session(shared: DaemonContext, body: Any) -> Session:
    req = parse_session(body)
    return await write(_store(shared), lambda conn: session_rows.open_session(conn, req, now_ms()))


@attrs.frozen
class Batch:
    seq: int
    metrics: dict[str, Any]
    events: list[ScriptEvent]
    checkpoints: list[CheckpointRecord]


BATCH_ENCODINGS = ("json", "base64")


def parse_batch(body: Any) -> Batch:
    known_object(body, {"seq", "metrics", "events", "checkpoints", "encoding"})
    seq = body.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 1 << 62:
        raise _bad("seq", "a non-negative integer, one per batch of the session")
    metrics = body.get("metrics")
    if not isinstance(metrics, Mapping):
        raise _bad("metrics", 'an object: {"name": {"step": [...], "ts": [...], "value": [...]}}')
    encoding = body.get("encoding", "json")
    if encoding not in BATCH_ENCODINGS:
        raise _bad("encoding", f"json (numbers) or base64 (packed little-endian columns), not {encoding!r}")
    metrics = _decoded(metrics) if encoding == "base64" else dict(metrics)
    return Batch(seq, metrics, parse_events(body), parse_checkpoints(body))


def _decoded(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Base64 columns made arrays (the rest is left to the store's checks)."""
    out: dict[str, Any] = {}
    for name, cols in metrics.items():
        if not isinstance(cols, Mapping):
            out[name] = cols
            continue
        decoded = dict(cols)
        for key, text in cols.items():
            try:
                decoded[key] = columns.decode(text, key)
            except ValueError as exc:
                raise _bad("metrics", f"{str(name)[:200]}.{str(key)[:20]}: {exc}") from None
        out[name] = decoded
    return out


async def add_batch(shared: DaemonContext, session_id: str, body: Any) -> dict[str, Any]:
    """Store a batch of run metrics, script events and checkpoints once; answered after the commit."""
    batch = parse_batch(body)
    seq, metrics = batch.seq, batch.metrics

    def apply(conn: Any) -> dict[str, Any]:
        session = session_rows.require_open(conn, session_id)
        if session.status != "OPEN":
            if session_rows.batch_stored(conn, session_id, seq):
                return {"seq": seq, "duplicate": True, "points": 0}, []
            raise ApiError(ErrorCode.CONFLICT, f"session {session_id} has finished", {"session_id": session_id})
        try:
            result = tsdb.ingest(conn, "run", session.run_id, metrics, source=session_id, seq=seq)
        except ValueError as exc:
            raise ApiError(ErrorCode.BAD_REQUEST, f"metrics: {exc}", {"field": "metrics"}) from None
        events: list[EventRow] = []
        if not result.duplicate:
            now = now_ms()
            session_rows.record_batch(conn, session_id, seq, result.points)
            if metrics:
                events = summarize(conn, session.run_id, metrics, now)
            if batch.events or batch.checkpoints:
                job = conn.execute("SELECT job_id FROM runs WHERE id = ?", (session.run_id,)).fetchone()
                events += store_records(conn, session.run_id, job[0] if job else None, batch.events,
                                        batch.checkpoints, now)
        return {"seq": seq, "duplicate": result.duplicate, "points": result.points}, events

    reply, events = await write(_store(shared), apply)
    for event in events:  # after the commit: followers never see an event that was rolled back
        shared.event_feed.publish(event)
    return reply


def summarize(conn: Any, run_id: str, metrics: Mapping[str, Any], now: int) -> list[EventRow]:
    """Fold a stored batch into the run's summary and metric definitions; record its events."""
    names = list(metrics)
    conn.executemany("INSERT OR IGNORE INTO metric_definitions (name, direction, created_at) VALUES (?, ?, ?)",
                     [(name, direction_for(name), now) for name in names])
    directions = dict(conn.execute(
        f"SELECT name, direction FROM metric_definitions WHERE name IN ({','.join('?' * len(names))})", names))
    stored = conn.execute("SELECT summary, job_id, node_id FROM runs WHERE id = ?", (run_id,)).fetchone()
    before = json.loads(stored[0]) if stored and stored[0] else None
    job_id, node_id = (stored[1], stored[2]) if stored else (None, None)  # a job's run: its job and node
    points = {name: (cols["step"], cols["ts"], cols["value"]) for name, cols in metrics.items()}
    after, raised = run_summary.update(before, points, directions)
    conn.execute("UPDATE runs SET summary = ? WHERE id = ?", (json.dumps(after, separators=(",", ":")), run_id))
    rows = [EventRow(new_id("ev"), now, e.type, e.severity, node_id, job_id, run_id, e.step, e.message, e.context)
            for e in raised]
    event_rows.insert_events(conn, rows)
    return rows


async def finish_session(shared: DaemonContext, session_id: str, body: Any) -> Session:
    status = body.get("status", "SUCCEEDED") if isinstance(body, Mapping) else None
    if status not in FINISH_STATES:
        raise _bad("status", f"one of {', '.join(FINISH_STATES)}")
    return await write(_store(shared), lambda conn: session_rows.finish_session(conn, session_id, status, now_ms()))


async def list_run_sessions(shared: DaemonContext, run_id: str) -> list[Session]:

    def read(conn: Any) -> list[Session]:
        if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
            raise ApiError(ErrorCode.NOT_FOUND, f"no run {run_id!r}", {"run_id": run_id})
        return session_rows.list_for_run(conn, run_id)

    return await access.readers(shared, "runs").run(read)


async def get_session(shared: DaemonContext, session_id: str) -> Session:
    return await access.readers(shared, "runs").run(lambda conn: session_rows.require_open(conn, session_id))


MAX_ENV_BYTES = 64 * 1024


async def add_env(shared: DaemonContext, session_id: str, body: Any) -> dict[str, Any]:
    """The training process's environment (python, git commit, packages...) for its run."""
    if not isinstance(body, Mapping):
        raise ApiError(ErrorCode.BAD_REQUEST, "the body must be a JSON object")
    if len(json.dumps(body)) > MAX_ENV_BYTES:
        raise ApiError(ErrorCode.BAD_REQUEST, f"the environment snapshot is over {MAX_ENV_BYTES} bytes")
    stored = await write(_store(shared), lambda conn: session_rows.store_env(conn, session_id, dict(body)))
    return {"stored": stored}
