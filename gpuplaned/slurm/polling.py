"""Watching a node's Slurm jobs: one squeue per cycle, and each job's end from where it is.

``poll`` asks squeue once for all the given jobs (``-t all``, so a finished job still in
squeue shows its end state rather than vanishing). ``Backoff`` spaces the cycles: the
period while squeue answers, doubling up to a ceiling while it does not, so a controller
in trouble is not hammered by every node's watcher.

The end of a job (``read_ends``), in the order of issue 32: the shim's ``exit.json`` in the
job dir comes first and is the runner's to read; then squeue, whose ``-t all`` keeps a
finished job for ``MinJobAge`` (300 s by default) but prints no exit code, so
``scontrol show job`` gives it while the job is there; then ``sacct`` where the cluster has
accounting. A job none of them knows is not ended by this module: the caller, after its
grace period, records it LOST with that reason, never SUCCEEDED.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from gpuplaned.slurm.arrays import expand_tasks, split_task_id, task_id
from gpuplaned.slurm.commands import AccountingDisabled, SlurmCli, SlurmCommandFailed
from gpuplaned.slurm.parsing import (
    SACCT_FIELDS,
    SQUEUE_FORMAT,
    ExitCode,
    JobState,
    QueueRow,
    parse_sacct,
    parse_scontrol_jobs,
    parse_squeue,
)

INVALID_JOB_ID = "Invalid job id specified"


def _ids(job_ids: Iterable[str]) -> list[str]:
    """The ids, each a job id or an array task ``A_i``, in order."""
    ids = set(job_ids)
    for job_id in ids:
        if not (job_id.isdigit() or split_task_id(job_id)):
            raise ValueError(f"a Slurm job id is a number (or ARRAY_TASK), got {job_id!r}")
    return sorted(ids, key=lambda i: tuple(map(int, i.split("_"))))


async def poll(cli: SlurmCli, job_ids: Iterable[str]) -> dict[str, QueueRow]:
    """What squeue says of each of ``job_ids``, in one call; a job it no longer lists is
    absent from the answer. An array task ``A_i`` is asked as its array (``-j A``) and answered
    by its own row, or by the record of the array's pending rest that holds it.

    Raises:
        SlurmUnreachable: the controller did not answer (nothing is known of any job).
    """
    ids = _ids(job_ids)
    if not ids:
        return {}
    asked = sorted({i.partition("_")[0] for i in ids}, key=int)
    try:
        out = await cli.run("squeue", "-h", "-t", "all", "-j", ",".join(asked), "-o", SQUEUE_FORMAT)
    except SlurmCommandFailed as error:
        # squeue refuses the whole call when none of the ids is known (it loads one job by
        # id when given one, and that one is gone); with some known, it lists those.
        if INVALID_JOB_ID in error.stderr:
            return {}
        raise
    wanted = set(ids)
    found: dict[str, QueueRow] = {}
    for row in parse_squeue(out.stdout):
        if row.array_job_id is not None and row.array_task is not None:
            for index in expand_tasks(row.array_task):
                key = task_id(row.array_job_id, index)
                if key in wanted:
                    found[key] = row
        if row.job_id in wanted:
            found[row.job_id] = row
    return found


@attrs.define
class Backoff:
    """How long to wait before the next poll: ``period_s`` after an answer, doubling from
    there after each failure up to ``max_s``. Pure: the caller sleeps."""

    period_s: float = 5.0
    max_s: float = 120.0
    failures: int = 0

    def answered(self) -> float:
        self.failures = 0
        return self.period_s

    def failed(self) -> float:
        self.failures += 1
        return min(self.max_s, self.period_s * 2 ** self.failures)


@attrs.frozen
class JobEnd:
    """How a Slurm job ended, and which command said so (``scontrol`` or ``sacct``)."""

    slurm_id: str
    state: JobState
    exit_code: ExitCode
    reason: str | None
    source: str


async def read_ends(cli: SlurmCli, job_ids: Iterable[str]) -> dict[str, JobEnd]:
    """The end of each of ``job_ids`` that has ended, from ``scontrol show job`` while Slurm
    still holds the job, else from ``sacct`` where accounting exists. A job still pending or
    running, or known to neither, is absent from the answer.

    Raises:
        SlurmUnreachable: the controller did not answer.
    """
    ends: dict[str, JobEnd] = {}
    unknown = []
    for job_id in _ids(job_ids):
        try:
            out = await cli.run("scontrol", "-o", "show", "job", job_id)
        except SlurmCommandFailed as error:
            if INVALID_JOB_ID in error.stderr:
                unknown.append(job_id)
                continue
            raise
        for job in parse_scontrol_jobs(out.stdout):
            if job_id in (job.job_id, f"{job.array_job_id}_{job.array_task}") and job.state.ended:
                ends[job_id] = JobEnd(job_id, job.state, job.exit_code, job.reason, "scontrol")
    if unknown:
        ends.update(await _sacct_ends(cli, unknown))
    return ends


async def _sacct_ends(cli: SlurmCli, job_ids: list[str]) -> dict[str, JobEnd]:
    try:
        out = await cli.run("sacct", "-n", "-P", "-X", "-j", ",".join(job_ids), "-o", ",".join(SACCT_FIELDS))
    except AccountingDisabled:
        return {}
    wanted = set(job_ids)
    ends = {}
    for row in parse_sacct(out.stdout):
        asked = row.raw_id if row.raw_id in wanted else row.job_id  # an array task is asked as A_i
        if asked in wanted and row.state.ended:
            ends[asked] = JobEnd(asked, row.state, row.exit_code, row.reason, "sacct")
    return ends
