"""Node <-> server messages (seed 000 section 5.2), the same in-process and over the wire.

In role ``all`` they travel over memory channels between the runner and the scheduler; a
remote agent sends the very same types as JSON frames (``type`` tag) over WebSocket:
``FRAMES`` is that one closed family (``FRAMES.structure(json)``, ``FRAMES.unstructure(frame)``).
"""

from __future__ import annotations

import math
from typing import Any, Union

import attrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from gpuplaned.protocol.checkpoint_ops import CheckpointRead, CheckpointReading, CheckpointRemoval, CheckpointRemove
from gpuplaned.protocol.converter import FieldInvalid, TaggedUnion, converter
from gpuplaned.protocol.evaluation_wire import EvalResult
from gpuplaned.protocol.fields import field
from gpuplaned.protocol.job_folder_ops import JobFoldersRemoval, JobFoldersRemove
from gpuplaned.protocol.job_states import NodeReport
from gpuplaned.protocol.tb_frames import TbCursors, TbPoints, TbStored
from gpuplaned.protocol.uplink_frames import (
    Ack,
    Goodbye,
    Heartbeat,
    HeartbeatOk,
    LogData,
    LogRead,
    Record,
    Records,
    Reply,
    Request,
    SessionCall,
    SessionReply,
    Skip,
)


@attrs.frozen
class GpuInfo:
    index: int
    model: str
    memory_mb: int
    uuid: str | None = None


RUNNERS = ("local", "slurm")  # ``[node] runner``: how a node runs its jobs (issue 32)


@attrs.frozen
class PooledCapacity:
    """What a node whose scheduler places the GPUs itself (Slurm) offers instead of GPU slots:
    the most GPUs one job may ask of it, and how many of our jobs it may hold at once (queued
    in Slurm or running)."""

    gpus_per_job: int = field(minimum=0, message="must be 0 or more, got {value}")
    max_jobs: int = field(minimum=1, message="must be at least 1, got {value}")


def _runner_fits_pooled(hello: Hello) -> None:
    """A Slurm node says its pooled capacity (and no GPU slots); a local node has GPU slots only."""
    if hello.runner == "slurm" and hello.pooled is None:
        raise FieldInvalid("pooled", "required for runner 'slurm' (its gpus_per_job and max_jobs)")
    if hello.runner == "local" and hello.pooled is not None:
        raise FieldInvalid("pooled", "only a node with runner 'slurm' has pooled capacity; runner 'local' "
                                     "offers its GPUs one by one")
    if hello.pooled is not None and hello.gpus:
        raise FieldInvalid("gpus", "must be empty for a pooled node (Slurm places its GPUs)")


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
    # A remote agent's own id (kept in its state file): a hello with the name of a node whose
    # link still looks connected is that agent coming back only if the id matches.
    agent_id: str | None = None
    ts_ms: int | None = None  # the agent's wall clock when it said hello (the server's skew estimate)
    runner: str = field(default="local", enum=RUNNERS, message="must be 'local' or 'slurm', got {value!r}")
    pooled: PooledCapacity | None = None  # required for runner "slurm", refused for "local"
    # Where this node's jobs reach the server's HTTP front (a Slurm node's [slurm] server_url): each
    # dispatch to it then carries GPUPLANE_SERVER and a token of its job (service/api/job_tokens.py).
    sdk_server: str | None = field(default=None, pattern=r"^https?://[^\s/]+", max_length=2048,
                                   message="must be an http(s):// URL of the server's HTTP front; got {value!r}")

    def __attrs_post_init__(self) -> None:
        _runner_fits_pooled(self)


@attrs.frozen
class ActiveJob:
    job_id: str
    attempt: int
    run_id: str
    cancel_requested: bool = False  # a cancel the node may have missed while it was away
    gpu_indexes: tuple[int, ...] = ()
    # The job's own variables as submitted: for an attempt that ended while the node was away,
    # whose process can no longer tell (its declared log and checkpoint folders).
    env: dict[str, str] = attrs.field(factory=dict)
    # A sweep's trial: its sweep and that sweep's max_parallel now (0: none). A node that runs
    # trials as arrays applies it on adoption, for a SweepThrottle it may have missed while away.
    sweep_id: str | None = None
    sweep_max_parallel: int = 0


@attrs.frozen
class HelloOk:
    node_id: str
    # Jobs the server believes are dispatched to or running on this node: the node
    # re-adopts them, reports how they ended, or reports them lost.
    active: tuple[ActiveJob, ...] = ()
    # Remote agents: where each record stream's stored part ends (stream -> highest seq
    # committed), so that a restarted agent resumes after it; and the server's clock.
    acked: dict[str, int] = attrs.field(factory=dict)
    ts_ms: int | None = None
    heartbeat_s: float | None = None  # how often the server expects a heartbeat


@attrs.frozen
class ArrayTask:
    """A sweep's trial placed on a pooled node: its node runs the sweep's trials it holds as one
    Slurm array job (issue 32 item 4), this trial as task ``index`` (its ``sweep_trial``), at most
    ``throttle`` tasks at once (Slurm's ``%K``: the sweep's max_parallel; 0 for no limit)."""

    sweep_id: str
    index: int = field(minimum=0, message="must be 0 or more, got {value}")
    throttle: int = field(default=0, minimum=0, message="must be 0 (no limit) or more, got {value}")


@attrs.frozen
class JobSpecWire:
    """What a node needs to start one attempt of a job."""

    job_id: str
    run_id: str
    attempt: int
    name: str
    argv: tuple[str, ...]
    cwd: str
    # Holds the job's secret env too (opened by gpuplaned.service.passes.dispatch): a logged message
    # shows its names only.
    env: dict[str, str] = attrs.field(repr=lambda env: f"<env {', '.join(env)}>")
    gpu_indexes: tuple[int, ...]
    timeout_s: float | None
    stop_grace_s: float
    # An EVALUATE job: the node gives it GPUPLANE_EVAL_RESULT and reads that file at its end.
    evaluation: bool = False
    # How many GPUs the job asked for: a pooled node (Slurm) gets ``gpu_indexes=()`` and asks its
    # scheduler for this many (``--gres=gpu:<gpus>``); the local runner keeps using ``gpu_indexes``.
    gpus: int = 0
    # A sweep's trial on a pooled node: a task of its sweep's array job (None: a job of its own).
    array: ArrayTask | None = None


@attrs.frozen
class Dispatch:
    job: JobSpecWire


@attrs.frozen
class Cancel:
    job_id: str
    attempt: int


@attrs.frozen
class SweepThrottle:
    """Server to node: the sweep's max_parallel changed. A pooled node applies it to the sweep's
    array jobs (``scontrol update ArrayTaskThrottle``); a local node has nothing to do (the
    server's queue holds its trials)."""

    sweep_id: str
    max_parallel: int = field(minimum=0, message="must be 0 (no limit) or more, got {value}")


@attrs.frozen
class JobStatus:
    """A node reports a job's state change (RUNNING, SUCCEEDED, FAILED, CANCELLED, LOST, REQUEUE)."""

    job_id: str
    attempt: int
    status: NodeReport = attrs.field(converter=NodeReport)  # a string not in it is refused, here and on the wire
    pid: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    failure_reason: str | None = None
    message: str | None = None
    at_ms: int | None = None  # when it happened (wall clock), if known
    log_line: str | None = None  # the line of the job's output that tells why it failed
    eval_result: EvalResult | None = None  # an evaluation's end: what its result file held


@attrs.frozen
class NodeSnapshot:
    """The node's latest readings (every monitor sample, ~2 s), kept in memory by the server.

    ``gpus``, ``host`` and ``jobs`` are JSON objects as the API shows them (made by
    ``gpuplaned.actors.monitor.snapshot_of``). ``accepting`` and ``blocked_gpus`` are the node's own
    verdict on new work: no new job while a disk is low, no new job on a lost GPU or (by
    default) on one that a process outside GPUPlane is using, none at all while a condition a part
    of the node raised holds (``NodeContext.conditions``: the Slurm backend's ``slurm_unreachable``).
    ``conditions`` names every condition; ``condition_messages`` says what each raised one means.
    """

    ts: int
    backend: str
    gpus: tuple[dict[str, Any], ...] = ()
    host: dict[str, Any] | None = None
    jobs: tuple[dict[str, Any], ...] = ()
    conditions: tuple[str, ...] = ()
    accepting: bool = True
    blocked_gpus: tuple[int, ...] = ()
    condition_messages: dict[str, str] = attrs.field(factory=dict)  # name -> message, of the raised ones


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


@attrs.frozen
class LogChunk:
    """New lines of one stream of one job attempt, from one pass of the node's log tailer."""

    job_id: str
    attempt: int
    stream: str  # stdout | stderr
    start: int  # the file offset the read started at: a follower that has read less missed lines
    end: int  # the file offset just after the last line read: where the next chunk starts
    lines: tuple[tuple[int, str], ...]  # (offset, text) in file order
    # Every line from ``start`` to ``end`` (the attempt has live followers); else only the
    # last ``LogLines.tail_lines`` of them, which is all the store keeps.
    complete: bool = False


@attrs.frozen
class LogLines:
    """One pass of the node's log tailer (seed "log_lines"): the server keeps the last
    ``tail_lines`` lines of each stream and feeds the attempts' live followers."""

    tail_lines: int
    chunks: tuple[LogChunk, ...] = ()
    # The attempts with live followers that this pass read, new lines or not: their
    # followers go on waiting for the feed rather than reading the files.
    served: tuple[tuple[str, int], ...] = ()


@attrs.frozen
class LogOffsets:
    """Where the stored tail of each stream of some job attempts ends; the node resumes
    tailing there (asked with the attempts as ``(job_id, attempt)``, answered in ``offsets``)."""

    attempts: tuple[tuple[str, int], ...]
    offsets: tuple[tuple[str, int, str, int], ...] = ()  # (job_id, attempt, stream, offset)


@attrs.frozen
class LogFollow:
    """Server to node: a job attempt has live followers (``live``) or no longer has any.
    While it has, the node sends every new line of it, and passes over it more often."""

    job_id: str
    attempt: int
    live: bool


@attrs.frozen
class NodeEvents:
    """A record body: what the node's health rules noticed in one pass (``NodeLink.events``)."""

    events: tuple[NodeEvent, ...]


CHECKPOINT_KINDS = ("file", "hf", "lightning", "deepspeed")  # as gpuplaned.checkpoints.recognize tells them


def _finite(value: float) -> str | None:
    return None if math.isfinite(value) else "must be a finite number"


@attrs.frozen
class FoundCheckpoint:
    """A checkpoint the node's watcher found complete in a job's folders (no SDK involved):
    ``path`` is absolute, on the node, a file or (``hf``, ``deepspeed``) a directory."""

    path: str = field(min_length=2, max_length=4096, pattern="^/[^\\x00]*$")
    kind: str = field(enum=CHECKPOINT_KINDS)
    size_bytes: int = field(minimum=0)
    mtime_ms: int = field(minimum=0)
    fingerprint: str = field(pattern="^sha1:[0-9a-f]{40}$")  # of size, mtime, first and last MiB
    step: int | None = field(default=None, minimum=0)
    epoch: float | None = field(default=None, minimum=0, check=_finite)


@attrs.frozen
class CheckpointsFound:
    """Node to server: checkpoints of one job attempt. Registered once per (run, path): a
    resent find with the same fingerprint changes nothing."""

    job_id: str
    attempt: int
    run_id: str
    checkpoints: tuple[FoundCheckpoint, ...]


ServerToNode = Union[Dispatch, Cancel, SweepThrottle, LogFollow]
NodeToServer = Union[Hello, JobStatus, NodeSnapshot, SysMetrics, NodeEvent, LogLines, LogOffsets, CheckpointsFound,
                     TbPoints, TbCursors]


@attrs.frozen
class HelloErr:
    """The server refuses a ``Hello`` (a bad one, or a name a connected node has)."""

    message: str


@attrs.frozen
class Ping:
    """Keep-alive, either way; answered with ``Pong``."""


@attrs.frozen
class Pong:
    server_version: str | None = None


@attrs.frozen
class FrameError:
    """The answer to a frame that cannot be read or is not served (yet)."""

    message: str


# On the wire the frame's tag is "type": an event's own type travels as "event_type".
converter.register_structure_hook(
    NodeEvent, make_dict_structure_fn(NodeEvent, converter, type=override(rename="event_type")))
converter.register_unstructure_hook(
    NodeEvent, make_dict_unstructure_fn(NodeEvent, converter, type=override(rename="event_type")))

FRAMES = TaggedUnion({
    "hello": Hello, "hello_ok": HelloOk, "hello_err": HelloErr, "ping": Ping, "pong": Pong, "error": FrameError,
    "dispatch": Dispatch, "cancel": Cancel, "sweep_throttle": SweepThrottle, "log_follow": LogFollow,
    "job_status": JobStatus, "node_snapshot": NodeSnapshot, "sys_metrics": SysMetrics, "event": NodeEvent,
    "log_lines": LogLines, "log_offsets": LogOffsets, "checkpoints_found": CheckpointsFound,
    "tb_points": TbPoints, "tb_stored": TbStored, "tb_cursors": TbCursors,  # protocol/tb_frames.py
    # protocol/uplink_frames.py: a remote agent's link
    "record": Record, "records": Records, "ack": Ack, "request": Request, "reply": Reply, "heartbeat": Heartbeat,
    "heartbeat_ok": HeartbeatOk, "goodbye": Goodbye, "skip": Skip,
})

# What the uplink's envelopes carry (``Record.body``, ``Request.body``, ``Reply.body``), tagged
# by ``type`` as the frames are.
RECORD_BODIES = TaggedUnion({"job_status": JobStatus, "sys_metrics": SysMetrics, "node_events": NodeEvents,
                             "log_lines": LogLines, "checkpoints_found": CheckpointsFound})
REQUEST_BODIES = TaggedUnion({"log_offsets": LogOffsets, "tb_points": TbPoints, "tb_cursors": TbCursors,
                              "session_call": SessionCall, "log_read": LogRead,
                              "ckpt_read": CheckpointRead, "ckpt_remove": CheckpointRemove,
                              "job_folders_remove": JobFoldersRemove})
REPLY_BODIES = TaggedUnion({"log_offsets": LogOffsets, "tb_stored": TbStored, "tb_cursors": TbCursors,
                            "session_reply": SessionReply, "log_data": LogData,
                            "ckpt_reading": CheckpointReading, "ckpt_removal": CheckpointRemoval,
                            "job_folders_removal": JobFoldersRemoval})
# The stream each record body travels on (uplink_frames.STREAMS).
STREAM_OF = {JobStatus: "status", SysMetrics: "metrics", NodeEvents: "events", LogLines: "logs",
             CheckpointsFound: "checkpoints"}
