"""Removing removed jobs' folders on the node that holds them (``job remove``, ``clean``): the
request and reply bodies the uplink carries to a remote agent (``agent.REQUEST_BODIES`` /
``REPLY_BODIES``), and what ``gpuplaned.job_folders.remove`` returns where the folders are local.

A job's own folder is ``jobs/<id>/`` in the home of the daemon that ran its attempts (its
stdout/stderr logs and records, ``gpuplaned.home.attempt_dir``). A folder holding one of the
job's registered checkpoints (``keep``) stays: that file is the experiment's record.
"""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import field

MAX_PATH = 4096
MAX_JOBS = 1000  # one request's; a clean of more sends several

__all__ = ["JobFoldersRemoval", "JobFoldersRemove"]

_JOB_ID = {"pattern": "^job_[0-9A-Za-z]{1,64}$"}


@attrs.frozen
class JobFoldersRemove:
    """Request body, server -> agent: delete these jobs' own folders, but one that holds a path
    of ``keep``."""

    job_ids: tuple[str, ...] = field(min_items=1, max_items=MAX_JOBS, items=_JOB_ID)
    keep: tuple[str, ...] = field(default=(), max_items=10 * MAX_JOBS, items={"max_length": MAX_PATH},
                                  description="the jobs' registered checkpoints: a folder holding one stays")


@attrs.frozen
class JobFoldersRemoval:
    """What became of them: the folders deleted, and the jobs whose folder stayed for a checkpoint
    inside. A job in neither had no folder there."""

    removed: tuple[str, ...] = field(default=(), max_items=MAX_JOBS, items={"max_length": MAX_PATH})
    kept: tuple[str, ...] = field(default=(), max_items=MAX_JOBS, items=_JOB_ID)
