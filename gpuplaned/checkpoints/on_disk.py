"""A registered checkpoint's file where it lies: read it for a verify, delete it for retention.

These run on the host that holds the file, on a worker thread: the server's own for a job of
its own node, a remote agent's for one of its jobs (asked over the uplink,
``gpuplaned.protocol.checkpoint_ops``). Reading opens files read-only; deleting takes only a
path that is still what was registered, and never follows a symbolic link.
"""

from __future__ import annotations

import os
import shutil

from gpuplaned.checkpoints.files import fingerprint, full_hash, observe
from gpuplaned.protocol.checkpoint_ops import CheckpointReading, CheckpointRemoval, CheckpointRemove

__all__ = ["read", "remove", "why_not_deleted"]


def read(path: str) -> CheckpointReading:
    """The fingerprint and full hash of ``path`` as it is now."""
    if (bad := _not_a_path(path)) is not None:
        return CheckpointReading(False, error=bad)
    try:
        size = observe(path).size
        return CheckpointReading(True, size, fingerprint(path), full_hash(path))
    except FileNotFoundError:
        return CheckpointReading(False)
    except OSError as exc:
        return CheckpointReading(False, error=f"{type(exc).__name__}: {exc.strerror or exc}")


def why_not_deleted(path: str, registered_fingerprint: str | None, registered_size: int | None) -> str | None:
    """Why the file must not be deleted (None: it may), judged by what was registered of it.

    Raises:
        FileNotFoundError: it is gone.
    """
    if os.path.islink(path):
        return "a symbolic link: what it points to is not GPUPlane's to delete"
    try:
        size = observe(path).size
        if registered_fingerprint is not None:
            return None if fingerprint(path) == registered_fingerprint else \
                "changed since it was registered (its fingerprint differs)"
    except FileNotFoundError:
        raise
    except OSError as exc:
        return f"unreadable: {exc.strerror or type(exc).__name__}"
    if registered_size is None:
        return "registered without a fingerprint or a size: nothing to tell whether it changed"
    return None if size == registered_size else f"changed since it was registered (size {size}, registered " \
                                                f"{registered_size})"


def remove(ask: CheckpointRemove) -> CheckpointRemoval:
    """Delete the file (a directory whole) unless ``why_not_deleted``; a dry run only checks."""
    if (bad := _not_a_path(ask.path)) is not None:
        return CheckpointRemoval(refused=bad)
    try:
        refused = why_not_deleted(ask.path, ask.fingerprint, ask.size_bytes)
        if refused is not None:
            return CheckpointRemoval(refused=refused)
        if ask.dry_run:
            return CheckpointRemoval()
        if os.path.isdir(ask.path):
            shutil.rmtree(ask.path)
        else:
            os.unlink(ask.path)
    except FileNotFoundError:
        return CheckpointRemoval(gone=True, already_gone=True)
    except OSError as exc:
        return CheckpointRemoval(refused=f"could not be deleted: {exc.strerror or type(exc).__name__}")
    return CheckpointRemoval(gone=not ask.dry_run)


def _not_a_path(path: str) -> str | None:
    # A registered path comes from a script or a client: one the OS refuses (NUL) would raise
    # ValueError, and a relative one would mean wherever this process happens to run.
    if "\0" in path or not os.path.isabs(path):
        return f"not an absolute path on this node: {path[:200]!r}"
    return None
