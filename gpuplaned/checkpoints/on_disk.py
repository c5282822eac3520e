"""A registered checkpoint's file where it lies: read it for a verify, delete it for retention.

These run on the host that holds the file, on a worker thread: the server's own for a job of
its own node, a remote agent's for one of its jobs (asked over the uplink,
``gpuplaned.protocol.checkpoint_ops``). Reading opens files read-only; deleting takes only a
path that is still what was registered (its fingerprint: never its size alone), and never
follows a symbolic link.

Both take only a file that really lies in one of its run's folders (``roots``: the job's
working folder and declared folders, or the working directory a script's SDK session
declared; ``gpuplaned.checkpoints.roots``), after every link is resolved. A deletion then
walks from that folder down to the file one directory at a time with ``O_NOFOLLOW`` and
deletes by the last directory's descriptor, so a link swapped in between the check and the
deletion cannot send it elsewhere.
"""

from __future__ import annotations

import os
import shutil
import stat

from gpuplaned.checkpoints.files import fingerprint, full_hash, observe
from gpuplaned.checkpoints.roots import root_of
from gpuplaned.protocol.checkpoint_ops import CheckpointReading, CheckpointRemoval, CheckpointRemove

__all__ = ["read", "remove", "why_not_deleted"]


def read(path: str, roots: tuple[str, ...]) -> CheckpointReading:
    """The fingerprint and full hash of ``path`` as it is now, if it lies in ``roots``."""
    if (bad := _not_a_path(path) or _outside(path, roots, "read")) is not None:
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
        if registered_size is not None and size != registered_size:
            return f"changed since it was registered (size {size}, registered {registered_size})"
        return "registered without a fingerprint: a size alone cannot tell that it is the same file"
    except FileNotFoundError:
        raise
    except OSError as exc:
        return f"unreadable: {exc.strerror or type(exc).__name__}"


def remove(ask: CheckpointRemove) -> CheckpointRemoval:
    """Delete the file (a directory whole) unless ``why_not_deleted``; a dry run only checks."""
    if (bad := _not_a_path(ask.path)) is not None:
        return CheckpointRemoval(refused=bad)
    if not os.path.lexists(ask.path):
        return CheckpointRemoval(gone=True, already_gone=True)
    if (bad := _outside(ask.path, ask.roots, "delete")) is not None:
        return CheckpointRemoval(refused=bad)
    try:
        refused = why_not_deleted(ask.path, ask.fingerprint, ask.size_bytes)
        if refused is not None:
            return CheckpointRemoval(refused=refused)
        if ask.dry_run:
            return CheckpointRemoval()
        refused = _delete_inside(ask.path, root_of(ask.path, ask.roots) or "/")
        if refused is not None:
            return CheckpointRemoval(refused=refused)
    except FileNotFoundError:
        return CheckpointRemoval(gone=True, already_gone=True)
    except OSError as exc:
        return CheckpointRemoval(refused=f"could not be deleted: {exc.strerror or type(exc).__name__}")
    return CheckpointRemoval(gone=not ask.dry_run)


def _outside(path: str, roots: tuple[str, ...], what: str) -> str | None:
    """Why ``path`` is not one of its run's files to ``what`` (None: it is)."""
    if not roots:
        return f"its run has no folder to check it against: not GPUPlane's to {what}"
    if root_of(path, roots) is None:
        return (f"outside its run's folders ({', '.join(r[:200] for r in roots[:4])}) once links are resolved: "
                f"not GPUPlane's to {what}")
    if any(os.path.realpath(path) == os.path.realpath(r) for r in roots):
        return f"one of its run's folders itself: not GPUPlane's to {what}"
    return None


def _delete_inside(path: str, root: str) -> str | None:
    """Delete ``path`` reaching it from ``root`` one directory at a time, following no link;
    why not (None: deleted).

    Raises:
        FileNotFoundError: it is gone.
    """
    top = os.path.realpath(root)
    rel = os.path.relpath(os.path.realpath(os.path.dirname(path)), top)
    name = os.path.basename(path)
    if rel.startswith(os.pardir) or not name:
        return "outside its run's folders once links are resolved: not GPUPlane's to delete"
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in [] if rel == os.curdir else rel.split(os.sep):
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:  # ELOOP/ENOTDIR: a link was swapped in since the check
                return f"its folder changed while being deleted ({exc.strerror or type(exc).__name__}): left alone"
            os.close(fd)
            fd = inner
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            return "a symbolic link: what it points to is not GPUPlane's to delete"
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)
    return None


def _not_a_path(path: str) -> str | None:
    # A registered path comes from a script or a client: one the OS refuses (NUL) would raise
    # ValueError, and a relative one would mean wherever this process happens to run.
    if "\0" in path or not os.path.isabs(path):
        return f"not an absolute path on this node: {path[:200]!r}"
    return None
