"""Reading what the semantic functions (``gpuplaned.domain.diagnosis``) need, bounded.

A run of a million points is read as a thousand buckets per series (``tsdb.query_series``:
block summaries keep every bucket's min, max and NaN count), its training loss's times from
summaries only for the gaps (``tsdb.marks.time_marks``), and raw points only for the one
bucket that holds a loss's first NaN.
GPU series come from the node's store over the run's time, at a few hundred points (rollups
for a long run). So the cost does not grow with the points, only with the series read
(``MAX_SERIES``: losses first, then the primary metric, then the rest by name).
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from gpuplaned import tsdb
from gpuplaned.domain import run_summary
from gpuplaned.domain.diagnosis import compare_checkpoints, compare_runs, diagnose_run, explain_failure
from gpuplaned.domain.diagnosis.curves import Curve, is_loss, train_loss
from gpuplaned.domain.diagnosis.run import nan_window
from gpuplaned.protocol.converter import converter, unstructure
from gpuplaned.protocol.diagnosis_replies import CheckpointComparison, FailureExplanation, RunComparison, RunDiagnosis
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service import access
from gpuplaned.service.api import jobs, logs
from gpuplaned.service.api.run_records import checkpoint_table
from gpuplaned.service.api.series_query import json_finite
from gpuplaned.service.passes import resume
from gpuplaned.store import checkpoint_rows, job_rows, project_rows, run_rows
from gpuplaned.store.connection import Connection
from gpuplaned.store.event_rows import EventFilter, list_events
from gpuplaned.tsdb.marks import extent, time_marks

T = TypeVar("T")

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

BUCKETS = 1000
GPU_POINTS = 300
MAX_SERIES = 8
MAX_COMPARE = 10
MAX_COMPARED = 64  # metrics a comparison reads of each run; past it, the rest are named as left out
LOG_TAIL = 200
MAX_EVENTS = 200
MAX_LINEAGE = 1000
# A run id is what a session may name (gpuplaned.service.api.sessions.SessionCreate); a checkpoint's is ours.
_IDS = {"run": re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"), "ck": re.compile(r"^ck_[0-9A-Za-z]{1,64}$")}


def parse_ids(raw: str | None, prefix: str) -> list[str]:
    """``ids=a,b``: 2 to ``MAX_COMPARE`` distinct ids of ``prefix``'s shape (``run``, ``ck``).

    Raises:
        ApiError: bad_request naming the ids that are not ids (``details.ids``), or too few or many.
    """
    ids = list(dict.fromkeys(i.strip() for i in (raw or "").split(",") if i.strip()))
    bad = [i for i in ids if not _IDS[prefix].match(i)]
    if bad:
        raise ApiError(ErrorCode.BAD_REQUEST, f"ids: not {prefix} ids: {', '.join(bad)}",
                       {"field": "ids", "ids": bad})
    if not 2 <= len(ids) <= MAX_COMPARE:
        raise ApiError(ErrorCode.BAD_REQUEST, f"ids: 2 to {MAX_COMPARE} distinct {prefix} ids, comma-separated; "
                       f"got {len(ids)}", {"field": "ids"})
    return ids


def _readers(shared: ServerContext) -> Any:
    return access.readers(shared, "runs")


def _run_or_404(conn: Connection, run_id: str) -> run_rows.Run:
    run = run_rows.get_run(conn, run_id)
    if run is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no run {run_id!r}", {"run_id": run_id})
    return run


def _picked(names: Sequence[str], primary: str | None) -> list[str]:
    ranked = sorted(names, key=lambda n: (not is_loss(n), n != primary, n))
    return ranked[:MAX_SERIES]


def _curves(conn: Connection, run_id: str, names: list[str], x: str) -> dict[str, Curve]:
    if not names:
        return {}
    found = tsdb.query_series(conn, "run", run_id, names, points=BUCKETS, x=x)
    return {n: Curve.of({"x": found["x"], "width": found["width"], **cols}) for n, cols in found["series"].items()
            if any(cols["count"])}


def _span(conn: Connection, run_id: str, name: str) -> dict[str, int] | None:
    return extent(conn, "run", run_id, name)  # from the chunks' summary columns: no point decoded


def gpu_samples(conn: Connection, node_id: str | None, indexes: Sequence[int], start: int | None, end: int | None,
         fields: Sequence[str]) -> dict[int, dict[str, list[Any]]]:
    """Per GPU index, the node's ``fields`` (``utilization``...) bucket averages over [start, end]."""
    if node_id is None or start is None or not indexes:
        return {}
    end = end if end is not None else int(time.time() * 1000)
    names = [f"gpu{i}.{f}" for i in indexes for f in fields]
    found = tsdb.query_series(conn, "node", node_id, names, max(0, start), max(start, end), GPU_POINTS)
    out: dict[int, dict[str, list[Any]]] = {}
    for i in indexes:
        cols = {f: found["series"].get(f"gpu{i}.{f}", {}).get("avg") or [] for f in fields}
        keep = [k for k in range(len(found["x"])) if any(k < len(c) and c[k] is not None for c in cols.values())]
        if keep:
            out[i] = {"ts": [found["x"][k] for k in keep],
                      **{f: [c[k] if k < len(c) else None for k in keep] for f, c in cols.items()}}
    return out


def _job_gpus(conn: Connection, job_id: str | None) -> list[int]:
    job = job_rows.get_job(conn, job_id) if job_id else None
    return list(job.gpu_indexes) if job else []


def diagnosis_data(conn: Connection, run_id: str) -> dict[str, Any]:
    """``diagnose_run`` of one run, read on a reader connection (the bench calls it too)."""
    run = _run_or_404(conn, run_id)
    primary, _, _ = project_rows.run_context(conn, run_id)
    names = _picked(tsdb.list_names(conn, "run", run_id), primary.metric)
    by_step = _curves(conn, run_id, names, "step")
    loss = train_loss(list(by_step))
    raw = {}
    for name, curve in by_step.items():
        window = nan_window(curve) if is_loss(name) else None
        if window is not None:
            raw[name] = tsdb.read_points(conn, "run", run_id, name, *window, x="step", limit=100_000)
    marks = time_marks(conn, "run", run_id, loss) if loss else []
    by_time = Curve(marks, [], [], [], [], []) if marks else None  # only its x matter: the gaps
    span = _span(conn, run_id, loss) if loss else None
    gpu = gpu_samples(conn, run.node_id, _job_gpus(conn, run.job_id), run.started_at, run.finished_at, ("utilization",))
    facts = {"id": run.id, "status": run.status, "node_id": run.node_id, "job_id": run.job_id}
    return diagnose_run(facts, by_step, by_time=by_time, raw=raw, gpu=gpu, span=span)


async def diagnose(shared: ServerContext, run_id: str) -> RunDiagnosis:
    found = await _readers(shared).run(lambda c: diagnosis_data(c, run_id))
    return _reply({"run_id": run_id, **found}, RunDiagnosis)


def _mean_util(gpu: dict[int, dict[str, list[Any]]]) -> float | None:
    values = [v for s in gpu.values() for v in s["utilization"] if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else None


def _compare_data(conn: Connection, ids: list[str], align: str) -> dict[str, Any]:
    """Every metric the runs share (``MAX_COMPARED`` of them, losses and the primary metric
    first), read for each run in one query; ranked by the primary metric, else the training loss."""
    runs = [_run_or_404(conn, i) for i in ids]
    primary, direction, _ = project_rows.run_context(conn, ids[0])
    names = [set(tsdb.list_names(conn, "run", r.id)) for r in runs]
    common = sorted(set.intersection(*names))
    metric = primary.metric if primary.metric in common else train_loss(common) or (common[0] if common else None)
    if metric is not None and metric != primary.metric:
        definition = project_rows.get_definition(conn, metric)
        direction = definition.direction if definition else None
    direction = direction or (run_summary.direction_for(metric) if metric else None)
    ranked = sorted(common, key=lambda n: (n != metric, not is_loss(n), n != primary.metric, n))
    shared, left_out = ranked[:MAX_COMPARED], ranked[MAX_COMPARED:]
    rows = []
    for run in runs:
        spans = {name: span for name in shared if (span := _span(conn, run.id, name)) is not None}
        t0 = min((span["first_ts"] for span in spans.values()), default=None)  # the run's first point
        curves = _curves(conn, run.id, shared, "step" if align == "step" else "ts")
        if align == "time" and t0 is not None:
            curves = {n: attrs.evolve(c, xs=[x - t0 for x in c.xs]) for n, c in curves.items()}
        span = spans.get(metric) if metric else None
        rate = None
        if span and span["last_ts"] > span["first_ts"]:
            rate = (span["last_step"] - span["first_step"]) * 1000 / (span["last_ts"] - span["first_ts"])
        gpu = gpu_samples(conn, run.node_id, _job_gpus(conn, run.job_id), run.started_at, run.finished_at, ("utilization",))
        rows.append({"id": run.id, "config": run.config or {}, "curves": curves, "t0": t0, "steps_per_s": rate,
                     "gpu_util": _mean_util(gpu)})
    return compare_runs(rows, metric, direction, align, shared=shared, left_out=left_out)


async def compare(shared: ServerContext, raw_ids: str | None, align: str) -> RunComparison:
    ids = parse_ids(raw_ids, "run")
    return _reply(await _readers(shared).run(lambda c: _compare_data(c, ids, align)), RunComparison)


def _ancestors(conn: Connection, ck: checkpoint_rows.Checkpoint) -> list[str]:
    out: list[str] = []
    parent = ck.parent_id
    while parent and parent not in out and len(out) < MAX_LINEAGE:
        out.append(parent)
        found = checkpoint_rows.get(conn, parent)
        parent = found.parent_id if found else None
    return out


def _checkpoints_data(conn: Connection, ids: list[str]) -> dict[str, Any]:
    found = []
    for ck_id in ids:
        ck = checkpoint_rows.get(conn, ck_id)
        if ck is None:
            raise ApiError(ErrorCode.NOT_FOUND, f"no checkpoint {ck_id}", {"checkpoint_id": ck_id})
        found.append(ck)
    metric = project_rows.run_context(conn, found[0].run_id)[0].metric
    tables = {run_id: unstructure(checkpoint_table(conn, run_id, metric))  # the domain reads their JSON
              for run_id in dict.fromkeys(c.run_id for c in found)}
    direction = next(iter(tables.values()))["direction"]
    rows = []
    for ck in found:
        row = next(r for r in tables[ck.run_id]["checkpoints"] if r["id"] == ck.id)
        rows.append({**row, "ancestors": _ancestors(conn, ck)})
    direction = direction or (run_summary.direction_for(metric) if metric else None)
    out = compare_checkpoints(rows, metric, direction)
    out["checkpoints"] = [{k: r[k] for k in ("id", "run_id", "step", "size_bytes", "parent_id", "metric_value",
                                               "deleted_at")} for r in rows]
    return out


async def compare_checkpoint_ids(shared: ServerContext, raw_ids: str | None) -> CheckpointComparison:
    ids = parse_ids(raw_ids, "ck")
    return _reply(await _readers(shared).run(lambda c: _checkpoints_data(c, ids)), CheckpointComparison)


async def explain(shared: ServerContext, job_id: str) -> FailureExplanation:
    """``explain_failure`` of a job's latest attempt: its last lines (files first, else the
    store's copy), its GPUs' samples over the attempt, its run's and its own events."""
    job = await jobs.get_job(shared, job_id)  # 404 for an unknown job
    tails = {}
    for stream in ("stdout", "stderr"):
        page = await logs.read_lines(shared, job_id, stream, attempt=None, tail=LOG_TAIL, offset=None, limit=LOG_TAIL)
        tails[stream] = [(line.offset, line.line) for line in page.lines]

    def read(conn: Connection) -> tuple[dict[int, Any], list[dict[str, Any]], bool]:
        gpu = gpu_samples(conn, job.node_id, job.gpu_indexes, job.started_at, job.finished_at,
                   ("memory_used_mb", "memory_total_mb", "utilization"))
        seen: dict[str, dict[str, Any]] = {}
        for where in (EventFilter(job_id=job_id),) + ((EventFilter(run_id=job.run_id),) if job.run_id else ()):
            for _, e in list_events(conn, where, MAX_EVENTS):
                if job.run_id is None or e.run_id in (None, job.run_id):
                    seen[e.id] = {"id": e.id, "type": e.type, "ts": e.ts}
        return gpu, sorted(seen.values(), key=lambda e: e["ts"]), _resumable(conn, job_id)

    gpu, events, resumable = await _readers(shared).run(read)
    out = explain_failure(attrs.asdict(job), tails, gpu=gpu, events=events, resumable=resumable)
    return _reply({"job_id": job_id, "attempt": job.attempt, **out}, FailureExplanation)


def _reply(found: dict[str, Any], kind: type[T]) -> T:
    """The domain's answer (plain data: the rules are pure) as the API's reply type, NaN as null."""
    return converter.structure(json_finite(found), kind)


def _resumable(conn: Connection, job_id: str) -> bool:
    """``job retry --resume-from last`` would find a checkpoint of the job's, its file there (as
    ``resume.choose`` looks), so the explanation suggests it only then."""
    try:
        points = resume.candidates_for(conn, job_id, "last")
    except ApiError:  # no checkpoint, or only deleted ones
        return False
    return any(os.path.exists(point.path) for point in points)
