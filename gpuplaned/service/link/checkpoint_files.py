"""A checkpoint's file, read or deleted on the host that holds it.

A checkpoint of a run on the server's own node (role ``all``, ``server --also-node``) is on
this host: ``gpuplaned.checkpoints.on_disk`` runs on a worker thread. One of a run on a remote
agent's node is there: the agent is asked over the uplink (``ckpt_read``, ``ckpt_remove``,
``gpuplaned.protocol.checkpoint_ops``) and runs the same code. While that agent is not
connected, a verify is ``unavailable`` and a deletion is refused, both naming the node; never
is the server's own filesystem taken for the node's (a file absent here is not gone there).

Either touches only a file in its run's folders (``run_roots``), checked where the file lies
(``on_disk``): a run a network credential created has none on any host of ours, since its
script's files are on the script's host, and whatever path it named is never read or deleted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import trio

from gpuplaned.checkpoints import on_disk
from gpuplaned.protocol.checkpoint_ops import CheckpointRead, CheckpointReading, CheckpointRemoval, CheckpointRemove
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service import access
from gpuplaned.service.link.registry import NodeUnavailable
from gpuplaned.store import run_owners, run_rows, uplink_rows
from gpuplaned.store.checkpoint_rows import Checkpoint

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

__all__ = ["RemoteNode", "read", "remote_node_of_run", "remove", "run_roots"]

READ_TIMEOUT_S = 600.0  # a full hash of a large checkpoint (about 0.75 s a GiB)
REMOVE_TIMEOUT_S = 120.0


@attrs.frozen
class RemoteNode:
    node_id: str
    name: str


async def remote_node_of_run(shared: ServerContext, run_id: str) -> RemoteNode | None:
    """The node the run ran on when it is a remote agent's (its files are there); else None."""

    def query(conn: Any) -> RemoteNode | None:
        origin = run_rows.origin(conn, run_id)
        if origin is None or origin.node_id is None:
            return None
        name = uplink_rows.agent_node_name(conn, origin.node_id)
        return RemoteNode(origin.node_id, name) if name is not None else None

    return await access.readers(shared, "runs").run(query)


async def run_roots(shared: ServerContext, run_id: str) -> tuple[str, ...]:
    """The folders the run's checkpoint files may be read or deleted in (``run_owners.checkpoint_roots``);
    none for a run a network credential created (its files are on its script's host)."""

    def query(conn: Any) -> tuple[str, ...]:
        run = run_owners.ownership(conn, run_id)
        if run is None or run.created_by is not None:
            return ()
        return run_owners.checkpoint_roots(conn, run_id)

    return await access.readers(shared, "runs").run(query)


def _away(node: RemoteNode, what: str) -> str:
    return f"{what} is on node {node.name!r}, whose agent is not connected"


async def read(shared: ServerContext, ck: Checkpoint, node: RemoteNode | None,
               roots: tuple[str, ...]) -> CheckpointReading:
    """What the checkpoint's file is now, read where it lies, if it lies in ``roots``.

    Raises:
        ApiError: unavailable naming the node when its agent is not connected, or its error.
    """
    if node is None:
        return await trio.to_thread.run_sync(on_disk.read, ck.path, roots)
    try:
        reading = await shared.nodes.request(node.node_id, CheckpointRead(ck.path, roots), READ_TIMEOUT_S)
    except NodeUnavailable:
        raise ApiError(ErrorCode.UNAVAILABLE, _away(node, f"checkpoint {ck.id}") + ": verify it when the agent is back",
                       {"node": node.name, "node_id": node.node_id}) from None
    if not isinstance(reading, CheckpointReading):
        raise ApiError(ErrorCode.INTERNAL, f"node {node.name!r} answered ckpt_read with {type(reading).__name__}")
    return reading


async def remove(shared: ServerContext, ck: Checkpoint, node: RemoteNode | None, dry_run: bool,
                 roots: tuple[str, ...]) -> CheckpointRemoval:
    """Delete the file if it lies in ``roots`` and is still what was registered (a dry run only
    checks), where it lies."""
    ask = CheckpointRemove(ck.path, ck.fingerprint, ck.size_bytes, dry_run, roots)
    if node is None:
        return await trio.to_thread.run_sync(on_disk.remove, ask)
    try:
        removal = await shared.nodes.request(node.node_id, ask, REMOVE_TIMEOUT_S)
    except NodeUnavailable:
        return CheckpointRemoval(refused=_away(node, "it") + ": prune again when the agent is back")
    except ApiError as error:
        return CheckpointRemoval(refused=f"node {node.name!r}: {error.message}")
    if not isinstance(removal, CheckpointRemoval):
        return CheckpointRemoval(refused=f"node {node.name!r} answered ckpt_remove with {type(removal).__name__}")
    return removal
