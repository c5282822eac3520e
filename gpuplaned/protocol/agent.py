"""Node <-> server messages (seed 000 section 5.2), the same in-process and over the wire.

In role ``all`` they travel over memory channels between the runner and the scheduler; a
remote agent will send the very same types as JSON frames (``type`` tag) over WebSocket.
"""

from __future__ import annotations

from typing import Any, Union

import attrs


@attrs.frozen
class GpuInfo:
    index: int
    model: str
    memory_mb: int
    uuid: str | None = None


@attrs.frozen
class Hello:
    """A node announces itself; the server answers ``HelloOk``."""

    node_name: str
    agent_version: str
    gpus: tuple[GpuInfo, ...]
    labels: tuple[str, ...] = ()
    max_cpu_jobs: int = 2
    gpu_backend: str = "none"
    host: dict[str, Any] = attrs.field(factory=dict)  # cpu_count, memory_mb, hostname, gpu_backend_note...


@attrs.frozen
class ActiveJob:
    job_id: str
    attempt: int
    run_id: str
    cancel_requested: bool = False  # a cancel the node may have missed while it was away
    gpu_indexes: tuple[int, ...] = ()


@attrs.frozen
class HelloOk:
    node_id: str
    # Jobs the server believes are dispatched to or running on this node: the node
    # re-adopts them, reports how they ended, or reports them lost.
    active: tuple[ActiveJob, ...] = ()


@attrs.frozen
class JobSpecWire:
    """What a node needs to start one attempt of a job."""

    job_id: str
    run_id: str
    attempt: int
    name: str
    argv: tuple[str, ...]
    cwd: str
    env: dict[str, str]
    gpu_indexes: tuple[int, ...]
    timeout_s: float | None
    stop_grace_s: float


@attrs.frozen
class Dispatch:
    job: JobSpecWire


@attrs.frozen
class Cancel:
    job_id: str
    attempt: int


@attrs.frozen
class JobStatus:
    """A node reports a job's state change (RUNNING, SUCCEEDED, FAILED, CANCELLED, LOST, REQUEUE)."""

    job_id: str
    attempt: int
    status: str
    pid: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    failure_reason: str | None = None
    message: str | None = None
    at_ms: int | None = None  # when it happened (wall clock), if known
    log_line: str | None = None  # the line of the job's output that tells why it failed


@attrs.frozen
class NodeSnapshot:
    """The node's latest readings (every monitor sample, ~2 s), kept in memory by the server.

    ``gpus``, ``host`` and ``jobs`` are JSON objects as the API shows them (see
    ``gpuplaned.telemetry.snapshot``). ``accepting`` and ``blocked_gpus`` are the node's own
    verdict on new work: no new job while a disk is low, no new job on a lost GPU or (by
    default) on one that a process outside GPUPlane is using.
    """

    ts: int
    backend: str
    gpus: tuple[dict[str, Any], ...] = ()
    host: dict[str, Any] | None = None
    jobs: tuple[dict[str, Any], ...] = ()
    conditions: tuple[str, ...] = ()
    accepting: bool = True
    blocked_gpus: tuple[int, ...] = ()


@attrs.frozen
class SysMetrics:
    """A batch of node metric points (seed "sys_metrics"); ``seq`` makes a replay harmless."""

    seq: int
    points: tuple[tuple[str, int, float], ...]  # (name, ts ms, value)


@attrs.frozen
class NodeEvent:
    """Something the node noticed (seed "event"): disk low, GPU lost, pinning violated..."""

    type: str
    severity: str  # info | warning | critical
    message: str
    ts: int
    job_id: str | None = None
    context: dict[str, Any] = attrs.field(factory=dict)


ServerToNode = Union[Dispatch, Cancel]
NodeToServer = Union[Hello, JobStatus, NodeSnapshot, SysMetrics, NodeEvent]
