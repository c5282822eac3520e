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
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio

from gpuplaned import tsdb
from gpuplaned.checkpoints import roots as roots_of
from gpuplaned.checkpoints.files import fingerprint
from gpuplaned.config import DetectorConfig
from gpuplaned.domain import run_summary
from gpuplaned.domain.evaluations import MAX_RECORDS as EVAL_RECORDS
from gpuplaned.domain.evaluations import EvaluationRecord, parse_evaluations
from gpuplaned.domain.run_records import MAX_RECORDS, CheckpointRecord, ScriptEvent, parse_checkpoints, parse_events
from gpuplaned.protocol import columns
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.fields import field
from gpuplaned.protocol.ids import new_id
from gpuplaned.protocol.job_states import FINISH_STATES
from gpuplaned.protocol.sdk_spool import SESSION_ID
from gpuplaned.protocol.session_replies import (
    BatchReply,
    Session,
    SessionCreated,
    SessionEnvReply,
    SessionList,
    SessionReply,
)
from gpuplaned.service import access
from gpuplaned.service.api import confined_callers, evaluations
from gpuplaned.service.api.run_records import store_records
from gpuplaned.service.api.series_owner import claim_for_sdk
from gpuplaned.service.link import checkpoint_files
from gpuplaned.service.link.registry import now_ms
from gpuplaned.service.passes import detector
from gpuplaned.service.passes.checkpoint_arrival import checkpoints_arrived
from gpuplaned.store import event_rows
from gpuplaned.store import project_rows, run_owners, run_rows, session_rows
from gpuplaned.store.event_rows import EventRow
from gpuplaned.store.session_rows import SessionRequest
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.access import Caller
    from gpuplaned.service.context import ServerContext

_INT31 = {"minimum": 0, "maximum": (1 << 31) - 1, "message": "a non-negative integer"}


def _bad(field: str, message: str) -> ApiError:
    return ApiError(ErrorCode.BAD_REQUEST, f"{field}: {message}", {"field": field})


def _text(limit: int, description: str | None = None) -> Any:
    return field(default=None, min_length=1, max_length=limit, description=description,
                 message=f"a string of 1 to {limit} characters")


@attrs.frozen(kw_only=True)
class SessionCreate:
    """What the SDK says of itself and its run; every field is optional."""

    session_id: str | None = field(default=None, pattern=SESSION_ID.pattern,
                                   message="a UUIDv7 in lower-case hex (8-4-4-4-12)",
                                   description="the SDK's own UUIDv7 for the session; opening one that exists "
                                               "returns it (409 if it reports to another run); absent: the "
                                               "daemon makes one")
    run_id: str | None = field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$",
                               message="letters, digits, '_', '.' and '-' (at most 100)",
                               description="join this run (created when unknown); absent: a new run")
    job_id: str | None = _text(100)
    name: str | None = _text(200)
    project: str | None = _text(200)
    experiment: str | None = _text(200)
    config: dict[str, Any] | None = None
    tags: list[str] | None = field(default=None, max_items=100, items={"min_length": 1, "max_length": 100},
                                   message="a list of at most 100 strings")
    rank: int | None = field(default=None, **_INT31)
    host: str | None = _text(200)
    pid: int | None = field(default=None, **_INT31)
    cwd: str | None = field(default=None, min_length=1, max_length=4096, pattern=r"^/[^\x00]*$",
                            message="an absolute path",
                            description="the script's working directory: a run this session creates takes "
                                        "checkpoint files only under it (a job's run: under the job's folders)")
    started_at: int | None = field(default=None, minimum=0, maximum=1 << 53,
                                   message="milliseconds since the epoch, a non-negative integer",
                                   description="when the script called init(), in ms since the epoch: a new run "
                                               "was created then, also when the daemon hears of it later (a spool "
                                               "replayed); absent, or later than the daemon's now: now")

    def request(self) -> SessionRequest:
        return SessionRequest(self.run_id, self.job_id, self.name, self.project, self.experiment,
                              self.config or None, tuple(self.tags or ()), self.rank, self.host, self.pid,
                              self.session_id, self.started_at)


def _store(shared: ServerContext) -> Any:
    return access.store_port(shared, "runs")


async def open_session(shared: ServerContext, body: SessionCreate, caller: Caller | None = None) -> SessionCreated:
    """Open (or re-open) a session; a ``caller`` other than the user only on a run it owns
    (``access.owns_run``), and a run it creates is recorded as its own (one an agent's host
    made, as that node's: its files, on that host, are never taken for the server's).

    Raises:
        ApiError: forbidden, the session's run or ``run_id`` is not the caller's, or it names a job that is
            not its own; conflict, bad_request as ``session_rows.open_session``.
    """
    req = body.request()
    credential = access.credential_of(caller)

    def apply(conn: Any) -> Session:
        if credential is not None and req.job_id is not None \
                and not access.may_report_to_job(caller, req.job_id, run_owners.job_node(conn, req.job_id)):
            raise ApiError(ErrorCode.FORBIDDEN, f"job_id: {caller.name if caller else 'this caller'} may not report "
                           f"to job {req.job_id}: a job's runs take only its own processes' sessions",
                           {"field": "job_id"})
        existing = session_rows.get_session(conn, req.session_id) if req.session_id else None
        joined = run_owners.ownership(conn, existing.run_id if existing else req.run_id) \
            if existing or req.run_id else None
        if joined is not None:
            access.require_run_owner(caller, joined)
        session = session_rows.open_session(conn, req, now_ms())
        if joined is None:  # a run it made now
            run_owners.claim(conn, session.run_id, credential, body.cwd)
        elif body.cwd is not None:  # its owner, on a script's run that declared none yet
            run_owners.declare_cwd(conn, session.run_id, body.cwd)
        return session

    session = await write(_store(shared), apply)
    return SessionCreated(session_id=session.id, run_id=session.run_id, session=session)


def _owned_session(conn: Any, session_id: str, caller: Caller | None) -> Session:
    """The session, once ``caller`` is found to own its run.

    Raises:
        ApiError: not_found, no such session; forbidden, its run is not the caller's.
    """
    session = session_rows.require_open(conn, session_id)
    run = run_owners.ownership(conn, session.run_id)
    if run is not None:
        access.require_run_owner(caller, run)
    return session


@attrs.frozen
class Batch:
    seq: int
    metrics: dict[str, Any]
    events: list[ScriptEvent]
    checkpoints: list[CheckpointRecord]
    evaluations: list[EvaluationRecord] = attrs.field(factory=list)


BATCH_ENCODINGS = ("json", "base64")


# ``metrics`` stays the JSON it came as: its columns are checked whole by ``tsdb.ingest``
# (a batch holds up to a million points; structuring them one by one would cost more).
@attrs.frozen(kw_only=True)
class BatchCreate:

    seq: int = field(minimum=0, maximum=(1 << 62) - 1, message="a non-negative integer, one per batch of the session",
                     description="one per batch of the session; a seq already stored is answered duplicate, also "
                                 "once the session has finished")
    metrics: dict[str, Any] = field(
        description="name -> {step: [...], ts: [...], value: [...]}; with encoding base64 each column is the base64 "
                    "of its little-endian int64 (step, ts) or float64 (value) values",
        schema={"additionalProperties": {"type": "object"}})
    encoding: str = field(default="json", enum=BATCH_ENCODINGS,
                          message="json (numbers) or base64 (packed little-endian columns), not {value!r}",
                          description="how the metrics' columns are written (the SDK sends base64)")
    # Kept as JSON for gpuplaned.domain.run_records, which names the item at fault (events[2].name).
    events: list[Any] | None = field(default=None, max_items=MAX_RECORDS, documented_as=list[ScriptEvent] | None,
                                     description="the script's own events (run.log_event), stored as USER_EVENT")
    checkpoints: list[Any] | None = field(default=None, max_items=MAX_RECORDS,
                                          documented_as=list[CheckpointRecord] | None,
                                          description="checkpoints the script saved (run.log_checkpoint): "
                                                      "registered, never copied")
    evaluations: list[Any] | None = field(default=None, max_items=EVAL_RECORDS,
                                          documented_as=list[EvaluationRecord] | None,
                                          description="metrics of the evaluation of the job the script runs under "
                                                      "(run.log_evaluation)")


def parse_batch(batch: BatchCreate) -> Batch:
    metrics = _decoded(batch.metrics) if batch.encoding == "base64" else batch.metrics
    records = {"events": batch.events, "checkpoints": batch.checkpoints}
    return Batch(batch.seq, metrics, parse_events(records), parse_checkpoints(records),
                 parse_evaluations(batch.evaluations))


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


async def add_batch(shared: ServerContext, session_id: str, body: BatchCreate,
                    caller: Caller | None = None) -> BatchReply:
    """Store a batch of run metrics, script events and checkpoints once; answered after the commit.

    A ``caller`` other than the user writes only to a run it owns; a token registers
    checkpoint files only under its run's folders (``checkpoint_paths``). A checkpoint that
    the user or a local job registers gets its fingerprint taken here, so retention can later
    tell it is the same file (one outside the run's folders gets none, and is never deleted).
    """
    batch = parse_batch(body)
    seq, metrics = batch.seq, batch.metrics
    run_of: list[str] = []  # the session's run, for the live metric feed
    fingerprints = await _fingerprints(shared, session_id, batch.checkpoints) \
        if batch.checkpoints and confined_callers.files_here(caller) else {}

    def apply(conn: Any) -> tuple[BatchReply, list[EventRow]]:
        session = _owned_session(conn, session_id, caller)
        run_of[:] = [session.run_id]
        if batch.checkpoints and access.credential_of(caller) is not None and not confined_callers.confined(caller):
            checkpoint_paths(conn, session.run_id, batch.checkpoints)
        if session.status != "OPEN":
            if session_rows.batch_stored(conn, session_id, seq):
                return BatchReply(seq=seq, duplicate=True, points=0), []
            raise ApiError(ErrorCode.CONFLICT, f"session {session_id} has finished", {"session_id": session_id})
        if metrics:  # the tailer's points of these names go (a resent batch finds them claimed)
            claim_for_sdk(conn, session.run_id, list(metrics))
        try:
            result = tsdb.ingest(conn, "run", session.run_id, metrics, source=session_id, seq=seq)
        except ValueError as exc:
            raise ApiError(ErrorCode.BAD_REQUEST, f"metrics: {exc}", {"field": "metrics"}) from None
        events: list[EventRow] = []
        if not result.duplicate:
            now = now_ms()
            session_rows.record_batch(conn, session_id, seq, result.points)
            if metrics:
                events = summarize(conn, session.run_id, metrics, now, shared.config.detector)
            if batch.events or batch.checkpoints or batch.evaluations:
                origin = run_rows.origin(conn, session.run_id)
                job_id = origin.job_id if origin else None
                events += store_records(conn, session.run_id, job_id, batch.events, batch.checkpoints, now)
                run_owners.set_fingerprints(conn, session.run_id, fingerprints)
                evaluations.record_sdk(conn, job_id, batch.evaluations)
        return BatchReply(seq=seq, duplicate=result.duplicate, points=result.points), events

    reply, events = await write(_store(shared), apply)
    if metrics and not reply.duplicate:
        shared.metric_feeds.publish(run_of[0], metrics)  # after the commit, like the events
    for event in events:  # after the commit: followers never see an event that was rolled back
        shared.event_feed.publish(event)
    checkpoints_arrived(shared, events)
    return reply


def checkpoint_paths(conn: Any, run_id: str, checkpoints: list[CheckpointRecord]) -> None:
    """Refuse a network caller's checkpoint that does not lie in its run's folders (after
    ``realpath``): the job's folders, or the working directory its SDK session declared.

    Raises:
        ApiError: forbidden naming the first such path.
    """
    roots = run_owners.checkpoint_roots(conn, run_id)
    for i, ck in enumerate(checkpoints):
        if not os.path.isabs(ck.path) or roots_of.root_of(ck.path, roots) is None:
            where = f"under {', '.join(roots)}" if roots else "nowhere: its session declared no cwd"
            raise ApiError(ErrorCode.FORBIDDEN, f"checkpoints[{i}].path: {ck.path[:200]!r} is outside run {run_id}'s "
                           f"folders once links are resolved; its checkpoints may lie {where}",
                           {"field": f"checkpoints[{i}].path"})


async def _fingerprints(shared: ServerContext, session_id: str,
                        checkpoints: list[CheckpointRecord]) -> dict[str, str]:
    """path -> fingerprint of the checkpoint files in the session's run's folders on this host
    (none for a run of a remote node: its files are there)."""

    session = await access.readers(shared, "runs").run(lambda conn: session_rows.get_session(conn, session_id))
    if session is None or await checkpoint_files.remote_node_of_run(shared, session.run_id) is not None:
        return {}
    roots = await checkpoint_files.run_roots(shared, session.run_id)  # none where its files are not here
    paths = [ck.path for ck in checkpoints if os.path.isabs(ck.path) and "\0" not in ck.path]

    def take() -> dict[str, str]:
        out = {}
        for path in paths:
            if roots_of.root_of(path, roots) is None or os.path.islink(path):
                continue
            try:
                out[path] = fingerprint(path)
            except OSError:
                continue  # not there (yet): registered without one, never deleted by retention
        return out

    return await trio.to_thread.run_sync(take) if roots and paths else {}


def summarize(conn: Any, run_id: str, metrics: Mapping[str, Any], now: int,
              rules: DetectorConfig = DetectorConfig()) -> list[EventRow]:
    """Fold a stored batch into the run's summary and metric definitions; record the events
    of the rules ``rules`` has on, with their evidence (``gpuplaned.service.passes.detector``)."""
    names = list(metrics)
    directions = project_rows.directions(conn, names, now)
    before = run_rows.summary(conn, run_id)
    origin = run_rows.origin(conn, run_id)
    job_id, node_id = (origin.job_id, origin.node_id) if origin else (None, None)  # a job's run: its job and node
    points = {name: (cols["step"], cols["ts"], cols["value"]) for name, cols in metrics.items()}
    after, raised = run_summary.update(before, points, directions, detector.overfit_policy(rules),
                                       detector.spike_policy(rules))
    raised = detector.summary_events(raised, metrics, run_id, rules)
    run_rows.set_summary(conn, run_id, after)
    rows = [EventRow(new_id("ev"), now, e.type, e.severity, node_id, job_id, run_id, e.step, e.message, e.context)
            for e in raised]
    event_rows.insert_events(conn, rows)
    return rows


@attrs.frozen(kw_only=True)
class SessionFinish:
    status: str = field(default="SUCCEEDED", enum=FINISH_STATES, message=f"one of {', '.join(FINISH_STATES)}")


async def finish_session(shared: ServerContext, session_id: str, body: SessionFinish,
                         caller: Caller | None = None) -> SessionReply:
    status = body.status

    def apply(conn: Any) -> Session:
        _owned_session(conn, session_id, caller)
        return session_rows.finish_session(conn, session_id, status, now_ms())

    return SessionReply(session=await write(_store(shared), apply))


async def list_run_sessions(shared: ServerContext, run_id: str) -> SessionList:

    def read(conn: Any) -> list[Session]:
        if not run_rows.run_exists(conn, run_id):
            raise ApiError(ErrorCode.NOT_FOUND, f"no run {run_id!r}", {"run_id": run_id})
        return session_rows.list_for_run(conn, run_id)

    return SessionList(sessions=await access.readers(shared, "runs").run(read))


async def get_session(shared: ServerContext, session_id: str) -> SessionReply:
    return SessionReply(session=await access.readers(shared, "runs").run(
        lambda conn: session_rows.require_open(conn, session_id)))


MAX_ENV_BYTES = 64 * 1024


async def add_env(shared: ServerContext, session_id: str, body: Any, caller: Caller | None = None) -> SessionEnvReply:
    """The training process's environment (python, git commit, packages...) for its run."""
    if not isinstance(body, Mapping):
        raise ApiError(ErrorCode.BAD_REQUEST, "the body must be a JSON object")
    if len(json.dumps(body)) > MAX_ENV_BYTES:
        raise ApiError(ErrorCode.BAD_REQUEST, f"the environment snapshot is over {MAX_ENV_BYTES} bytes")
    def apply(conn: Any) -> bool:
        _owned_session(conn, session_id, caller)
        return session_rows.store_env(conn, session_id, dict(body))

    stored = await write(_store(shared), apply)
    return SessionEnvReply(stored=stored)
