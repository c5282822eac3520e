"""Job, node and slot rows: the SQL behind submit, schedule, status, cancel and retry.

Write functions take the store's connection inside its transaction (the store actor calls
them); read functions take a reader connection. The state a write sets is the one the state
table (``gpuplaned.domain.job_states``) returns for the move; what the queue decides (its
order, admission, which job gets which slots) is ``gpuplaned.domain.queue``'s. A scheduling
pass (``gpuplaned.service.passes.dispatch.schedule``) reads the queue and the free slots, and records
its placements, inside one transaction, so a slot is never booked twice.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Generator, Iterable, Mapping
from typing import Any

import attrs

from gpuplaned.domain import dependencies, gpu_free, queue
from gpuplaned.domain.groups import QUEUE_PAUSED
from gpuplaned.domain.job_states import IllegalTransition, JobEvent, next_state, on_report, run_state
from gpuplaned.domain.scheduling import Assignment, GpuFacts, NodeCapacity, QueuedJob
from gpuplaned.protocol.agent import ActiveJob, Hello, JobSpecWire, JobStatus, NodeSnapshot, PooledCapacity
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.ids import new_id
from gpuplaned.protocol.job_policies import JobPolicies, dump_policies, load_policies
from gpuplaned.protocol.job_states import (
    ACTIVE,
    ENDED,
    ON_NODE,
    STOP_REASONS,
    FailureReason,
    JobState,
    NodeReport,
    values,
)
from gpuplaned.protocol.job_wire import Job, JobLink, JobSpec
from gpuplaned.store import dependency_rows, resume_rows, sweep_rows, token_rows
from gpuplaned.store.paging import newest_first, one_of

QUEUE_SCAN_LIMIT = 1000
_ACTIVE = values(ACTIVE)  # the vocabulary's sets, as SQL parameters
_ON_NODE = values(ON_NODE)

_JOB_COLUMNS = (
    "id, name, type, status, priority, command, working_dir, env, resources, node_selector, "
    "node_id, attempt, max_attempts, timeout_s, stop_grace_s, run_id, gpu_indexes, created_at, "
    "started_at, finished_at, exit_code, failure_reason, failure_message, cancel_requested, policies, resume_from, "
    "queue_reason, secret_env_names, group_name, sweep_id, sweep_trial, sweep_values, wait_reason"
)


def _job(row: sqlite3.Row | tuple[Any, ...]) -> Job:
    (id_, name, type_, status, priority, command, cwd, env, resources, selector, node_id, attempt,
     max_attempts, timeout_s, grace, run_id, gpu_indexes, created, started, finished, exit_code,
     failure, failure_message, cancel, policies, resume_from, queue_reason, secret_names, group, sweep_id,
     sweep_trial, sweep_values, wait_reason) = row
    sel = json.loads(selector) if selector else {}
    wants = json.loads(resources)
    policy = load_policies(policies)
    return Job(
        id=id_, name=name, type=type_, status=status, priority=priority,
        command=json.loads(command), cwd=cwd, env=json.loads(env) if env else {},
        gpu=int(wants.get("gpu", 1)), labels=list(sel.get("labels") or []),
        node=sel.get("node"), node_id=node_id, attempt=attempt, max_attempts=max_attempts,
        timeout_s=timeout_s, stop_grace_s=grace, run_id=run_id,
        gpu_indexes=json.loads(gpu_indexes) if gpu_indexes else [],
        created_at=created, started_at=started, finished_at=finished, exit_code=exit_code,
        failure_reason=failure, failure_message=failure_message, cancel_requested=bool(cancel),
        retention=policy.retention, evaluate=policy.evaluate, resume_from=resume_from,
        on_oom=policy.on_oom, on_nan=policy.on_nan, on_lost=policy.on_lost, on_stalled=policy.on_stalled,
        on_preempted=policy.on_preempted, gpu_model=wants.get("gpu_model"),
        min_gpu_memory_mb=wants.get("min_gpu_memory_mb"), placement=wants.get("placement"),
        queue_reason=queue_reason if status == JobState.QUEUED.value else None,
        secret_env=json.loads(secret_names) if secret_names else [],
        group=group, sweep_id=sweep_id, sweep_trial=sweep_trial,
        sweep_values=json.loads(sweep_values) if sweep_values else None,
        wait_reason=wait_reason if status == JobState.DISPATCHING.value else None,
    )


# --- reads -----------------------------------------------------------------


def get_job(conn: sqlite3.Connection, job_id: str) -> Job | None:
    """The job with its dependencies and dependants (``Job.dependencies``, ``Job.dependants``)."""
    job = _bare_job(conn, job_id)
    return _linked(conn, [job])[0] if job else None


def _bare_job(conn: sqlite3.Connection, job_id: str) -> Job | None:
    row = conn.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return _job(row) if row else None


def _linked(conn: sqlite3.Connection, jobs: list[Job]) -> list[Job]:
    """``jobs`` with their dependencies and dependants; a queued job held by one shows why it
    waits (``after job_... (RUNNING)``) as its ``queue_reason``."""
    needs, needed_by = dependency_rows.links(conn, [j.id for j in jobs])
    out = []
    for job in jobs:
        when, parents = needs.get(job.id, (None, []))
        children = needed_by.get(job.id, [])
        if when is None and not children:
            out.append(job)
            continue
        reason = job.queue_reason
        if when is not None and job.status == JobState.QUEUED.value:
            states = dict(parents)
            if dependencies.verdict(when, states.values()) is dependencies.Verdict.WAIT:
                reason = dependencies.waiting_reason(when, states)
        out.append(attrs.evolve(job, after=when, queue_reason=reason,
                                dependencies=[JobLink(i, s) for i, s in parents],
                                dependants=[JobLink(i, s) for i, s in children]))
    return out


def list_jobs(conn: sqlite3.Connection, *, statuses: Iterable[str] = (), limit: int = 100,
              before: tuple[int, str] | None = None, group: str | None = None,
              sweep: str | None = None) -> list[Job]:
    """Newest first; ``before`` = (created_at, id) of the last job of the previous page;
    ``group``: only that group's jobs; ``sweep``: only that sweep's trials."""
    statuses = list(statuses)
    clauses = [one_of("status", statuses)] if statuses else []
    params: list[Any] = list(statuses)
    if group is not None:
        clauses.append("group_name = ?")
        params.append(group)
    if sweep is not None:
        clauses.append("sweep_id = ?")
        params.append(sweep)
    rows = newest_first(conn, f"SELECT {_JOB_COLUMNS} FROM jobs", clauses, params, before, limit)
    return _linked(conn, [_job(r) for r in rows])


def capacities(conn: sqlite3.Connection, connected: set[str] | None = None,
               health: Mapping[str, NodeSnapshot] | None = None,
               withheld: Mapping[str, Mapping[int, str]] | None = None) -> list[NodeCapacity]:
    """Every node's capacity; ``connected`` (node ids) overrides the stored ONLINE status.

    ``health`` (node id -> its latest snapshot) withholds what a node says must not get new
    work: the whole node while a disk is low, single GPUs that are lost or used by others.
    ``withheld`` (node id -> GPU index -> why, ``gpuplaned.domain.gpu_free.withheld``): the GPUs
    no job may get now and why, the node's own verdict included; None: the node's verdict
    alone, described from ``health``.
    """
    # Each node with its CPU jobs on it in one statement (a pass reads this on every job end); a
    # pooled node (Slurm) with all its jobs in flight instead, which its max_jobs bounds.
    nodes = conn.execute(
        "SELECT id, name, status, labels, max_cpu_jobs, drained, pooled_gpus_per_job, pooled_max_jobs, "
        "(SELECT count(*) FROM jobs WHERE node_id = nodes.id "
        f"AND {one_of('status', _ACTIVE)} AND (pooled_max_jobs IS NOT NULL OR json_extract(resources, '$.gpu') = 0)) "
        "FROM nodes ORDER BY name", _ACTIVE).fetchall()
    out = []
    for node_id, name, status, labels, max_cpu, drained, per_job, max_jobs, active in nodes:
        if max_jobs is not None:
            out.append(NodeCapacity(
                node_id=node_id, name=name, labels=tuple(json.loads(labels or "[]")), free_gpus=(), total_gpus=0,
                cpu_jobs=0, max_cpu_jobs=0, pooled=PooledCapacity(per_job, max_jobs), jobs_in_flight=active,
                online=node_id in connected if connected is not None else status == "ONLINE",
                accepting=health[node_id].accepting if health and node_id in health else True,
                drained=bool(drained)))
            continue
        cpu_jobs = active
        slot_rows = conn.execute(
            "SELECT gpu_index, owner_job_id, model, vram_mb FROM gpu_slots WHERE node_id = ? ORDER BY gpu_index",
            (node_id,),
        ).fetchall()
        snapshot = health.get(node_id) if health else None
        if withheld is not None:
            kept_off = withheld.get(node_id) or {}
        elif snapshot is not None and snapshot.blocked_gpus:
            kept_off = gpu_free.withheld(gpu_free.uses_of(snapshot.gpus), snapshot.blocked_gpus)
        else:
            kept_off = {}
        unheld = [i for i, owner, _, _ in slot_rows if owner is None]
        out.append(NodeCapacity(
            node_id=node_id, name=name, labels=tuple(json.loads(labels or "[]")),
            free_gpus=tuple(i for i in unheld if i not in kept_off),
            withheld=tuple((i, kept_off[i]) for i in unheld if i in kept_off),
            total_gpus=len(slot_rows), cpu_jobs=cpu_jobs, max_cpu_jobs=max_cpu,
            online=node_id in connected if connected is not None else status == "ONLINE",
            accepting=snapshot.accepting if snapshot else True, drained=bool(drained),
            gpus=tuple(GpuFacts(i, model, vram) for i, _, model, vram in slot_rows),
        ))
    return out


# --- writes ----------------------------------------------------------------


def insert_job(conn: sqlite3.Connection, spec: JobSpec, now_ms: int, nodes: list[NodeCapacity],
               token_id: str | None = None) -> str:
    """Queue a validated job; refuses one that no known node could ever run.

    Args:
        nodes: every node's capacity (``capacities``); whether a node is online does not matter here.
        token_id: the API token that submitted it (its limits and budget count it); None: none.

    Admission is the queue's (``queue.admit``): a job whose GPU constraints (model, memory) no
    node meets is queued, not refused, since a node that meets them may say hello later. It
    waits with a ``queue_reason`` naming them.

    Raises:
        ApiError: bad_request naming why it can never fit.
    """
    job_id = new_id("job")
    reason = queue.admit(queue.as_queued(spec, job_id, now_ms), nodes)
    conn.execute(
        "INSERT INTO jobs (id, name, type, status, priority, working_dir, command, env, resources, "
        "node_selector, max_attempts, timeout_s, stop_grace_s, created_at, policies, token_id, queue_reason, "
        "secret_env_names, secret_env_sealed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (job_id, spec.name, spec.type, next_state(JobState.CREATED, JobEvent.SUBMIT).value, spec.priority, spec.cwd, json.dumps(list(spec.command)),
         json.dumps(spec.env), json.dumps(_resources(spec)),
         json.dumps({"labels": list(spec.labels), "node": spec.node}), spec.max_attempts,
         spec.timeout_s, spec.stop_grace_s, now_ms, dump_policies(spec.policies), token_id,
         reason,
         json.dumps(list(spec.secret_env_names)) if spec.secret_env_names else None, spec.secret_env_sealed),
    )
    return job_id


def _resources(spec: JobSpec) -> dict[str, Any]:
    """The resources JSON: the GPU count, and the constraints and placement a job names."""
    wants: dict[str, Any] = {"gpu": spec.gpu}
    for key in ("gpu_model", "min_gpu_memory_mb", "placement"):
        if getattr(spec, key) is not None:
            wants[key] = getattr(spec, key)
    return wants


@attrs.frozen
class Dispatched:
    node_id: str
    job: JobSpecWire
    # The job's secret env, still sealed: the service opens it into ``job.env`` just before
    # the dispatch is sent (gpuplaned.service.passes.dispatch), so no store row ever holds it open.
    secret_env_sealed: str | None = None


_QUEUE_COLUMNS = {"priority": "priority", "submitted_at": "created_at", "job_id": "id"}
_QUEUE_ORDER = ", ".join(_QUEUE_COLUMNS[k.field] + (" DESC" if k.descending else "") for k in queue.ORDER)


def queued_jobs(conn: sqlite3.Connection, limit: int = QUEUE_SCAN_LIMIT,
                settled: Mapping[str, str] | None = None) -> Generator[QueuedJob, None, None]:
    """The queue, its first ``limit`` jobs in ``queue.ORDER``, as the scheduler sees them.

    Read lazily (a cursor over the queue index, a few columns), since a pass runs on every
    submit and every job end and stops as soon as no capacity is left: close the iterator
    (``.close()``) when done with it before the end.

    Args:
        settled: sweep id -> the reason its hold gives for the whole pass (``Holds.settled``):
            its trials that show that reason already are left out.
    """
    held = "".join(" AND NOT (sweep_id IS ? AND queue_reason IS ?)" for _ in settled or ())
    rows = conn.execute(
        "SELECT id, resources, node_selector, priority, created_at, queue_reason, group_name, sweep_id FROM jobs "
        f"WHERE status = ? AND dependencies_pending = 0{held} ORDER BY {_QUEUE_ORDER} LIMIT ?",
        (JobState.QUEUED.value, *(v for pair in (settled or {}).items() for v in pair), limit))
    try:
        for row in rows:
            yield _queued(row)
    finally:
        rows.close()


def queued_held(conn: sqlite3.Connection, groups: frozenset[str], sweeps: frozenset[str],
                limit: int = QUEUE_SCAN_LIMIT, settled: Mapping[str, str] | None = None,
                said: Mapping[str, str] | None = None) -> list[QueuedJob]:
    """Of the queue as ``queued_jobs`` reads it (its first ``limit`` jobs, ``settled`` left out),
    only the jobs of these groups or sweeps (by id) and those whose stored reason is a hold
    (``queue.is_hold``), but the trials of a sweep in ``said`` (sweep id -> reason) that show its
    reason already: a pass with no slot left reads these alone (``queue.place``'s ``held_rest``).
    SQLite walks the queue's index; no other row is made."""
    window = "".join(" AND NOT (sweep_id IS ? AND queue_reason IS ?)" for _ in settled or ())
    known = "".join(" AND NOT (sweep_id IS ? AND queue_reason IS ?)" for _ in said or ())
    group_marks, sweep_marks = ", ".join("?" * len(groups)), ", ".join("?" * len(sweeps))
    rows = conn.execute(
        "SELECT * FROM (SELECT id, resources, node_selector, priority, created_at, queue_reason, group_name, "
        f"sweep_id FROM jobs WHERE status = ? AND dependencies_pending = 0{window} ORDER BY {_QUEUE_ORDER} LIMIT ?) "
        "WHERE (queue_reason = ? OR substr(queue_reason, 1, 6) IN ('group ', 'sweep ')"
        + (f" OR group_name IN ({group_marks})" if groups else "")
        + (f" OR sweep_id IN ({sweep_marks})" if sweeps else "") + f"){known}",
        (JobState.QUEUED.value, *(v for pair in (settled or {}).items() for v in pair), limit, QUEUE_PAUSED,
         *sorted(groups), *sorted(sweeps), *(v for pair in (said or {}).items() for v in pair)))
    return [_queued(row) for row in rows]


def _queued(row: tuple[str, str, str | None, int, int, str | None, str | None, str | None]) -> QueuedJob:
    job_id, resources, selector, priority, created_at, reason, group, sweep = row
    return QueuedJob(job_id, *_asks(resources, selector), priority, created_at, reason, group, sweep)


@functools.lru_cache(maxsize=256)
def _asks(resources: str, selector: str | None) -> tuple[Any, ...]:
    """What a queued job asks for (GPUs, labels, node, GPU model, memory, placement), from its
    resources and node selector JSON. Pure, so cached: queued jobs mostly ask alike (a sweep's
    trials all do), and a pass that reads on past its last slot (held groups or sweeps) decodes
    every queued job's, on every submit and every job end."""
    sel = json.loads(selector) if selector else {}
    wants = json.loads(resources)
    return (int(wants.get("gpu", 1)), tuple(sel.get("labels") or ()), sel.get("node"), wants.get("gpu_model"),
            wants.get("min_gpu_memory_mb"), wants.get("placement"))


def set_queue_reasons(conn: sqlite3.Connection, reasons: Mapping[str, str | None]) -> None:
    """Write queued jobs' reasons to wait (job id -> reason; None clears it)."""
    for job_id, reason in reasons.items():
        conn.execute("UPDATE jobs SET queue_reason = ? WHERE id = ?", (reason, job_id))


def record_dispatch(conn: sqlite3.Connection, decision: Assignment, now_ms: int) -> Dispatched:
    """Record a placement: the job DISPATCHING as its next attempt, a new run, its GPU slots
    booked (refused, raising, if one is not free: the pass read them in this transaction)."""
    row = conn.execute(f"SELECT {_DISPATCH_COLUMNS} FROM jobs WHERE id = ?", (decision.job_id,)).fetchone()
    assert row is not None
    return _dispatch(conn, _Dispatchable.of(row), decision, now_ms)


# What a dispatch reads of its job: one narrow row, not the whole ``Job`` (a pass runs on
# every submit and every job end: decoding a job's every column was a good part of it).
_DISPATCH_COLUMNS = ("id, name, type, status, command, working_dir, env, attempt, timeout_s, stop_grace_s, "
                     "resume_from, sweep_id, sweep_values, secret_env_sealed, json_extract(resources, '$.gpu')")


@attrs.frozen
class _Dispatchable:
    id: str
    name: str | None
    type: str
    status: str
    command: list[str]
    cwd: str | None
    env: dict[str, str]
    attempt: int
    timeout_s: float | None
    stop_grace_s: float
    resume_from: str | None
    sweep_id: str | None
    sweep_values: dict[str, Any] | None
    secret_env_sealed: str | None  # still sealed (``Dispatched.secret_env_sealed``)
    gpus: int  # how many GPUs it asked for (a pooled node asks its scheduler for them)

    @classmethod
    def of(cls, row: tuple[Any, ...]) -> _Dispatchable:
        (id_, name, type_, status, command, cwd, env, attempt, timeout_s, grace, resume_from, sweep_id,
         sweep_values, sealed, gpus) = row
        return cls(id_, name, type_, status, json.loads(command), cwd, json.loads(env) if env else {}, attempt,
                   timeout_s, grace, resume_from, sweep_id, json.loads(sweep_values) if sweep_values else None,
                   sealed, gpus or 0)


def _dispatch(conn: sqlite3.Connection, job: _Dispatchable, decision: Assignment, now_ms: int) -> Dispatched:
    run_id = new_id("run")
    attempt = job.attempt + 1
    new = next_state(JobState(job.status), JobEvent.DISPATCH)
    conn.execute(
        "UPDATE jobs SET status = ?, node_id = ?, attempt = ?, run_id = ?, gpu_indexes = ?, "
        "started_at = NULL, finished_at = NULL, exit_code = NULL, failure_reason = NULL, "
        "failure_message = NULL, cancel_requested = 0 WHERE id = ? AND status = ?",
        (new.value, decision.node_id, attempt, run_id, json.dumps(list(decision.gpu_indexes)), job.id, job.status),
    )
    for index in decision.gpu_indexes:
        taken = conn.execute(
            "UPDATE gpu_slots SET owner_job_id = ? WHERE node_id = ? AND gpu_index = ? AND owner_job_id IS NULL",
            (job.id, decision.node_id, index),
        ).rowcount
        if taken != 1:
            raise RuntimeError(f"slot {decision.node_id}/gpu{index} is not free; refusing to double-book")
    resume = resume_rows.resume_point(conn, job.resume_from)  # `job retry --resume-from`
    # A sweep's trial: its run lands in the sweep's experiment, with the trial's values as config.
    project_id, experiment_id = sweep_rows.run_placement(conn, job.sweep_id) if job.sweep_id else (None, None)
    config = (json.dumps({"config": job.sweep_values, "tags": []}, separators=(",", ":"))
              if job.sweep_values is not None else None)
    conn.execute(
        "INSERT INTO runs (id, job_id, attempt, node_id, name, source, status, created_at, resumed_from, "
        "resume_step, project_id, experiment_id, config) VALUES (?, ?, ?, ?, ?, 'job', ?, ?, ?, ?, ?, ?, ?)",
        (run_id, job.id, attempt, decision.node_id, job.name, JobState.RUNNING.value, now_ms,
         resume.checkpoint_id if resume else None, resume.step if resume else None, project_id, experiment_id,
         config),
    )
    env = dict(job.env) | (resume.env() if resume else {})
    wire = JobSpecWire(
        job_id=job.id, run_id=run_id, attempt=attempt, name=job.name, argv=tuple(job.command),
        cwd=job.cwd or "/", env=env, gpu_indexes=decision.gpu_indexes, timeout_s=job.timeout_s,
        stop_grace_s=job.stop_grace_s, evaluation=job.type == "EVALUATE", gpus=job.gpus,
    )
    return Dispatched(decision.node_id, wire, job.secret_env_sealed)


@attrs.frozen
class StatusOutcome:
    applied: bool
    status: str | None = None
    reason: str = ""
    run_id: str | None = None  # the attempt's run, once its end is recorded
    run_status: str | None = None  # how that run ended: SUCCEEDED, FAILED, CANCELLED
    evaluates: bool = False  # an EVALUATE job's: its evaluation moves with it (others have none to look up)
    waiting: str | None = None  # a WAITING report's reason when it changed it (None: the same as before)


def apply_status(conn: sqlite3.Connection, node_id: str, msg: JobStatus, now_ms: int) -> StatusOutcome:
    """Apply a node's report about one attempt; stale or impossible reports change nothing.

    The job's new state is ``on_report``'s (the state table's), its run's ``run_state``'s.
    """
    row = conn.execute(
        "SELECT status, attempt, max_attempts, node_id, run_id, cancel_requested, failure_reason, type, wait_reason "
        "FROM jobs WHERE id = ?",
        (msg.job_id,),
    ).fetchone()
    if row is None:
        return StatusOutcome(False, reason="unknown job")
    status, attempt, max_attempts, job_node, run_id, cancelled, marked, job_type, waited = row
    evaluates = job_type == "EVALUATE"
    if attempt != msg.attempt or job_node != node_id:
        return StatusOutcome(False, status, reason=f"stale report for attempt {msg.attempt}")
    report = msg.status  # a NodeReport: JobStatus refuses any other string
    if report is NodeReport.WAITING:
        return _note_waiting(conn, msg, status, waited)
    try:
        new = on_report(JobState(status), report, bool(cancelled), attempt, max_attempts)
    except IllegalTransition as exc:
        return StatusOutcome(False, status, reason=str(exc))
    run = run_state(report, bool(cancelled))
    when = msg.at_ms or now_ms
    if report is NodeReport.RUNNING:
        conn.execute("UPDATE jobs SET status = ?, started_at = coalesce(started_at, ?), wait_reason = NULL "
                     "WHERE id = ?",
                     (new.value, when, msg.job_id))
        conn.execute("UPDATE runs SET status = ?, started_at = coalesce(started_at, ?) WHERE id = ?",
                     (run.value, when, run_id))
        return StatusOutcome(True, new.value, evaluates=evaluates)
    if report is NodeReport.LOST:
        conn.execute("UPDATE jobs SET status = ?, failure_reason = ? WHERE id = ?",
                     (new.value, FailureReason.LOST.value, msg.job_id))
        conn.execute("UPDATE runs SET status = ?, failure_reason = ? WHERE id = ?",
                     (run.value, FailureReason.LOST.value, run_id))
        return StatusOutcome(True, new.value, evaluates=evaluates)
    # A stop the daemon asked for with its reason (STOP_REASONS: EARLY_STOPPED) ends with that reason.
    failure = marked if new is JobState.CANCELLED and marked in STOP_REASONS else msg.failure_reason
    if new is JobState.QUEUED:
        # Back in the queue (automatic retry or never started): the attempt's outcome is
        # on its run; the job shows nothing of a run it does not have yet.
        _clear_attempt_fields(conn, msg.job_id, new)
    else:
        conn.execute(
            "UPDATE jobs SET status = ?, finished_at = max(?, coalesce(started_at, 0)), exit_code = ?, "
            "failure_reason = ?, failure_message = ? WHERE id = ?",
            (new.value, when, msg.exit_code, failure,
             msg.message if new is JobState.FAILED else None, msg.job_id),
        )
    requeued = FailureReason.REQUEUED.value if report is NodeReport.REQUEUE else None
    conn.execute(
        "UPDATE runs SET status = ?, finished_at = ?, exit_code = ?, failure_reason = ? WHERE id = ?",
        (run.value, when, msg.exit_code, failure or requeued, run_id),
    )
    conn.execute("UPDATE gpu_slots SET owner_job_id = NULL WHERE owner_job_id = ?", (msg.job_id,))
    token_rows.revoke_job_tokens(conn, msg.job_id, now_ms)  # the attempt's SDK token dies with it
    if new in ENDED:  # its final state: its dependants may run now, or never
        dependency_rows.settle(conn, msg.job_id, now_ms)
    return StatusOutcome(True, new.value, run_id=run_id, run_status=run.value, evaluates=evaluates)


WAITING_UNSAID = "its node has not started it yet"  # a WAITING report that gave no reason


def _note_waiting(conn: sqlite3.Connection, msg: JobStatus, status: str, waited: str | None) -> StatusOutcome:
    """A WAITING report of the job's current attempt: its node's backend holds it, not started.
    Only a DISPATCHING job waits so (one RUNNING or ended already: a late report, refused); its
    state stays, and the reason is written when it changed (``waiting`` says so)."""
    if status != JobState.DISPATCHING.value:
        return StatusOutcome(False, status, reason=f"a {status} job is not waiting to start")
    reason = msg.message or WAITING_UNSAID
    if reason == waited:
        return StatusOutcome(True, status)
    conn.execute("UPDATE jobs SET wait_reason = ? WHERE id = ?", (reason, msg.job_id))
    return StatusOutcome(True, status, waiting=reason)


@attrs.frozen
class CancelOutcome:
    job: Job
    node_id: str | None = None  # set when the runner must stop a live attempt


def cancel_job(conn: sqlite3.Connection, job_id: str, now_ms: int, *, reason: str | None = None) -> CancelOutcome:
    """``reason``: why the daemon stops it (one of STOP_REASONS), kept as its failure reason."""
    job = _require(conn, job_id)
    state = JobState(job.status)
    if state is JobState.QUEUED:
        new = next_state(state, JobEvent.CANCELLED)
        conn.execute("UPDATE jobs SET status = ?, finished_at = ?, dependencies_pending = 0, "
                     "failure_reason = coalesce(?, failure_reason) WHERE id = ?", (new.value, now_ms, reason, job_id))
        dependency_rows.settle(conn, job_id, now_ms)
        return CancelOutcome(_require(conn, job_id))
    if state in ON_NODE:  # its node stops it, now or when it is back
        conn.execute("UPDATE jobs SET cancel_requested = 1, failure_reason = coalesce(?, failure_reason) WHERE id = ?",
                     (reason, job_id))
        return CancelOutcome(_require(conn, job_id), node_id=job.node_id)
    raise ApiError(ErrorCode.CONFLICT, f"job {job_id} is already {job.status}; nothing to cancel",
                   {"job_id": job_id, "status": job.status})


def retry_job(conn: sqlite3.Connection, job_id: str, *, asked_ms: int | None = None,
              with_dependants: bool = False) -> Job:
    """Queue an ended (or LOST) job again.

    Args:
        asked_ms: when a user asked for it (REST, MCP, the CLI). The job's dependencies are then
            looked at again: it waits for one that is pending (retried itself), and is refused
            when they can never be met (retry the failed one with ``with_dependants``). None: the
            daemon's own requeue (a failure policy), which goes on with the job as its automatic
            retries do, its dependencies met once.
        with_dependants: (with ``asked_ms``) its dependants cancelled with DEPENDENCY_FAILED,
            and theirs, are queued again behind it.

    Raises:
        ApiError: conflict, for a job that has not ended or whose dependencies can never be met.
    """
    job = _require(conn, job_id)
    try:
        new = next_state(JobState(job.status), JobEvent.RETRY)
    except IllegalTransition:
        raise ApiError(ErrorCode.CONFLICT, f"job {job_id} is {job.status}; only an ended job can be retried",
                       {"job_id": job_id, "status": job.status}) from None
    if asked_ms is None:
        _clear_attempt_fields(conn, job_id, new)
        conn.execute("UPDATE gpu_slots SET owner_job_id = NULL WHERE owner_job_id = ?", (job_id,))
        return _require(conn, job_id)
    never = dependency_rows.never_met(conn, job_id)
    if never is not None:
        raise ApiError(ErrorCode.CONFLICT, f"job {job_id} can never run: {never}; retry that job with its "
                                           "dependants instead", {"job_id": job_id, "reason": never})
    chain = dependency_rows.cancelled_chain(conn, job_id) if with_dependants else []
    _clear_attempt_fields(conn, job_id, new)
    conn.execute("UPDATE gpu_slots SET owner_job_id = NULL WHERE owner_job_id = ?", (job_id,))
    dependency_rows.recheck(conn, job_id, asked_ms)
    for child in chain:  # parents first: each waits for the one queued before it
        _clear_attempt_fields(conn, child, next_state(JobState.CANCELLED, JobEvent.RETRY))
        dependency_rows.recheck(conn, child, asked_ms)
    return _require(conn, job_id)


def _clear_attempt_fields(conn: sqlite3.Connection, job_id: str, queued: JobState) -> None:
    """Queue the job again (``queued``: the table's QUEUED); what its last attempt did stays
    on that attempt's run row."""
    conn.execute(
        "UPDATE jobs SET status = ?, run_id = NULL, gpu_indexes = NULL, started_at = NULL, "
        "finished_at = NULL, exit_code = NULL, failure_reason = NULL, failure_message = NULL, "
        "cancel_requested = 0, wait_reason = NULL WHERE id = ?",
        (queued.value, job_id),
    )


def job_token(conn: sqlite3.Connection, job_id: str) -> str | None:
    """The id of the API token that submitted the job (None: none, or no such job)."""
    row = conn.execute("SELECT token_id FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return row[0] if row else None


def job_exists(conn: sqlite3.Connection, job_id: str) -> bool:
    return conn.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone() is not None


def job_policies(conn: sqlite3.Connection, job_id: str) -> JobPolicies | None:
    """The job's failure and retention policies; None: no such job."""
    row = conn.execute("SELECT policies FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return load_policies(row[0]) if row else None


def current_run(conn: sqlite3.Connection, job_id: str) -> str | None:
    """The run of the job's current attempt; None before its first (or no such job)."""
    row = conn.execute("SELECT run_id FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return row[0] if row else None


def _require(conn: sqlite3.Connection, job_id: str) -> Job:
    job = get_job(conn, job_id)
    if job is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no job {job_id!r}", {"job_id": job_id})
    return job


def register_node(conn: sqlite3.Connection, hello: Hello, now_ms: int) -> tuple[str, list[ActiveJob]]:
    """Create or refresh the node named in ``hello`` and its GPU slots; list its active jobs."""
    hardware = json.dumps({"gpus": [attrs.asdict(g) for g in hello.gpus], "gpu_backend": hello.gpu_backend,
                           "host": hello.host})
    pooled = hello.pooled  # a Slurm node's (None: a local node, whose GPUs are its slots)
    runner = (hello.runner, pooled.gpus_per_job if pooled else None, pooled.max_jobs if pooled else None,
              hello.sdk_server)
    row = conn.execute("SELECT id FROM nodes WHERE name = ?", (hello.node_name,)).fetchone()
    if row is None:
        node_id = new_id("nd")
        conn.execute(
            "INSERT INTO nodes (id, name, status, agent_version, labels, hardware, last_heartbeat_at, "
            "created_at, max_cpu_jobs, runner, pooled_gpus_per_job, pooled_max_jobs, sdk_server) "
            "VALUES (?, ?, 'ONLINE', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (node_id, hello.node_name, hello.agent_version, json.dumps(list(hello.labels)), hardware,
             now_ms, now_ms, hello.max_cpu_jobs, *runner),
        )
    else:
        node_id = row[0]
        conn.execute(
            "UPDATE nodes SET status = 'ONLINE', agent_version = ?, labels = ?, hardware = ?, "
            "last_heartbeat_at = ?, max_cpu_jobs = ?, runner = ?, pooled_gpus_per_job = ?, pooled_max_jobs = ?, "
            "sdk_server = ? WHERE id = ?",
            (hello.agent_version, json.dumps(list(hello.labels)), hardware, now_ms, hello.max_cpu_jobs, *runner,
             node_id),
        )
    present = {g.index for g in hello.gpus}
    for gpu in hello.gpus:
        conn.execute(
            "INSERT INTO gpu_slots (id, node_id, gpu_index, model, vram_mb) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (node_id, gpu_index) DO UPDATE SET model = excluded.model, vram_mb = excluded.vram_mb",
            (new_id("slot"), node_id, gpu.index, gpu.model, gpu.memory_mb),
        )
    for (index,) in conn.execute("SELECT gpu_index FROM gpu_slots WHERE node_id = ? AND owner_job_id IS NULL",
                                 (node_id,)).fetchall():
        if index not in present:
            conn.execute("DELETE FROM gpu_slots WHERE node_id = ? AND gpu_index = ?", (node_id, index))
    active = conn.execute(
        "SELECT j.id, j.attempt, j.run_id, j.cancel_requested, j.gpu_indexes, j.env, j.sweep_id, s.max_parallel "
        f"FROM jobs j LEFT JOIN sweeps s ON s.id = j.sweep_id WHERE j.node_id = ? AND {one_of('j.status', _ON_NODE)}",
        (node_id, *_ON_NODE),
    ).fetchall()
    return node_id, [ActiveJob(job_id, attempt, run_id, bool(cancel), tuple(json.loads(gpus or "[]")),
                               json.loads(env) if env else {}, sweep_id, limit or 0)
                     for job_id, attempt, run_id, cancel, gpus, env, sweep_id, limit in active]


# --- remote nodes: LOST and unacknowledged dispatches (gpuplaned.service.link.agent_link) ----------

DISPATCH_TIMEOUT = FailureReason.DISPATCH_TIMEOUT.value  # a run's failure_reason: its node never said it started


def active_on_node(conn: sqlite3.Connection, node_id: str) -> list[tuple[str, int]]:
    """``(job id, attempt)`` of the node's DISPATCHING and RUNNING jobs."""
    return conn.execute(f"SELECT id, attempt FROM jobs WHERE node_id = ? AND {one_of('status', _ACTIVE)} "
                        "ORDER BY created_at, id", (node_id, *_ACTIVE)).fetchall()


def unacked_dispatches(conn: sqlite3.Connection, node_id: str, before_ms: int) -> list[tuple[str, int, int]]:
    """``(job id, attempt, earlier dispatch timeouts)`` of the node's jobs still DISPATCHING whose
    dispatch (its run's creation) is older than ``before_ms`` and which the node never said WAITING for."""
    return conn.execute(
        "SELECT j.id, j.attempt, (SELECT count(*) FROM runs p WHERE p.job_id = j.id AND p.failure_reason = ?) "
        "FROM jobs j JOIN runs r ON r.id = j.run_id WHERE j.node_id = ? AND j.status = ? AND r.created_at < ? "
        "AND j.wait_reason IS NULL "  # a node that said WAITING has it: its backend queues it, however long
        "ORDER BY j.created_at, j.id",
        (DISPATCH_TIMEOUT, node_id, JobState.DISPATCHING.value, before_ms)).fetchall()


def fail_dispatch(conn: sqlite3.Connection, job_id: str, attempt: int, message: str, now_ms: int) -> str | None:
    """End a DISPATCHING attempt as FAILED for good (no automatic retry: its dispatches were never
    acknowledged); returns its run id, or None when the job has moved on meanwhile."""
    row = conn.execute("SELECT run_id FROM jobs WHERE id = ? AND attempt = ? AND status = ?",
                       (job_id, attempt, JobState.DISPATCHING.value)).fetchone()
    if row is None:
        return None
    new = next_state(JobState.DISPATCHING, JobEvent.FAILED)
    conn.execute("UPDATE jobs SET status = ?, finished_at = ?, failure_reason = ?, failure_message = ? WHERE id = ?",
                 (new.value, now_ms, DISPATCH_TIMEOUT, message, job_id))
    dependency_rows.settle(conn, job_id, now_ms)
    conn.execute("UPDATE runs SET status = ?, finished_at = ?, failure_reason = ? WHERE id = ?",
                 (new.value, now_ms, DISPATCH_TIMEOUT, row[0]))
    conn.execute("UPDATE gpu_slots SET owner_job_id = NULL WHERE owner_job_id = ?", (job_id,))
    token_rows.revoke_job_tokens(conn, job_id, now_ms)
    return row[0]
