"""What the server asks of a checkpoint's file on the node that holds it, and the answers: the
request and reply bodies the uplink carries to a remote agent (``agent.REQUEST_BODIES`` /
``REPLY_BODIES``), and what ``gpuplaned.checkpoints.on_disk`` returns where the file is local.

- ``CheckpointRead`` -> ``CheckpointReading``: ``gpuplanectl ckpt verify``'s reading of the file
  (present, size, fingerprint, full hash).
- ``CheckpointRemove`` -> ``CheckpointRemoval``: retention's deletion of one registered file,
  refused unless it is still what was registered (its fingerprint, else its size).
"""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import field

MAX_PATH = 4096

__all__ = ["CheckpointRead", "CheckpointReading", "CheckpointRemoval", "CheckpointRemove"]


@attrs.frozen
class CheckpointRead:
    """Request body, server -> agent: read the checkpoint at ``path`` (read-only, full hash)."""

    path: str = field(min_length=1, max_length=MAX_PATH)
    roots: tuple[str, ...] = field(default=(), max_items=64, items={"max_length": MAX_PATH},
                                   description="the run's folders: a file elsewhere is not read")


@attrs.frozen
class CheckpointReading:
    """What the file is now; all None when it is gone (``error``: why it could not be read)."""

    present: bool
    size_bytes: int | None = field(default=None, minimum=0)
    fingerprint: str | None = field(default=None, max_length=128)
    full_hash: str | None = field(default=None, max_length=128)
    error: str | None = field(default=None, max_length=1024)


@attrs.frozen
class CheckpointRemove:
    """Request body, server -> agent: delete the registered checkpoint at ``path`` if it is still
    what was registered (``fingerprint``, else ``size_bytes``); ``dry_run``: only check."""

    path: str = field(min_length=1, max_length=MAX_PATH)
    fingerprint: str | None = field(default=None, max_length=128)
    size_bytes: int | None = field(default=None, minimum=0)
    dry_run: bool = True
    roots: tuple[str, ...] = field(default=(), max_items=64, items={"max_length": MAX_PATH},
                                   description="the run's folders: a file elsewhere is never deleted")


@attrs.frozen
class CheckpointRemoval:
    """What became of it: ``gone`` (deleted now, or ``already_gone``), or ``refused`` and why."""

    gone: bool = False
    already_gone: bool = False
    refused: str | None = field(default=None, max_length=1024)
