"""Cancelling a Slurm job: ``scancel``, which ends the whole allocation (the batch shell and
every step), so no process of the job survives it on a cluster whose proctrack follows the
job's processes (cgroup; the test fixture's linuxproc follows the process tree)."""

from __future__ import annotations

from gpuplaned.slurm.commands import SlurmCli, SlurmCommandFailed

_ALREADY_GONE = ("Job/step already completing or completed", "Invalid job id specified")


async def cancel(cli: SlurmCli, slurm_id: str) -> None:
    """``scancel --full SLURM_ID``: the batch shell too, not only its steps. A job that has
    already ended (or left Slurm) is no error: cancelling is done either way.

    Raises:
        SlurmUnreachable: the controller did not answer; the job may still run.
        SlurmCommandFailed: scancel refused (e.g. the job is another user's).
    """
    if not slurm_id.replace("_", "").isdigit():
        raise ValueError(f"a Slurm job id is a number (or ARRAY_TASK), got {slurm_id!r}")
    try:
        await cli.run("scancel", "--full", slurm_id)
    except SlurmCommandFailed as error:
        if not any(message in error.stderr for message in _ALREADY_GONE):
            raise
