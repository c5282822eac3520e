"""Slurm's client commands, run the one way GPUPlane runs them.

Every command:
- runs under a timeout (``SlurmCli.timeout_s``), and is killed when it passes it: a client
  whose slurmctld is down or stopped retries for ``MessageTimeout`` or longer, and a loop
  that waits on it hangs (../shared/research/infra.md §A pitfall 5);
- runs with an environment that holds none of the variables that change what the commands
  print or do. Tried on 22.05: ``SQUEUE_USERS``, ``SQUEUE_NAMES`` and ``SQUEUE_STATES``
  filter squeue even under ``-j``/``-n``, so a job would vanish from the poll and read as
  lost; ``SLURM_TIME_FORMAT`` rewrites scontrol's times; ``SBATCH_*`` add flags
  (``SBATCH_EXPORT``, ``SBATCH_GRES``...). ``-o`` wins over ``SQUEUE_FORMAT`` (it did not in
  Parsl's case, which passed none), which goes all the same. ``SLURM_CONF`` stays: it is how
  a client finds a cluster whose configuration is not in /etc/slurm (submitit#1814);
- is found at a path the node's configuration may set (``SlurmPaths``).

Failures are typed, so that no caller reads a failure as an answer:
- ``SlurmUnreachable``: the controller did not answer (the timeout, or the client said it
  could not reach it). Nothing is known; for ``sbatch`` that includes whether the job was
  created (sisyphus#281), which is why ``submission.submit`` looks the job up afterwards;
- ``SlurmCommandFailed``: the command answered with an error (its stderr);
- ``AccountingDisabled``: sacct on a cluster without slurmdbd (a ``SlurmCommandFailed``);
- ``SlurmNotInstalled``: the program is not there.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Mapping, Sequence

import attrs
import trio

from gpuplaned.slurm.parsing import parse_version

DEFAULT_TIMEOUT_S = 30.0

# Variables that change what a client prints or does; scrubbed from every command's environment.
SCRUBBED_PREFIXES = ("SQUEUE_", "SACCT_", "SBATCH_", "SCANCEL_", "SCONTROL_", "SINFO_", "SALLOC_", "SRUN_")
SCRUBBED_NAMES = frozenset({"SLURM_TIME_FORMAT", "SLURM_BITSTR_LEN"})  # times; how long %K/%i ranges print

# What a client prints when it could not talk to slurmctld (src/common/slurm_errno.c; the
# same words from 22.05 to 25.11).
UNREACHABLE_MESSAGES = (
    "Unable to contact slurm controller",
    "Socket timed out on send/recv operation",
    "Zero Bytes were transmitted or received",
    "Communication connection failure",
    "Slurm backup controller in standby mode",
)


class SlurmError(Exception):
    """Base of the Slurm command layer's errors."""


class SlurmNotInstalled(SlurmError):
    def __init__(self, tool: str, path: str) -> None:
        super().__init__(f"the Slurm client {tool!r} was not found at {path!r}; install slurm-client "
                         f"or set its path in the node's [slurm] configuration")
        self.tool = tool
        self.path = path


class SlurmUnreachable(SlurmError):
    """slurmctld did not answer ``argv`` (``why``: the timeout, or the client's own words)."""

    def __init__(self, argv: Sequence[str], why: str) -> None:
        super().__init__(f"Slurm's controller did not answer `{' '.join(argv)}`: {why}")
        self.argv = tuple(argv)
        self.why = why


class SlurmCommandFailed(SlurmError):
    """The command ran and answered with an error."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        super().__init__(f"`{' '.join(argv)}` failed (exit {returncode}): {stderr.strip() or '(no message)'}")
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr


class AccountingDisabled(SlurmCommandFailed):
    """sacct on a cluster without an accounting daemon: it knows no finished job."""


@attrs.frozen
class SlurmPaths:
    """Where each client program is: a bare name is looked up on PATH."""

    sbatch: str = "sbatch"
    squeue: str = "squeue"
    scontrol: str = "scontrol"
    scancel: str = "scancel"
    sacct: str = "sacct"
    sinfo: str = "sinfo"


def scrubbed_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables that change what Slurm's clients print or do."""
    return {key: value for key, value in env.items()
            if not key.startswith(SCRUBBED_PREFIXES) and key not in SCRUBBED_NAMES}


@attrs.frozen
class Completed:
    argv: tuple[str, ...]
    stdout: str
    stderr: str


@attrs.define
class SlurmCli:
    """Runs Slurm's client commands (see the module docstring).

    Args:
        paths: where the programs are.
        timeout_s: how long one command may take before it is killed and the controller
            counts as unreachable.
        env: the environment the commands start from (default: this process's), scrubbed.
    """

    paths: SlurmPaths = attrs.field(factory=SlurmPaths)
    timeout_s: float = DEFAULT_TIMEOUT_S
    env: Mapping[str, str] | None = None
    calls: int = 0  # commands started, for the polling cost

    def _program(self, tool: str) -> str:
        path = getattr(self.paths, tool)
        found = shutil.which(path) if os.sep not in path else (path if os.access(path, os.X_OK) else None)
        if found is None:
            raise SlurmNotInstalled(tool, path)
        return found

    async def run(self, tool: str, *args: str, stdin: bytes | None = None) -> Completed:
        """Run ``tool`` (a field of ``SlurmPaths``) with ``args``; its stdout on success.

        Raises:
            SlurmUnreachable: it passed the timeout, or said it could not reach slurmctld.
            SlurmCommandFailed: it exited non-zero for another reason.
            SlurmNotInstalled: the program is not there.
        """
        argv = (self._program(tool), *args)
        shown = (tool, *args)
        env = scrubbed_environment(os.environ if self.env is None else self.env)
        self.calls += 1
        with trio.move_on_after(self.timeout_s) as scope:
            result = await trio.run_process(argv, stdin=stdin, capture_stdout=True, capture_stderr=True,
                                            check=False, env=env, deliver_cancel=_kill)
        if scope.cancelled_caught:
            raise SlurmUnreachable(shown, f"no answer within {self.timeout_s:g} s")
        stdout = result.stdout.decode(errors="replace")
        stderr = result.stderr.decode(errors="replace")
        if result.returncode != 0:
            if any(message in stderr for message in UNREACHABLE_MESSAGES):
                raise SlurmUnreachable(shown, stderr.strip())
            if tool == "sacct" and "accounting storage is disabled" in stderr:
                raise AccountingDisabled(shown, result.returncode, stderr)
            raise SlurmCommandFailed(shown, result.returncode, stderr)
        return Completed(shown, stdout, stderr)

    async def version(self) -> tuple[int, int, int]:
        """The clients' release, from ``squeue --version`` (it asks no controller)."""
        return parse_version((await self.run("squeue", "--version")).stdout)


async def _kill(process: trio.Process) -> None:
    """A client past its timeout is killed at once: it holds no state worth a grace period,
    and a controller that does not answer would not answer a polite exit either."""
    try:
        process.send_signal(signal.SIGKILL)
    except ProcessLookupError:
        pass


@attrs.frozen
class Capabilities:
    """What a release of the clients is known to do, beyond the text formats every one has.

    - ``squeue_json_filters``: ``squeue --json`` honours ``-j``/``-t``/``--me`` (24.05.1+;
      22.05 ignores every filter, 23.11 documents them but only 24.05.1 fixed them);
    - ``scontrol_json``: ``scontrol show job --json`` exists (23.02+);
    - ``only_job_state``: ``squeue --only-job-state`` exists (23.11.5+).

    The baseline never needs them; a reader of JSON must check its flag first.
    """

    version: tuple[int, int, int]

    @property
    def squeue_json_filters(self) -> bool:
        return self.version >= (24, 5, 1)

    @property
    def scontrol_json(self) -> bool:
        return self.version >= (23, 2, 0)

    @property
    def only_job_state(self) -> bool:
        return self.version >= (23, 11, 5)
