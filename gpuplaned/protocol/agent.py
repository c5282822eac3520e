"""Node <-> server messages (seed 000 section 5.2), the same in-process and over the wire.

In role ``all`` they travel over memory channels between the runner and the scheduler; a
remote agent will send the very same types as JSON frames (``type`` tag) over WebSocket.
"""

from __future__ import annotations

from typing import Union

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


@attrs.frozen
class ActiveJob:
    job_id: str
    attempt: int
    run_id: str
    cancel_requested: bool = False  # a cancel the node may have missed while it was away


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


ServerToNode = Union[Dispatch, Cancel]
NodeToServer = Union[Hello, JobStatus]
