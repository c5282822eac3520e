"""Submitting an attempt to Slurm, never twice.

Every submission is named ``gp-<job id>-<attempt>``; the name is the attempt's identity on
the cluster (as ClearML's ``clearml_task_<id>`` is). ``sbatch`` can fail after slurmctld has
accepted the job: "Socket timed out on send/recv operation" (sisyphus#281, nextflow#970), or
our own timeout killing it while a stopped controller holds the request in its socket. So
after any failure that leaves it open, ``submit`` looks the name up
(``squeue --me -h -t all -n NAME``) before it submits again, and a caller that was cut short
in between passes ``look_first=True`` the next time.

The batch script goes to sbatch on stdin and exports the job's own environment itself, one
quoted ``export`` a variable: ``--export=NONE,K=V`` cannot carry a value with a comma (the
runner's one-shot shim reads the whole environment from the attempt's spec.json instead).
``--export=NIL`` (``EXPORT``) keeps the daemon's environment out of the job (infra.md pitfall
10) without what ``--export=NONE`` adds: slurmd loading the user's login environment first
(``su -``), which cost about 1.2 s a job on the fixture (docs/slurm.md, "What it costs").

Never ``--ntasks-per-node``: Debian 12's 22.05.8 wrongly refuses jobs that ask for it (Slurm
bug 15857, fixed in 22.05.9).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path

import attrs
import trio

from gpuplaned.slurm.commands import SlurmCli, SlurmCommandFailed, SlurmUnreachable
from gpuplaned.slurm.parsing import parse_sbatch_parsable, parse_squeue, SQUEUE_FORMAT

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_PART = re.compile(r"[A-Za-z0-9_.]+")
# Only Slurm's own variables reach the batch script (22.05 on): the job's come in spec.json or
# the script's exports, and no login environment is loaded (docs/slurm.md).
EXPORT = "--export=NIL"
STDOUT_PATTERN = "slurm-%j.out"  # Slurm's own output of the batch shell, in the job dir
STDERR_PATTERN = "slurm-%j.err"


class SubmitRefused(SlurmCommandFailed):
    """slurmctld answered and refused the job (a bad request, a limit): no job was made."""


class SubmitUncertain(SlurmUnreachable):
    """sbatch failed in a way that may hide an accepted job, and the look-up could not tell
    either: call ``submit`` again with ``look_first=True`` once the controller answers."""


def job_name(job_id: str, attempt: int) -> str:
    """``gp-<job id>-<attempt>``: the attempt's identity on the cluster."""
    if not _NAME_PART.fullmatch(job_id):
        raise ValueError(f"job id {job_id!r} may hold only letters, digits, '_' and '.'")
    if attempt < 1:
        raise ValueError(f"attempt must be 1 or more, got {attempt}")
    return f"gp-{job_id}-{attempt}"


def _positive_gpus(_: object, __: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"gpus must be 0 or more, got {value}")


def _env(_: object, __: attrs.Attribute[Mapping[str, str]], value: Mapping[str, str]) -> None:
    for key in value:
        if not _ENV_NAME.fullmatch(key):
            raise ValueError(f"environment variable name {key!r} is not a shell name ([A-Za-z_][A-Za-z0-9_]*)")


@attrs.frozen
class SubmitSpec:
    """One attempt of a job, as Slurm should run it.

    Args:
        job_id, attempt: GPUPlane's; they name the Slurm job.
        argv: the command the batch script runs (``exec``, so it is the batch shell's process).
        job_dir: the attempt's folder on a filesystem the cluster shares; Slurm's output goes there.
        chdir: the working directory on the compute node.
        gpus: ``--gres=gpu:N`` (none when 0).
        env: the job's own environment; nothing else of the submitter's reaches the job.
        partition, account, qos: as the node's configuration names them (Slurm's defaults when None).
        time_limit_min: ``--time`` in minutes (the partition's when None).
        extra_args: further sbatch options the node's configuration adds, as given.
    """

    job_id: str
    attempt: int
    argv: tuple[str, ...] = attrs.field(converter=tuple)
    job_dir: Path
    chdir: Path
    gpus: int = attrs.field(default=0, validator=_positive_gpus)
    env: Mapping[str, str] = attrs.field(factory=dict, validator=_env)
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit_min: int | None = None
    extra_args: tuple[str, ...] = attrs.field(default=(), converter=tuple)

    def __attrs_post_init__(self) -> None:
        job_name(self.job_id, self.attempt)  # checks both
        if not self.argv:
            raise ValueError("argv must name a command")
        if self.time_limit_min is not None and self.time_limit_min < 1:
            raise ValueError(f"time_limit_min must be 1 or more minutes, got {self.time_limit_min}")

    @property
    def name(self) -> str:
        return job_name(self.job_id, self.attempt)


def sbatch_args(spec: SubmitSpec) -> list[str]:
    """The options ``sbatch`` gets for ``spec`` (the script comes on stdin)."""
    args = ["--parsable", f"--job-name={spec.name}", f"--chdir={spec.chdir}", EXPORT,
            "--open-mode=append", f"--output={spec.job_dir / STDOUT_PATTERN}",
            f"--error={spec.job_dir / STDERR_PATTERN}"]
    if spec.gpus:
        args.append(f"--gres=gpu:{spec.gpus}")
    for flag, value in (("partition", spec.partition), ("account", spec.account), ("qos", spec.qos)):
        if value:
            args.append(f"--{flag}={value}")
    if spec.time_limit_min is not None:
        args.append(f"--time={spec.time_limit_min}")
    args += spec.extra_args
    return args


def batch_script(spec: SubmitSpec) -> str:
    lines = ["#!/bin/sh", f"# GPUPlane job {spec.job_id}, attempt {spec.attempt}"]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in sorted(spec.env.items())]
    lines.append("exec " + " ".join(shlex.quote(arg) for arg in spec.argv))
    return "\n".join(lines) + "\n"


@attrs.frozen
class Submitted:
    """The Slurm job of an attempt: ``found`` when a look-up found it rather than sbatch
    reporting it (an earlier sbatch had made it after all)."""

    slurm_id: str
    name: str
    found: bool = False


async def find_by_name(cli: SlurmCli, name: str) -> list[str]:
    """The ids of this user's Slurm jobs named ``name``, in any state still in squeue (an
    array's once: its job id, whichever of its tasks squeue lists)."""
    out = await cli.run("squeue", "--me", "-h", "-t", "all", "-n", name, "-o", SQUEUE_FORMAT)
    return sorted({row.array_job_id or row.job_id for row in parse_squeue(out.stdout) if row.name == name}, key=int)


async def submit(cli: SlurmCli, spec: SubmitSpec, *, look_first: bool = False, lookups: int = 5,
                 lookup_pause_s: float = 1.0) -> Submitted:
    """Submit ``spec`` once: its Slurm job, whether this call or an earlier one made it.

    After an sbatch that failed without a clear refusal (the controller unreachable, our
    timeout), it looks the name up, up to ``lookups`` times ``lookup_pause_s`` apart (then
    doubling), before it submits again; if none of them is answered it raises
    ``SubmitUncertain``. ``look_first`` starts with the look-up (a caller that was cut short,
    or restarted, with the submission unsettled).

    Raises:
        SubmitRefused: slurmctld refused the job; nothing was made.
        SubmitUncertain: neither sbatch nor the look-ups could tell.
        SlurmNotInstalled: no sbatch or squeue.
    """
    return await submit_named(cli, spec.name, sbatch_args(spec), batch_script(spec), look_first=look_first,
                              lookups=lookups, lookup_pause_s=lookup_pause_s)


async def submit_named(cli: SlurmCli, name: str, args: list[str], script: str, *, look_first: bool = False,
                       lookups: int = 5, lookup_pause_s: float = 1.0) -> Submitted:
    """``submit`` for any batch job named ``name`` (``args`` name it so): a single attempt's, or
    a sweep's array (``gpuplaned.slurm.arrays``)."""
    if look_first:
        found = await _look_up(cli, name, lookups, lookup_pause_s)
        if found:
            return Submitted(found[0], name, found=True)
    for tries_left in (1, 0):
        try:
            out = await cli.run("sbatch", *args, stdin=script.encode())
        except SlurmUnreachable:
            found = await _look_up(cli, name, lookups, lookup_pause_s)
            if found:
                return Submitted(found[0], name, found=True)
            if not tries_left:
                raise  # answered twice that no such job exists: nothing was made
            continue
        except SlurmCommandFailed as error:
            raise SubmitRefused(error.argv, error.returncode, error.stderr) from None
        return Submitted(parse_sbatch_parsable(out.stdout), name)
    raise AssertionError("unreachable")


async def _look_up(cli: SlurmCli, name: str, lookups: int, pause_s: float) -> list[str]:
    """The jobs named ``name``, once squeue answers; ``SubmitUncertain`` if it never does.

    "None" is believed only when a second answer, ``pause_s`` later, says it too: a
    controller that was stopped may answer the look-up before it has handled the sbatch
    request still waiting in its socket."""
    last: SlurmUnreachable | None = None
    empty_answers = 0
    for i in range(lookups):
        if i:
            await trio.sleep(pause_s * 2 ** (i - 1) if not empty_answers else pause_s)
        try:
            found = await find_by_name(cli, name)
        except SlurmUnreachable as error:
            last = error
            continue
        empty_answers += not found
        if found or empty_answers == 2:
            return found
    if empty_answers:
        return []
    raise SubmitUncertain(("squeue", "-n", name),
                          f"sbatch's answer was lost and {lookups} look-ups of the name got none "
                          f"(last: {last.why if last else 'none'}); whether the job exists is unknown")

