"""What the watcher reads of a checkpoint: its size and mtime, its fingerprint, its full hash,
and whether the job still writes it. Every file is opened read-only (``"rb"``).

- ``observe``: a file's size and mtime; a directory's total size over its files and the
  newest mtime among them (and itself, so a file added or removed shows);
- ``fingerprint``: sha1 over the size, the mtime and the first and last MiB of each file
  (a directory: of its files in name order, with their relative paths), cheap on a 10 GB
  file and enough to tell a rewrite;
- ``full_hash``: sha256 over every byte (a directory: relative paths and contents, in order),
  for a verify on demand.

Which files a job's processes hold open for writing is ``gpuplaned.job_processes``'s to say.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator

from gpuplaned.checkpoints.stability import Observation

EDGE_BYTES = 1024 * 1024  # fingerprinted at each end of a file
_READ = 1024 * 1024


def _files(path: str) -> Iterator[tuple[str, os.stat_result]]:
    """(path relative to ``path``, stat) for a file, or every file under a directory, in name order.

    A symbolic link inside a directory is skipped: what it points to may lie anywhere (outside
    the run's folders), and is neither read nor hashed."""
    st = os.stat(path)
    if not os.path.isdir(path):
        yield "", st
        return
    for directory, dirs, names in os.walk(path):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(directory, name)
            try:
                st = os.stat(full, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISLNK(st.st_mode):
                yield os.path.relpath(full, path), st


def observe(path: str, writing: frozenset[str] = frozenset()) -> Observation:
    """``path`` now; ``writing``: the paths the job holds open for writing.

    Raises:
        OSError: it is gone (or cannot be read).
    """
    size, newest, held = 0, os.stat(path).st_mtime_ns, False
    for rel, st in _files(path):
        size += st.st_size
        newest = max(newest, st.st_mtime_ns)
        held = held or os.path.realpath(os.path.join(path, rel) if rel else path) in writing
    return Observation(size, newest, writing=held)


def _edges(path: str, size: int) -> bytes:
    with open(path, "rb") as f:
        head = f.read(EDGE_BYTES)
        if size <= 2 * EDGE_BYTES:
            return head + f.read()
        f.seek(size - EDGE_BYTES)
        return head + f.read(EDGE_BYTES)


def fingerprint(path: str) -> str:
    """``sha1:<hex>`` of the size, mtime and first and last MiB of ``path`` (each file of a directory).

    Raises:
        OSError: it is gone (or cannot be read).
    """
    digest = hashlib.sha1(usedforsecurity=False)
    for rel, st in _files(path):
        digest.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        digest.update(_edges(os.path.join(path, rel) if rel else path, st.st_size))
    return "sha1:" + digest.hexdigest()


def full_hash(path: str) -> str:
    """``sha256:<hex>`` of every byte of ``path`` (each file of a directory, with its name).

    Raises:
        OSError: it is gone (or cannot be read).
    """
    digest = hashlib.sha256()
    for rel, _ in _files(path):
        digest.update(f"{rel}\0".encode())
        with open(os.path.join(path, rel) if rel else path, "rb") as f:
            while chunk := f.read(_READ):
                digest.update(chunk)
    return "sha256:" + digest.hexdigest()
