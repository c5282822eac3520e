"""Nodes as the API shows them: hardware, GPU slots with their owning jobs, whether connected or
drained, a remote node's link, the latest readings, and a node's metrics as columns."""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.node_samples import GpuSample, HostSample
from gpuplaned.protocol.reply_words import MS, Ref
from gpuplaned.protocol.run_replies import Buckets


@attrs.frozen
class SlotInfo:
    index: int
    model: str | None
    memory_mb: int | None
    owner_job_id: str | None
    owner_job_name: str | None


@attrs.frozen(kw_only=True)
class LinkView:
    """A remote node's link to this server, as this server saw it since it started."""

    state: str = doc("attached: its agent's connection is up; detached: it dropped (the node is OFFLINE)",
                     enum=("attached", "detached"))
    last_heard_at: int | None = doc("ms since the epoch: the last frame of any kind from its agent")
    last_heartbeat_at: int | None = doc("ms since the epoch: its agent's last heartbeat; null: none yet")
    backlog_records: int | None = doc("records in the agent's spool not yet acknowledged, as its last heartbeat "
                                      "said; null: no heartbeat yet", minimum=0)
    backlog_bytes: int | None = doc("those records' size in bytes", minimum=0)
    skew_ms: int | None = doc("the agent's clock minus this server's, in ms (from its hello and heartbeats)")


@attrs.frozen(kw_only=True)
class PooledView:
    """A pooled node's capacity (Slurm places its GPUs): job slots instead of GPU slots."""

    gpus_per_job: int = doc("the most GPUs one job may ask of the node", minimum=0)
    max_jobs: int = doc("how many of our jobs it holds at once, queued in Slurm or running", minimum=1)
    jobs_in_flight: int = doc("its DISPATCHING and RUNNING jobs now, CPU jobs too", minimum=0)


@attrs.frozen
class NodeInfo:
    id: str
    name: str
    status: str
    connected: bool
    labels: list[str]
    gpu_backend: str
    max_cpu_jobs: int
    cpu_jobs: int
    gpus: list[SlotInfo]
    last_heartbeat_at: int | None
    gpu_backend_note: str | None = None
    hardware: dict[str, Any] = attrs.field(factory=dict)  # host facts from the node's hello
    accepting: bool = True  # False while the node takes no new work (a disk is low)
    conditions: list[str] = attrs.field(factory=list)
    condition_messages: dict[str, str] = attrs.field(factory=dict)  # of the conditions its parts raised
    snapshot: NodeSnapshot | None = None  # latest readings, None until the first sample
    drained: bool = False  # `node drain`: no new jobs (its running ones go on) until `node undrain`
    remote: bool = False  # a remote agent's node (it said hello over the agent WebSocket), not the server's own
    link: LinkView | None = None  # None: no remote link since this server started (its own node, or not back yet)
    runner: str = "local"  # how it runs jobs: local (GPU slots), slurm (pooled)
    pooled: PooledView | None = None  # a Slurm node's capacity; None: a local node


@attrs.frozen(kw_only=True)
class ProcessReading:
    pid: int
    gpu_memory_mb: int | None
    job_id: str | None
    foreign: bool = doc("not started by GPUPlane")


@attrs.frozen(kw_only=True)
class GpuReading(GpuSample):
    """One GPU's latest readings; any reading may be null where the card lacks it."""

    error: str | None = doc("set when the GPU could not be read this period (gpu_lost: ...)", default=None)
    processes: tuple[ProcessReading, ...] = ()
    owner_job_id: str | None = None


@attrs.frozen(kw_only=True)
class SnapshotJob:
    job_id: str
    gpu_indexes: list[int]
    gpu_memory_mb: int


@attrs.frozen(kw_only=True)
class NodeSnapshot:
    """The node's latest readings (about every 2 s)."""

    # gpus, host and jobs are the JSON the node made of its sample (actors/monitor.snapshot_of),
    # passed on as it came: an agent of another version may add a key, which a reader ignores.
    ts: int = doc(MS)
    backend: str = doc("nvml, fake or none")
    gpus: list[dict[str, Any]] = doc(documented_as=list[GpuReading])
    host: dict[str, Any] | None = doc(documented_as=HostSample | None)
    jobs: list[dict[str, Any]] = doc(documented_as=list[SnapshotJob])
    blocked_gpus: list[int] = doc("GPUs that take no new job (lost, or used outside GPUPlane)")

    @classmethod
    def of(cls, frame: Any) -> NodeSnapshot:
        """The API's view of a node's snapshot frame (``protocol.agent.NodeSnapshot``)."""
        return cls(ts=frame.ts, backend=frame.backend, gpus=list(frame.gpus), host=frame.host,
                   jobs=list(frame.jobs), blocked_gpus=list(frame.blocked_gpus))


@attrs.frozen(kw_only=True)
class Node(NodeInfo):
    status: str = doc(enum=("ONLINE", "OFFLINE", "UNHEALTHY"))
    last_heartbeat_at: int | None = doc(MS)
    hardware: dict[str, Any] = doc("host facts from the node's hello (hostname, cpu_count, memory_mb...)",
                                   factory=dict)
    accepting: bool = doc("false while the node takes no new work (a disk is low, a condition holds)", default=True)
    condition_messages: dict[str, str] = doc("what each condition a part of the node raised means, by its name "
                                             "(slurm_unreachable: slurmctld did not answer squeue within 10 s: ...); "
                                             "while one holds the node takes no new work. The other conditions "
                                             "(DISK_LOW, DRAINED) say it by their names", factory=dict)
    snapshot: NodeSnapshot | None = doc("null until the first sample, and while the node is not connected",
                                        default=None)
    remote: bool = doc("a remote agent's node (`--role agent`), whose link the server judges by its heartbeats; "
                       "false: the server's own node", default=False)
    link: LinkView | None = doc("the remote node's link as this server saw it; null for the server's own node, and "
                                "for a remote node this server has not heard from since it started", default=None)
    runner: str = doc("how the node runs jobs: local (its own GPUs, one slot each), slurm (it hands them to a Slurm "
                      "cluster, which places the GPUs)", enum=("local", "slurm"), default="local")
    pooled: PooledView | None = doc("a slurm node's capacity (its gpus is empty); null for a local node",
                                    default=None)


@attrs.frozen(kw_only=True)
class NodeReply:
    node: Node


@attrs.frozen(kw_only=True)
class NodeList:
    nodes: list[Node]


@attrs.frozen(kw_only=True)
class ForgottenNode:
    forgotten: Ref


@attrs.frozen(kw_only=True)
class NodeMetrics:
    node_id: str
    start: int = doc(MS)
    end: int = doc(MS)
    resolution: str = doc(enum=("raw", "1m", "5m"))
    width: int = doc("bucket width in ms (1: raw points)", minimum=1)
    x: list[int] = doc("each bucket's start, in ms")
    series: dict[str, Buckets] = doc("metric name -> columns aligned with x")
