"""Which checkpoint a retried job resumes from (``job retry --resume-from best|last|CKPT``).

Chosen over the job's lineage (``gpuplaned.store.resume_rows.lineage``: its runs' checkpoints
and those its runs resumed from), never a deleted one, and only one whose file is still
there (looked at on a worker thread):

- ``last``: the one registered last;
- ``best``: by the primary metric of the job's latest run at each one's step
  (``run_records.value_at_step``), ranked as every best is (``domain/run_records.py``
  ``rank_checkpoints``: NaN and infinities never rank), ties to the newest;
- an id: that one, if it is of the lineage. A checkpoint of another job's lineage is refused
  (409): resuming this job from another job's state would splice two histories into one
  parent chain; submit a new job for that (it may read the path from its own arguments).

Refusals name the job and the checkpoint: an unknown job or checkpoint is a 404; no
checkpoint yet, none with a value, no primary metric or direction, another lineage, a
deleted checkpoint or a file gone are 409s.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from gpuplaned.domain.run_records import rank_checkpoints
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service import access
from gpuplaned.service.api.run_records import value_at_step
from gpuplaned.store import job_rows, project_rows, resume_rows, run_rows
from gpuplaned.store.connection import Connection
from gpuplaned.store.resume_rows import ResumePoint

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


async def choose(shared: ServerContext, job_id: str, which: str) -> ResumePoint:
    """The checkpoint ``which`` (best, last or an id) names for ``job_id``."""
    candidates = await access.readers(shared, "jobs").run(lambda conn: candidates_for(conn, job_id, which))

    def first_present() -> ResumePoint | None:
        return next((c for c in candidates if os.path.exists(c.path)), None)

    found = await trio.to_thread.run_sync(first_present)
    if found is None:
        what = f"checkpoint {candidates[0].checkpoint_id}'s file {candidates[0].path} is gone" \
            if which not in ("best", "last") else f"the files of its {which} checkpoints are gone"
        raise ApiError(ErrorCode.CONFLICT, f"job {job_id} cannot resume: {what}",
                       {"job_id": job_id, "resume_from": which,
                        "checkpoints": [c.checkpoint_id for c in candidates[:20]]})
    return found


def candidates_for(conn: Connection, job_id: str, which: str) -> list[ResumePoint]:
    """The checkpoints to try, in order (the first whose file is there wins)."""
    job = job_rows.get_job(conn, job_id)
    if job is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no job {job_id!r}", {"job_id": job_id})
    lineage = resume_rows.lineage(conn, job_id)
    if which not in ("best", "last"):
        return [_named(conn, job_id, which, lineage)]
    alive = [c for c in lineage if c.deleted_at is None]
    if not alive:
        why = "has no checkpoint yet" if not lineage else "has only deleted checkpoints"
        raise ApiError(ErrorCode.CONFLICT, f"job {job_id} {why}: nothing to resume from",
                       {"job_id": job_id, "resume_from": which})
    return alive if which == "last" else _ranked(conn, job_id, alive)


def _named(conn: Connection, job_id: str, checkpoint_id: str, lineage: Sequence[ResumePoint]) -> ResumePoint:
    point = resume_rows.resume_point(conn, checkpoint_id)
    if point is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no checkpoint {checkpoint_id}", {"checkpoint_id": checkpoint_id})
    if point.checkpoint_id not in {c.checkpoint_id for c in lineage}:
        owner = resume_rows.owner_job(conn, checkpoint_id)
        whose = f"job {owner}'s" if owner else f"run {point.run_id}'s (no job)"
        raise ApiError(ErrorCode.CONFLICT, f"checkpoint {checkpoint_id} is {whose}, not of job {job_id}'s lineage; "
                       "resume from one of its own checkpoints (gpuplanectl ckpt list RUN), or submit a new job",
                       {"job_id": job_id, "checkpoint_id": checkpoint_id, "owner_job_id": owner})
    if point.deleted_at is not None:
        raise ApiError(ErrorCode.CONFLICT, f"checkpoint {checkpoint_id} was deleted: its file is gone",
                       {"job_id": job_id, "checkpoint_id": checkpoint_id, "deleted_at": point.deleted_at})
    return point


def _ranked(conn: Connection, job_id: str, alive: Sequence[ResumePoint]) -> list[ResumePoint]:
    latest = run_rows.latest_of_job(conn, job_id)
    metric = project_rows.run_context(conn, latest)[0].metric if latest else None
    if not metric:
        raise ApiError(ErrorCode.CONFLICT, f"job {job_id}: no primary metric to rank its checkpoints by; resume "
                       "from last or a checkpoint id", {"job_id": job_id, "resume_from": "best"})
    definition = project_rows.get_definition(conn, metric)
    direction = definition.direction if definition else None
    if direction not in ("minimize", "maximize"):
        raise ApiError(ErrorCode.CONFLICT, f"job {job_id}: metric {metric!r} has no direction to rank checkpoints "
                       "by; resume from last or a checkpoint id", {"job_id": job_id, "metric": metric})
    by_id = {point.checkpoint_id: point for point in alive}
    ranked = rank_checkpoints({ck: value_at_step(conn, p.run_id, metric, p.step) for ck, p in by_id.items()},
                              direction)  # ties: the newest first, as ``alive`` is
    if not ranked:
        raise ApiError(ErrorCode.CONFLICT, f"job {job_id}: none of its checkpoints has a value of {metric}; resume "
                       "from last or a checkpoint id", {"job_id": job_id, "metric": metric})
    return [by_id[ck] for ck in ranked]
