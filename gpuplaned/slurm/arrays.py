"""A sweep's trials as one Slurm array job (issue 32 item 4): its script, its tasks in squeue,
its throttle.

A sweep's trials that a node hands to Slurm together become ``sbatch --array=<indexes>%K``,
one task per trial, its index the trial's number; Slurm runs at most K of them at once (the
sweep's max_parallel). Each trial keeps its own attempt dir and spec.json, so the batch script
only picks the attempt dir of its task (``$SLURM_ARRAY_TASK_ID``) and ``exec``s the one-shot
shim there, as a single job's script does: each trial's values reach its task through its own
spec.json, and its records, logs and end are its own.

The array is named ``gp-sweep-<sweep id>-<first index>-<its attempt>`` and submitted through
``submission.submit_named``, so a lost sbatch answer is looked up by that name before any
second sbatch. A trial's Slurm id is its task, ``A_i``: scancel, scontrol and sacct take it as
it is, and ``polling.poll`` lists each task of an array under it, a pending rest that squeue
prints as one record (``A_[4-9%2]``) under each of its tasks.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from pathlib import Path

import attrs

from gpuplaned.slurm.commands import SlurmCli, SlurmCommandFailed
from gpuplaned.slurm.submission import EXPORT, Submitted, submit_named

ARRAY_STDOUT = "slurm-%A_%a.out"  # Slurm's own output of each task's batch shell, in the array's dir
ARRAY_STDERR = "slurm-%A_%a.err"
_NAME_PART = re.compile(r"[A-Za-z0-9_.]+")
_TASK_ID = re.compile(r"(\d+)_(\d+)")
_RANGE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")


@attrs.frozen
class ArrayMember:
    """One trial of the array: its task index and the command its task ``exec``s."""

    index: int
    argv: tuple[str, ...] = attrs.field(converter=tuple)


@attrs.frozen
class ArraySpec:
    """A sweep's trials as one array job.

    Args:
        sweep_id, attempt: name the array with its first member's index.
        members: the tasks, by index (at least one; indexes unique).
        throttle: Slurm's ``%K``, the most tasks running at once (0: no limit).
        out_dir: where Slurm writes each task's batch-shell output.
        chdir, gpus, partition, account, qos, extra_args: as ``SubmitSpec``'s, for every task.
    """

    sweep_id: str
    attempt: int
    members: tuple[ArrayMember, ...] = attrs.field(converter=tuple)
    out_dir: Path
    chdir: Path
    throttle: int = 0
    gpus: int = 0
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    extra_args: tuple[str, ...] = attrs.field(default=(), converter=tuple)

    def __attrs_post_init__(self) -> None:
        if not self.members:
            raise ValueError("an array needs at least one member")
        indexes = [m.index for m in self.members]
        if len(set(indexes)) != len(indexes) or min(indexes) < 0:
            raise ValueError(f"array task indexes must be unique and 0 or more, got {indexes}")
        if self.throttle < 0:
            raise ValueError(f"throttle must be 0 (no limit) or more, got {self.throttle}")
        if self.gpus < 0:
            raise ValueError(f"gpus must be 0 or more, got {self.gpus}")
        self.name  # noqa: B018 - checks the sweep id and attempt

    @property
    def name(self) -> str:
        return array_name(self.sweep_id, min(m.index for m in self.members), self.attempt)

    @property
    def indexes(self) -> list[int]:
        return sorted(m.index for m in self.members)


def array_name(sweep_id: str, first_index: int, attempt: int) -> str:
    """``gp-sweep-<sweep id>-<first index>-<attempt>``: the array's identity on the cluster (the
    attempt keeps a retried trial's array apart from an earlier one that began with it)."""
    if not _NAME_PART.fullmatch(sweep_id):
        raise ValueError(f"sweep id {sweep_id!r} may hold only letters, digits, '_' and '.'")
    if first_index < 0 or attempt < 1:
        raise ValueError(f"an array's first index is 0 or more and its attempt 1 or more, got {first_index}, {attempt}")
    return f"gp-sweep-{sweep_id}-{first_index}-{attempt}"


def task_id(array_id: str, index: int) -> str:
    """The Slurm id of one task: ``A_i``."""
    return f"{array_id}_{index}"


def split_task_id(slurm_id: str) -> tuple[str, int] | None:
    """``A_i`` as (A, i); None for a plain job id."""
    found = _TASK_ID.fullmatch(slurm_id)
    return (found.group(1), int(found.group(2))) if found else None


def index_list(indexes: Iterable[int]) -> str:
    """Indexes as sbatch's ``--array`` takes them, runs folded: ``0-3,7``."""
    ordered = sorted(set(indexes))
    parts: list[str] = []
    start = prev = ordered[0]
    for i in [*ordered[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(parts)


def expand_tasks(text: str) -> list[int]:
    """The task indexes squeue prints for an array record: ``3``, or a pending rest
    ``4-9%2``, ``[1,3-5%2]``, ``0-8:2`` (the ``%K`` throttle dropped).

    Raises:
        ValueError: text that is no list of task indexes.
    """
    body = text.strip().removeprefix("[").removesuffix("]").partition("%")[0]
    out: list[int] = []
    for part in body.split(","):
        found = _RANGE.fullmatch(part.strip())
        if found is None:
            raise ValueError(f"not an array task list: {text!r}")
        first, last, step = found.group(1), found.group(2), found.group(3)
        out += range(int(first), int(last or first) + 1, int(step or 1))
    return out


def sbatch_args(spec: ArraySpec) -> list[str]:
    """The options ``sbatch`` gets for the array (the script comes on stdin)."""
    throttle = f"%{spec.throttle}" if spec.throttle else ""
    args = ["--parsable", f"--job-name={spec.name}", f"--array={index_list(spec.indexes)}{throttle}",
            f"--chdir={spec.chdir}", EXPORT, "--open-mode=append",
            f"--output={spec.out_dir / ARRAY_STDOUT}", f"--error={spec.out_dir / ARRAY_STDERR}"]
    if spec.gpus:
        args.append(f"--gres=gpu:{spec.gpus}")
    for flag, value in (("partition", spec.partition), ("account", spec.account), ("qos", spec.qos)):
        if value:
            args.append(f"--{flag}={value}")
    return args + list(spec.extra_args)


def batch_script(spec: ArraySpec) -> str:
    """Each task ``exec``s its own member's command; a task with none (never: the array has
    only the members' indexes) says so and fails as a command not found does."""
    lines = ["#!/bin/sh", f"# GPUPlane sweep {spec.sweep_id}: trials {index_list(spec.indexes)} as one array",
             'case "$SLURM_ARRAY_TASK_ID" in']
    for member in sorted(spec.members, key=lambda m: m.index):
        lines.append(f"{member.index}) exec " + " ".join(shlex.quote(arg) for arg in member.argv) + " ;;")
    lines += ["esac", 'echo "gpuplane: no trial for array task $SLURM_ARRAY_TASK_ID" >&2', "exit 127"]
    return "\n".join(lines) + "\n"


async def submit_array(cli: SlurmCli, spec: ArraySpec, *, look_first: bool = False,
                       lookup_pause_s: float = 1.0) -> Submitted:
    """Submit the array once (``submission.submit_named``'s guarantees); ``slurm_id`` is the
    array's job id A, its tasks ``A_i``."""
    return await submit_named(cli, spec.name, sbatch_args(spec), batch_script(spec), look_first=look_first,
                              lookup_pause_s=lookup_pause_s)


async def set_throttle(cli: SlurmCli, array_id: str, throttle: int) -> bool:
    """``scontrol update JobId=A ArrayTaskThrottle=K`` (0: no limit). False when Slurm no longer
    knows the array (all of it ended and left the queue): nothing to throttle.

    Raises:
        SlurmUnreachable: the controller did not answer.
        SlurmCommandFailed: scontrol refused.
    """
    if not array_id.isdigit():
        raise ValueError(f"an array's Slurm job id is a number, got {array_id!r}")
    if throttle < 0:
        raise ValueError(f"throttle must be 0 (no limit) or more, got {throttle}")
    try:
        await cli.run("scontrol", "update", f"JobId={array_id}", f"ArrayTaskThrottle={throttle}")
    except SlurmCommandFailed as error:
        if "Invalid job id specified" in error.stderr or "already completing or completed" in error.stderr:
            return False
        raise
    return True
