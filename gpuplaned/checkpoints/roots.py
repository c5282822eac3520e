"""The folders a run's checkpoint files may lie in, and whether a path stays inside them.

A job's checkpoints are under its working folder or a folder it declared
(``GPUPLANE_CKPT_DIR``, ``--ckpt-dir``); a script's run with no job: under the working
directory its SDK session declared. The watcher walks nothing, the server registers nothing,
and retention deletes and ``ckpt verify`` reads nothing elsewhere. Paths are compared after
``os.path.realpath``, so a symbolic link anywhere on the way (``checkpoints -> /elsewhere``)
cannot lead out: what counts is where the file really is.

Stdlib only: the node's watcher and the server both use it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

DECLARED_DIRS = "GPUPLANE_CKPT_DIR"  # in a job's environment, ``os.pathsep`` between them


def declared(env: Mapping[str, str]) -> tuple[str, ...]:
    """The checkpoint folders a job's environment declares."""
    return tuple(d for d in str(env.get(DECLARED_DIRS, "")).split(os.pathsep) if d)


def job_roots(cwd: str, declared_dirs: Iterable[str] = ()) -> tuple[str, ...]:
    """A job's working folder and its declared folders (relative ones under ``cwd``), normalized."""
    roots = [cwd, *(os.path.join(cwd, d) for d in declared_dirs)]
    return tuple(dict.fromkeys(os.path.normpath(r) for r in roots if os.path.isabs(r)))


def within(path: str, root: str) -> bool:
    """Whether ``path`` really lies in ``root`` (both resolved with ``realpath``; ``root`` itself counts)."""
    real, top = os.path.realpath(path), os.path.realpath(root)
    return os.path.commonpath([real, top]) == top


def lexically_within(path: str, root: str) -> bool:
    """``within`` by the names alone (no link resolved): for a path on another host."""
    real, top = os.path.normpath(path), os.path.normpath(root)
    return os.path.isabs(real) and os.path.isabs(top) and os.path.commonpath([real, top]) == top


def root_of(path: str, roots: Iterable[str]) -> str | None:
    """The first of ``roots`` that ``path`` really lies in; None when it is in none."""
    return next((r for r in roots if within(path, r)), None)


def walkable(root: str, cwd: str) -> bool:
    """Whether the watcher may walk ``root``: one under the job's folder ``cwd`` (its
    ``checkpoints/``, ``outputs/``, ``runs/``) must still be there once links are resolved;
    a folder the job declared outside it is the user's word, taken as it resolves."""
    if os.path.normpath(root) == os.path.normpath(cwd):
        return True  # the job's folder itself (a job's usual one root): nothing to resolve
    if lexically_within(root, cwd):
        return within(root, cwd)
    return True
