"""Deleting removed jobs' own folders (``jobs/<id>/`` in a daemon's home), on the host that holds
them: the server's own node (``gpuplaned.service.passes.folder_removal``) and a remote agent's
(``actors/uplink.py``, asked with ``JobFoldersRemove``) run this same code.

Only a real folder directly under ``jobs/`` goes (never a symlink, never one whose name is not a
job id), and never one that holds a registered checkpoint of the job: that file is the
experiment's record. ``shutil.rmtree`` walks by directory handle and does not follow the links
it finds inside.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from gpuplaned.home import JOBS_DIR
from gpuplaned.protocol.job_folder_ops import JobFoldersRemoval, JobFoldersRemove

__all__ = ["remove"]


def remove(home: Path, ask: JobFoldersRemove) -> JobFoldersRemoval:
    """Delete each job's folder under ``home`` but those holding a path of ``ask.keep``."""
    root = (Path(home) / JOBS_DIR).resolve()
    keep = [Path(path) for path in ask.keep]
    removed: list[str] = []
    kept: list[str] = []
    for job_id in ask.job_ids:
        folder = root / job_id
        if folder.parent != root or folder.is_symlink() or not folder.is_dir():
            continue
        if any(_inside(path, folder) for path in keep):
            kept.append(job_id)
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(str(folder))
    return JobFoldersRemoval(tuple(removed), tuple(kept))


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder)
    except (ValueError, OSError):
        return False
    return True
