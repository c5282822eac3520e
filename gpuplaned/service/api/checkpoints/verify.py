"""Verify a checkpoint on demand: is its file still there, and is it what was registered?

``verify`` reads the checkpoint's file (a directory: every file in it) read-only and takes
its fingerprint and its full hash (``gpuplaned.checkpoints.files``). It is **changed** when the fingerprint differs from the one it was registered with (the node's
watcher took it), or the full hash from the one an earlier verify kept; ``changed`` is None
when there is nothing to compare with (a checkpoint the script registered, never verified).
The first verify that finds it unchanged keeps its full hash, so a later one also sees a
change in the middle of the file, which the fingerprint (first and last MiB) cannot.

The file is read where it lies (``checkpoint_files``): on this host for a run of the server's
own node, through the agent for a run of a remote one (``unavailable`` while it is away), and
only when it really lies in its run's folders (``checkpoint_files.run_roots``): a path
elsewhere is answered not present, with the reason in ``error``, and nothing is hashed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from gpuplaned.protocol.checkpoint_ops import CheckpointReading
from gpuplaned.protocol.checkpoint_replies import CheckpointVerify, checkpoint_of
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service import access
from gpuplaned.service.link import checkpoint_files
from gpuplaned.service.link.registry import now_ms
from gpuplaned.store import checkpoint_rows
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


def changed(ck: checkpoint_rows.Checkpoint, now: CheckpointReading) -> bool | None:
    """Whether the file is not what was registered (gone counts as changed); None: nothing to compare."""
    if not now.present:
        return True
    compared = [(ck.fingerprint, now.fingerprint), (ck.full_hash, now.full_hash)]
    known = [(was, is_) for was, is_ in compared if was is not None]
    return any(was != is_ for was, is_ in known) if known else None


async def verify(shared: ServerContext, checkpoint_id: str) -> CheckpointVerify:
    """The checkpoint, what its file is now, and whether it changed since it was registered.

    Raises:
        ApiError: not_found for an unknown checkpoint.
    """
    ck = await access.readers(shared, "runs").run(lambda conn: checkpoint_rows.get(conn, checkpoint_id))
    if ck is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no checkpoint {checkpoint_id}", {"checkpoint_id": checkpoint_id})
    now = await checkpoint_files.read(shared, ck, await checkpoint_files.remote_node_of_run(shared, ck.run_id),
                                      await checkpoint_files.run_roots(shared, ck.run_id))
    verdict = changed(ck, now)
    if now.full_hash is not None and ck.full_hash is None and verdict is not True:
        at = now_ms()
        await write(access.store_port(shared, "runs"),
                    lambda conn: checkpoint_rows.set_full_hash(conn, ck.id, now.full_hash, at), small=True)
        ck = attrs.evolve(ck, full_hash=now.full_hash, verified_at=at)
    return CheckpointVerify(checkpoint=checkpoint_of(ck), present=now.present, changed=verdict,
                            size_bytes=now.size_bytes, fingerprint=now.fingerprint, full_hash=now.full_hash,
                            error=now.error)
