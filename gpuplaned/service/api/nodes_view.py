"""Nodes as the API shows them (hardware, slots with their owning jobs, whether connected,
whether drained, a remote node's link), and the writes on a node's record: drain, undrain, forget."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from gpuplaned.protocol.agent import NodeSnapshot
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.job_states import ACTIVE, values
from gpuplaned.protocol.converter import unstructure
from gpuplaned.protocol.node_replies import ForgottenNode, LinkView, NodeInfo, PooledView, SlotInfo
from gpuplaned.protocol.node_replies import NodeSnapshot as SnapshotView  # the API's, of the frame's
from gpuplaned.protocol.reply_words import Ref
from gpuplaned.protocol.sse_frames import format_event
from gpuplaned.runtime.broadcast import Lagged
from gpuplaned.service import access
from gpuplaned.service.passes.dispatch import wake_scheduler
from gpuplaned.store import node_rows
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext
    from gpuplaned.service.link.registry import LinkInfo


log = logging.getLogger("gpuplaned.nodes")

UNHEALTHY_CONDITIONS = frozenset({"GPU_LOST", "DISK_LOW"})
_ACTIVE = values(ACTIVE)  # the jobs that take a CPU place
DRAINED = "DRAINED"  # the condition a drained node shows (it is the server's, not the node's)


def link_view(info: LinkInfo | None) -> LinkView | None:
    if info is None:
        return None
    return LinkView(state=info.state, last_heard_at=info.last_heard_ms, last_heartbeat_at=info.last_heartbeat_ms,
                    backlog_records=info.backlog_records, backlog_bytes=info.backlog_bytes, skew_ms=info.skew_ms)


def _query(conn: Any) -> list[tuple[Any, ...]]:
    return node_rows.node_table(conn, _ACTIVE)


async def list_nodes(shared: ServerContext) -> list[NodeInfo]:
    if shared.readers is None:
        raise ApiError(ErrorCode.UNAVAILABLE, "this daemon's role keeps no node registry")
    rows = await shared.readers.run(_query)
    connected = shared.nodes.connected()
    result = []
    for (node_id, name, _status, labels, hardware, max_cpu, heartbeat, drained, uplink, runner, per_job, max_jobs,
         in_flight), slots, cpu_jobs in rows:
        hw = json.loads(hardware or "{}")
        snapshot = shared.nodes.snapshot(node_id)
        conditions = list(snapshot.conditions) if snapshot else []
        result.append(NodeInfo(
            id=node_id, name=name, status=node_status(node_id in connected, snapshot),
            connected=node_id in connected, labels=json.loads(labels or "[]"),
            gpu_backend=hw.get("gpu_backend", "none"), max_cpu_jobs=max_cpu, cpu_jobs=cpu_jobs,
            gpus=[SlotInfo(*s) for s in slots], last_heartbeat_at=heartbeat,
            gpu_backend_note=hw.get("host", {}).get("gpu_backend_note") or None,
            hardware=hw.get("host", {}),
            accepting=(snapshot.accepting if snapshot else True) and not drained,
            conditions=[*conditions, DRAINED] if drained else conditions,
            condition_messages=dict(snapshot.condition_messages) if snapshot else {},
            snapshot=SnapshotView.of(snapshot) if snapshot else None,
            drained=bool(drained),
            remote=bool(uplink), link=link_view(shared.nodes.link_info(node_id)), runner=runner,
            pooled=None if max_jobs is None else PooledView(gpus_per_job=per_job, max_jobs=max_jobs,
                                                            jobs_in_flight=in_flight),
        ))
    return result


def node_status(connected: bool, snapshot: NodeSnapshot | None) -> str:
    """ONLINE, OFFLINE, or UNHEALTHY: connected, but a GPU is lost, a disk is low, or a part of
    the node raised a condition (slurm_unreachable)."""
    if not connected:
        return "OFFLINE"
    if snapshot is not None and (set(snapshot.conditions) & UNHEALTHY_CONDITIONS or snapshot.condition_messages):
        return "UNHEALTHY"
    return "ONLINE"




async def follow_snapshots(shared: ServerContext, node_id: str) -> AsyncGenerator[bytes, None]:
    """SSE frames of a node's snapshots: the latest at once, then each new one (~2 s).

    A snapshot is the node's whole current state, so a follower that falls behind or
    reconnects simply gets the next one; ``id`` is the snapshot's time.
    """
    async with shared.nodes.snapshot_feed.subscribe(maxlen=4) as live:
        current = shared.nodes.snapshot(node_id)
        if current is not None:
            yield _snapshot_frame(current)
        async for item in live:
            if isinstance(item, Lagged):
                continue  # only the newest matters
            owner, snapshot = item
            if owner == node_id:
                yield _snapshot_frame(snapshot)


def _snapshot_frame(snapshot: NodeSnapshot) -> bytes:
    return format_event(json.dumps(unstructure(SnapshotView.of(snapshot)), separators=(",", ":")),
                        id=str(snapshot.ts), event="snapshot")


async def get_node(shared: ServerContext, key: str) -> NodeInfo:
    """One node by id or by name."""
    for node in await list_nodes(shared):
        if key in (node.id, node.name):
            return node
    raise ApiError(ErrorCode.NOT_FOUND, f"no node {key!r}", {"node": key})


async def set_drained(shared: ServerContext, key: str, drained: bool) -> NodeInfo:
    """Drain (``drained``) or undrain the node whose id or name is ``key``; kept across
    restarts and hellos. A drained node gets no new jobs, and its running ones go on; jobs
    that only it could run wait with a reason saying so. Draining a drained node (or
    undraining one that is not) changes nothing and is no error.

    Raises:
        ApiError: ``not_found``.
    """
    def apply(conn: Any) -> tuple[str, str, bool]:
        found = node_rows.find_node(conn, key)
        if found is None:
            raise ApiError(ErrorCode.NOT_FOUND, f"no node {key!r}", {"node": key})
        node_id, name = found
        return node_id, name, node_rows.set_drained(conn, node_id, drained)

    node_id, name, changed = await write(access.store_port(shared, "node registry"), apply, small=True)
    if changed:
        log.info("%s node %s (%s)", "drained" if drained else "undrained", name, node_id)
        wake_scheduler(shared)  # after the commit: a pass places what waited for it, or says why jobs wait
    return await get_node(shared, node_id)


async def forget_node(shared: ServerContext, key: str) -> ForgottenNode:
    """Forget a node that is gone for good (renamed, retired): its record, GPU slots and
    metrics. Its jobs and runs keep their history; if it says hello again, it is a new node.

    Raises:
        ApiError: ``not_found``; ``conflict`` while it is connected or a job is active on it.
    """
    connected = shared.nodes.connected()

    def forget(conn: Any) -> tuple[str, str]:
        found = node_rows.find_node(conn, key)
        if found is None:
            raise ApiError(ErrorCode.NOT_FOUND, f"no node {key!r}", {"node": key})
        node_id, name = found
        if node_id in connected:
            raise ApiError(ErrorCode.CONFLICT, f"node {name!r} is online: only an offline node can be forgotten "
                           "(stop its daemon or agent first)", {"node": name, "status": "ONLINE"})
        node_rows.forget_node(conn, node_id, name)
        return node_id, name

    node_id, name = await write(access.store_port(shared, "node registry"), forget)
    log.info("forgot node %s (%s)", name, node_id)
    return ForgottenNode(forgotten=Ref(id=node_id, name=name))
