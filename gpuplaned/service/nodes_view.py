"""Nodes as the API shows them: hardware, slots with their owning jobs, whether connected."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs

from gpuplaned.protocol.errors import ApiError, ErrorCode

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext


@attrs.frozen
class SlotInfo:
    index: int
    model: str | None
    memory_mb: int | None
    owner_job_id: str | None
    owner_job_name: str | None


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


def _query(conn: Any) -> list[tuple[Any, ...]]:
    nodes = conn.execute(
        "SELECT id, name, status, labels, hardware, max_cpu_jobs, last_heartbeat_at FROM nodes ORDER BY name"
    ).fetchall()
    out = []
    for node in nodes:
        slots = conn.execute(
            "SELECT s.gpu_index, s.model, s.vram_mb, s.owner_job_id, j.name FROM gpu_slots s "
            "LEFT JOIN jobs j ON j.id = s.owner_job_id WHERE s.node_id = ? ORDER BY s.gpu_index", (node[0],)
        ).fetchall()
        cpu_jobs = conn.execute(
            "SELECT count(*) FROM jobs WHERE node_id = ? AND status IN ('DISPATCHING', 'RUNNING') "
            "AND json_extract(resources, '$.gpu') = 0", (node[0],)
        ).fetchone()[0]
        out.append((node, slots, cpu_jobs))
    return out


async def list_nodes(shared: DaemonContext) -> list[NodeInfo]:
    if shared.readers is None:
        raise ApiError(ErrorCode.UNAVAILABLE, "this daemon's role keeps no node registry")
    rows = await shared.readers.run(_query)
    connected = shared.nodes.connected()
    result = []
    for (node_id, name, _status, labels, hardware, max_cpu, heartbeat), slots, cpu_jobs in rows:
        hw = json.loads(hardware or "{}")
        result.append(NodeInfo(
            id=node_id, name=name, status="ONLINE" if node_id in connected else "OFFLINE",
            connected=node_id in connected, labels=json.loads(labels or "[]"),
            gpu_backend=hw.get("gpu_backend", "none"), max_cpu_jobs=max_cpu, cpu_jobs=cpu_jobs,
            gpus=[SlotInfo(*s) for s in slots], last_heartbeat_at=heartbeat,
        ))
    return result
