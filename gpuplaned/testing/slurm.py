"""``FakeSlurm``: a small Slurm cluster in trio time, behind ``SlurmCli``'s interface
(``run(tool, *args, stdin=None)``, ``calls``, ``timeout_s``), for the Slurm backend in virtual
time (``autojump_clock``). No process is started.

It answers the commands the backend runs (``gpuplaned.slurm``), in the text they print on
Debian 12's 22.05 (tests/slurm/recorded/22.05), and fails the way they fail (stderr and exit
status, classified as ``SlurmCli.run`` classifies them):

- ``sbatch``: the options ``submission.sbatch_args`` emits (``--parsable``, ``--job-name``,
  ``--chdir``, ``--export``, ``--open-mode``, ``--output``, ``--error``, ``--gres=gpu:N``,
  ``--partition``, ``--account``, ``--qos``, ``--time``, ``--signal``, ``--requeue``), the
  script on stdin; an unknown option, an unknown partition, more GPUs than the cluster has or
  an empty script is refused as sbatch refuses it;
- ``squeue -h [-t all] [-j IDS] [--me] [-n NAMES] -o SQUEUE_FORMAT`` (one unknown id alone:
  "Invalid job id specified", as the real one says);
- ``scontrol -o show job [ID]``, ``scancel [--full] ID``;
- arrays: ``sbatch --array=<indexes>[%K]`` makes one task per index (the first keeps the array's
  id), each running the attempt dir its script's ``N) exec ... --oneshot DIR ;;`` line names, with
  that attempt's script; at most K run at once (the others pending with ``JobArrayTaskLimit``);
  squeue prints the tasks not started yet as one record (``12|12|2-5%2|12_[2-5%2]|PENDING``, the
  last one alone as itself), scontrol, scancel and sacct take ``A_i``, scancel ``A`` all of them,
  and ``scontrol update JobId=A ArrayTaskThrottle=K`` changes K (``throttles``; ``most_running``
  records the most tasks of each array that ran at once);
- ``sacct -n -P -X -j IDS -o SACCT_FIELDS`` with ``accounting=True``; without, it fails as
  sacct does on a cluster with no slurmdbd ("Slurm accounting storage is disabled").

Each job follows its ``SlurmScript``, matched by its attempt (``"<job id>/<attempt>"``, read
from its name ``gp-<job id>-<attempt>``), then its job id, else the default: the reasons
Slurm holds it pending for, in order and how long; then it waits for GPUs (reason
``Resources``) while fewer are free than it asks; it runs ``runs_s`` and exits with its code.
Our one-shot shim is played by the fake: when the job starts it writes ``runtime.json`` into
the attempt dir the batch script names (``--oneshot DIR``) from that dir's ``spec.json``, and
``exit.json`` when it ends, with ``gpuplaned.shim.records``' writers, so the backend reads real
records (``runtime_record``/``exit_record`` False: the shim died first). A cancelled running
job is COMPLETING for ``stops_after_s``, then CANCELLED (0:15); the shim's ``timeout_s`` and
Slurm's ``--time`` end it as the real ones do. An ended job stays in squeue and scontrol for
``min_job_age_s`` (Slurm's MinJobAge), in sacct for good.

Faults: ``pause()``/``resume()`` (a stopped slurmctld: every command raises
``SlurmUnreachable`` after the CLI's timeout, and nothing is scheduled meanwhile; running jobs
carry on), ``lose_sbatch_answers(n)`` (the next n sbatch calls make their job, then raise
``SlurmUnreachable`` after the timeout: the answer was lost), ``preempt(id)`` (Slurm's SIGTERM,
then a ``--requeue`` job queued again, whose rerun our shim ends at once), ``submit_foreign``
(another user's job, holding GPUs). A job submitted held (``-H``) stays pending.

``simulate`` runs the cluster (``await nursery.start(fake.simulate)``); ``commands`` lists every
command asked, ``count(tool)`` how many of one.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import signal
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs
import trio

from gpuplaned.slurm.commands import (
    UNREACHABLE_MESSAGES,
    AccountingDisabled,
    Completed,
    SlurmCommandFailed,
    SlurmNotInstalled,
    SlurmPaths,
    SlurmUnreachable,
)
from gpuplaned.slurm.arrays import expand_tasks, index_list, split_task_id
from gpuplaned.slurm.parsing import SACCT_FIELDS, SQUEUE_FORMAT, parse_version
from gpuplaned.shim.records import (
    EXIT_FILE,
    RUNTIME_FILE,
    SPEC_FILE,
    RequestError,
    Spec,
    exit_record,
    record_spawn_failure,
    runtime_record,
    write_json_atomic,
)

NO_PID = 1 << 22  # above any pid_max: the fake's pids never name a live process
VERSION = "slurm-wlm 22.05.8"
INVALID_JOB_ID = "slurm_load_jobs error: Invalid job id specified\n"
SQUEUE_HEADER = "JOBID|ARRAY_JOB_ID|ARRAY_TASK_ID|JOBID|STATE|REASON|NODELIST|NAME"
_SBATCH_VALUES = {"-J": "--job-name", "-D": "--chdir", "-o": "--output", "-e": "--error", "-p": "--partition",
                  "-A": "--account", "-q": "--qos", "-t": "--time"}
_SBATCH_LONG_VALUES = {"--job-name", "--chdir", "--export", "--open-mode", "--output", "--error", "--gres",
                       "--partition", "--account", "--qos", "--time", "--signal", "--array"}
_ARRAY_SPEC = re.compile(r"(\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)(?:%(\d+))?")
THROTTLED = "JobArrayTaskLimit"  # the reason of an array's task held back by its throttle
_SBATCH_FLAGS = {"--parsable", "--requeue", "--no-requeue", "-H", "--hold"}


@attrs.frozen
class SlurmScript:
    """What a fake Slurm job does."""

    pending: tuple[tuple[str, float], ...] = ()  # (reason, seconds) Slurm holds it for, in order, first
    runs_s: float = 1.0  # then it exits by itself...
    exit_code: int = 0  # ...with this code, or
    signal: int | None = None  # ...killed by this signal
    stops_after_s: float = 0.0  # from scancel's SIGTERM to its end
    runtime_record: bool = True  # False: the shim writes no runtime.json (nor exit.json)
    exit_record: bool = True  # False: the shim dies without writing exit.json
    # scancel's SIGTERM reaches the job before the shim's does: it dies of it (``signaled``).
    term_kills_first: bool = False


@attrs.define
class FakeJob:
    """One job in the fake cluster, as Slurm's tables hold it."""

    slurm_id: str
    name: str
    user: str
    gpus: int
    options: dict[str, str]  # the sbatch options as given (long names)
    script: str  # the batch script
    attempt_dir: Path | None  # what ``--oneshot`` names in it (None: not our shim)
    plan: SlurmScript
    submitted_at: float  # trio time
    time_limit_s: float | None = None
    state: str = "PENDING"
    reason: str | None = None
    exit_code: tuple[int, int] = (0, 0)  # status:signal
    node: str = ""
    started_at: float | None = None
    ended_at: float | None = None
    in_queue: bool = True  # squeue and scontrol still list it (until MinJobAge after its end)
    cancelled_by: int | None = None
    restarts: int = 0  # times Slurm requeued it
    preempted: bool = False  # the SIGTERM on its way is Slurm's preemption
    stop: trio.Event = attrs.field(factory=trio.Event)  # scancel (or a preemption) of a running job
    array_job_id: str | None = None  # a task of an array: the array's id and its index
    array_task: int | None = None

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    @property
    def shown_id(self) -> str:
        """The id users see: ``12``, or ``12_3`` for an array's task."""
        return self.slurm_id if self.array_job_id is None else f"{self.array_job_id}_{self.array_task}"


class FakeSlurm:
    """A Slurm cluster in trio time; see the module docstring.

    Args:
        scripts, default, script: what each job does (``script(name)`` wins when given).
        gpus: the cluster's GPUs (one node, ``node``).
        min_job_age_s: how long an ended job stays in squeue and scontrol.
        accounting: whether sacct knows ended jobs (a cluster with slurmdbd).
        timeout_s: the CLI's timeout: how long a command to a paused controller takes to fail.
        user, uid: the user our commands run as (``--me``).
        partitions: the partitions sbatch accepts (the first is the default).
        requeue_delay_s: how long a requeued job is held (reason BeginTime) before it may run again.
    """

    def __init__(self, scripts: Mapping[str, SlurmScript] | None = None, default: SlurmScript = SlurmScript(),
                 script: Callable[[str], SlurmScript] | None = None, *, gpus: int = 4,
                 min_job_age_s: float = 300.0, accounting: bool = False, timeout_s: float = 10.0,
                 node: str = "fake-node1", user: str = "gpuplane", uid: int = 1000,
                 partitions: tuple[str, ...] = ("debug",), requeue_delay_s: float = 10.0) -> None:
        self.scripts = dict(scripts or {})
        self.default = default
        self.script = script
        self.gpus = gpus
        self.min_job_age_s = min_job_age_s
        self.accounting = accounting
        self.timeout_s = timeout_s
        self.node = node
        self.user = user
        self.uid = uid
        self.partitions = partitions
        self.requeue_delay_s = requeue_delay_s
        self.calls = 0  # commands asked, as SlurmCli counts them
        self.commands: list[tuple[str, ...]] = []  # every command asked, as (tool, *args)
        self.jobs: dict[str, FakeJob] = {}  # every job ever made, by Slurm id
        self.throttles: dict[str, int] = {}  # each array's ArrayTaskThrottle (0: none), by its job id
        self.most_running: dict[str, int] = {}  # the most tasks of each array that ran at once
        self.paused = False
        self._lost_answers = 0
        self._next_id = 1
        self._next_pid = NO_PID
        self._changed = trio.Event()
        self._nursery: trio.Nursery | None = None

    # -- the cluster ------------------------------------------------------------------------

    async def simulate(self, *, task_status: trio.TaskStatus[FakeSlurm] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the cluster until cancelled: ``await nursery.start(fake.simulate)``."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started(self)
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    @property
    def simulating(self) -> bool:
        return self._nursery is not None

    def pause(self) -> None:
        """slurmctld stops (SIGSTOP): every command fails after the timeout; nothing is scheduled."""
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self._wake()

    def lose_sbatch_answers(self, n: int = 1) -> None:
        """The next ``n`` sbatch calls make their job, and then their answer is lost."""
        self._lost_answers += n

    def preempt(self, slurm_id: str) -> None:
        """Slurm preempts a running job: SIGTERM to its batch shell, our shim, which cancels the
        job and records it so; then a job submitted with ``--requeue`` is queued again (PENDING,
        BeginTime, Restarts+1), and its rerun (``SLURM_RESTART_COUNT`` > 0) finds our shim doing
        nothing, exit 0 (gpuplaned/shim/oneshot.py); one without ends PREEMPTED."""
        job = self.jobs[slurm_id]
        if job.state != "RUNNING":
            raise ValueError(f"Slurm job {slurm_id} is {job.state}: only a running job is preempted")
        job.preempted = True
        job.stop.set()

    def submit_foreign(self, name: str, *, gpus: int = 0, runs_s: float = 3600.0, user: str = "alice") -> FakeJob:
        """Another user's job: not ours to watch or cancel, but it holds GPUs."""
        return self._make(name, user, gpus, {}, "#!/bin/sh\n", None, SlurmScript(runs_s=runs_s), None)

    @property
    def free_gpus(self) -> int:
        return self.gpus - sum(job.gpus for job in self.jobs.values() if job.state in ("RUNNING", "COMPLETING"))

    def named(self, name: str) -> list[FakeJob]:
        """Every job ever made with ``name``."""
        return [job for job in self.jobs.values() if job.name == name]

    def count(self, tool: str) -> int:
        """How many ``tool`` commands were asked."""
        return sum(1 for command in self.commands if command[0] == tool)

    def script_of(self, name: str) -> SlurmScript:
        if self.script is not None:
            return self.script(name)
        job_id, _, attempt = name.removeprefix("gp-").rpartition("-")
        return self.scripts.get(f"{job_id}/{attempt}") or self.scripts.get(job_id, self.default)

    # -- SlurmCli's interface -----------------------------------------------------------------

    async def run(self, tool: str, *args: str, stdin: bytes | None = None) -> Completed:
        shown = (tool, *args)
        self.calls += 1
        self.commands.append(shown)
        if self.paused:
            await self._no_answer(shown)
        await trio.lowlevel.checkpoint()
        answers = {"sbatch": self._sbatch, "squeue": self._squeue, "scontrol": self._scontrol,
                   "scancel": self._scancel, "sacct": self._sacct}
        if tool not in answers:
            if hasattr(SlurmPaths(), tool):
                raise ValueError(f"FakeSlurm does not answer {tool}")
            raise SlurmNotInstalled(tool, tool)
        returncode, stdout, stderr = answers[tool](list(args), stdin)
        if tool == "sbatch" and returncode == 0 and self._lost_answers:
            self._lost_answers -= 1
            await self._no_answer(shown)
        if returncode != 0:
            if any(message in stderr for message in UNREACHABLE_MESSAGES):
                raise SlurmUnreachable(shown, stderr.strip())
            if tool == "sacct" and "accounting storage is disabled" in stderr:
                raise AccountingDisabled(shown, returncode, stderr)
            raise SlurmCommandFailed(shown, returncode, stderr)
        return Completed(shown, stdout, stderr)

    async def version(self) -> tuple[int, int, int]:
        return parse_version((await self.run("squeue", "--version")).stdout)

    async def _no_answer(self, shown: tuple[str, ...]) -> None:
        await trio.sleep(self.timeout_s)  # the client retries until our timeout kills it
        raise SlurmUnreachable(shown, f"no answer within {self.timeout_s:g} s")

    # -- the commands: (exit status, stdout, stderr) -------------------------------------------

    def _sbatch(self, args: list[str], stdin: bytes | None) -> tuple[int, str, str]:
        options: dict[str, str] = {}
        i = 0
        while i < len(args):
            arg = args[i]
            key, eq, value = arg.partition("=")
            key = _SBATCH_VALUES.get(key, key)
            if arg in _SBATCH_FLAGS:
                options[arg] = ""
            elif key in _SBATCH_LONG_VALUES:
                if not eq:
                    if i + 1 == len(args):
                        return 1, "", f"sbatch: option '{arg}' requires an argument\n"
                    i += 1
                    value = args[i]
                options[key] = value
            else:
                return 1, "", f"sbatch: unrecognized option '{arg}'\nTry \"sbatch --help\" for more information\n"
            i += 1
        script = (stdin or b"").decode(errors="replace")
        if not script.strip():
            return 1, "", "sbatch: error: Batch script is empty!\n"
        if not script.startswith("#!"):
            return 1, "", ("sbatch: error: This does not look like a batch script.  The first\n"
                           "sbatch: error: line must start with #! followed by the path to an interpreter.\n")
        gpus = 0
        if "--gres" in options:
            kind, *rest = options["--gres"].split(":")  # gpu, gpu:N, gpu:TYPE:N
            count = rest[-1] if rest and rest[-1].isdigit() else "1"
            if kind != "gpu" or len(rest) > 2 or (len(rest) == 2 and not rest[-1].isdigit()):
                return 1, "", "sbatch: error: Invalid generic resource (gres) specification\n"
            gpus = int(count)
        time_limit_s = None
        if "--time" in options:
            time_limit_s = _time_limit_s(options["--time"])
            if time_limit_s is None:
                return 1, "", "sbatch: error: Invalid --time specification\n"
        if options.get("--partition", self.partitions[0]) not in self.partitions:
            return 1, "", ("sbatch: error: invalid partition specified: " + options["--partition"] +
                           "\nsbatch: error: Batch job submission failed: Invalid partition name specified\n")
        if gpus > self.gpus:
            return 1, "", "sbatch: error: Batch job submission failed: Requested node configuration is not available\n"
        name = options.get("--job-name", "sbatch")
        if "--array" in options:
            found = _ARRAY_SPEC.fullmatch(options["--array"])
            if found is None:
                return 1, "", "sbatch: error: Invalid job array specification\n"
            made = self._make_array(name, gpus, options, script, expand_tasks(found.group(1)),
                                    int(found.group(2) or 0), time_limit_s)
        else:
            made = self._make(name, self.user, gpus, options, script, _oneshot_dir(script), self.script_of(name),
                              time_limit_s).slurm_id
        return 0, f"{made}\n" if "--parsable" in options else f"Submitted batch job {made}\n", ""

    def _make_array(self, name: str, gpus: int, options: dict[str, str], script: str, indexes: list[int],
                    throttle: int, time_limit_s: float | None) -> str:
        """An array job: one task per index (the first keeps the array's id), each running the
        attempt dir its script picks for it, with that attempt's script (read from the dir)."""
        array_id = str(self._next_id)
        self.throttles[array_id] = throttle
        self.most_running[array_id] = 0
        dirs = _array_dirs(script)
        for index in indexes:
            job_dir = dirs.get(index)
            plan = self.script_of(f"gp-{job_dir.parent.name}-{job_dir.name.removeprefix('attempt-')}"
                                  if job_dir is not None else name)
            self._make(name, self.user, gpus, options, script, job_dir, plan, time_limit_s, array=(array_id, index))
        return array_id

    def array_tasks(self, array_id: str) -> list[FakeJob]:
        """The tasks of an array, by index."""
        return sorted((job for job in self.jobs.values() if job.array_job_id == array_id),
                      key=lambda job: job.array_task or 0)

    def _running_tasks(self, array_id: str) -> int:
        return sum(1 for job in self.jobs.values()
                   if job.array_job_id == array_id and job.state in ("RUNNING", "COMPLETING"))

    def _squeue(self, args: list[str], stdin: bytes | None) -> tuple[int, str, str]:
        if args == ["--version"]:
            return 0, VERSION + "\n", ""
        flags, values, problem = _split(args, "squeue", flags={"-h", "--noheader", "--me"},
                                        values={"-t": "-t", "--states": "-t", "-j": "-j", "--jobs": "-j",
                                                "-n": "-n", "--name": "-n", "-o": "-o", "--format": "-o"})
        if problem:
            return 1, "", problem
        if values.get("-o") != SQUEUE_FORMAT:
            raise ValueError(f"FakeSlurm's squeue prints only -o {SQUEUE_FORMAT!r}, got {values.get('-o')!r}")
        listed = [job for job in self.jobs.values() if job.in_queue]
        states = values.get("-t", "")
        if states.lower() != "all":
            wanted = {s.upper() for s in states.split(",") if s} or {"PENDING", "RUNNING", "COMPLETING"}
            listed = [job for job in listed if job.state in wanted]
        if "-j" in values:
            ids = values["-j"].split(",")
            if not all(i.isdigit() for i in ids):
                return 1, "", f"squeue: error: Invalid job id: {values['-j']}\n"
            if len(ids) == 1 and not any(ids[0] in (job.slurm_id, job.array_job_id) for job in listed):
                return 1, "", INVALID_JOB_ID  # one id: squeue loads that job alone, and it is gone
            listed = [job for job in listed if job.slurm_id in ids or job.array_job_id in ids]
        if "--me" in flags:
            listed = [job for job in listed if job.user == self.user]
        if "-n" in values:
            names = set(values["-n"].split(","))
            listed = [job for job in listed if job.name in names]
        lines = [] if flags & {"-h", "--noheader"} else [SQUEUE_HEADER]
        lines += self._squeue_lines(listed)
        return 0, "".join(line + "\n" for line in lines), ""

    def _scontrol(self, args: list[str], stdin: bytes | None) -> tuple[int, str, str]:
        words = [arg for arg in args if arg not in ("-o", "--oneliner")]
        if words[:1] == ["update"]:
            return self._scontrol_update(words[1:])
        if words[:2] != ["show", "job"] or len(words) > 3:
            raise ValueError(f"FakeSlurm's scontrol answers only 'show job [ID]' and 'update JobId=A "
                             f"ArrayTaskThrottle=K', got {args!r}")
        listed = [job for job in self.jobs.values() if job.in_queue]
        if len(words) == 3:
            listed = [job for job in listed if words[2] in (job.slurm_id, job.shown_id) or
                      (job.array_job_id == words[2] and split_task_id(words[2]) is None)]
            if not listed:
                return 1, "", INVALID_JOB_ID
        if not listed:
            return 0, "No jobs in the system\n", ""
        return 0, "".join(self._scontrol_line(job) + "\n" for job in listed), ""

    def _scontrol_update(self, words: list[str]) -> tuple[int, str, str]:
        pairs = dict(word.partition("=")[::2] for word in words)
        if set(pairs) != {"JobId", "ArrayTaskThrottle"}:
            raise ValueError(f"FakeSlurm's scontrol update sets only JobId=A ArrayTaskThrottle=K, got {words!r}")
        array_id, throttle = pairs["JobId"], pairs["ArrayTaskThrottle"]
        tasks = [job for job in self.array_tasks(array_id) if job.in_queue]
        if not tasks:
            return 1, "", "slurm_update error: Invalid job id specified\n"
        if not throttle.isdigit():
            return 1, "", "slurm_update error: Invalid ArrayTaskThrottle value\n"
        if all(job.ended for job in tasks):
            return 1, "", "slurm_update error: Job/step already completing or completed\n"
        self.throttles[array_id] = int(throttle)
        self._wake()
        return 0, "", ""

    def _scancel(self, args: list[str], stdin: bytes | None) -> tuple[int, str, str]:
        flags, values, problem = _split(args, "scancel", flags={"--full", "-f", "--batch", "-b"},
                                        values={"--signal": "-s", "-s": "-s"}, positional=True)
        if problem:
            return 1, "", problem
        if values.get("-s", "TERM").removeprefix("SIG") not in ("TERM", "KILL"):
            raise ValueError(f"FakeSlurm's scancel only ends jobs, got {args!r}")
        errors = []
        for slurm_id, job in self._cancelled(values.get("", "").split()):
            if job is None or not job.in_queue or job.user != self.user:
                why = "Invalid job id specified" if job is None or not job.in_queue else \
                    "Access/permission denied"
                errors.append(f"scancel: error: Kill job error on job id {slurm_id}: {why}\n")
            elif job.ended or job.stop.is_set():
                errors.append(f"scancel: error: Kill job error on job id {slurm_id}: "
                              f"Job/step already completing or completed\n")
            else:
                self._cancel(job)
        return (1 if errors else 0), "", "".join(errors)

    def _sacct(self, args: list[str], stdin: bytes | None) -> tuple[int, str, str]:
        if not self.accounting:
            return 1, "", "Slurm accounting storage is disabled\n"
        flags, values, problem = _split(args, "sacct", flags={"-n", "-P", "-X"},
                                        values={"-j": "-j", "--jobs": "-j", "-o": "-o", "--format": "-o"})
        if problem:
            return 1, "", problem
        if values.get("-o") != ",".join(SACCT_FIELDS) or not {"-n", "-P", "-X"} <= flags:
            raise ValueError(f"FakeSlurm's sacct prints only -n -P -X -o {','.join(SACCT_FIELDS)}, got {args!r}")
        ids = set(values.get("-j", "").split(",")) if "-j" in values else None
        lines = []
        for job in self.jobs.values():
            if ids is not None and job.slurm_id not in ids and job.shown_id not in ids:
                continue
            state = job.state + (f" by {job.cancelled_by}" if job.cancelled_by is not None else "")
            lines.append("|".join((job.shown_id, job.slurm_id, job.name, state, "%d:%d" % job.exit_code,
                                   job.reason or "None", job.node or "None assigned")))
        return 0, "".join(line + "\n" for line in lines), ""

    # -- what the tables print ------------------------------------------------------------------

    def _cancelled(self, ids: list[str]) -> list[tuple[str, FakeJob | None]]:
        """What scancel's ids name: a job, an array's task (``A_i``), or every task of an array (``A``)."""
        out: list[tuple[str, FakeJob | None]] = []
        for slurm_id in ids:
            tasks = [job for job in self.array_tasks(slurm_id) if job.in_queue and not job.ended]
            if split_task_id(slurm_id) is None and tasks:
                out += [(job.shown_id, job) for job in tasks]
                continue
            out.append((slurm_id, self.jobs.get(slurm_id) if split_task_id(slurm_id) is None else next(
                (job for job in self.jobs.values() if job.shown_id == slurm_id), None)))
        return out

    def _squeue_lines(self, listed: list[FakeJob]) -> list[str]:
        """One line a job, as squeue prints them; an array's tasks that never started yet, as
        one record of the array's pending rest (``12|12|4-9%2|12_[4-9%2]|PENDING|...``) while
        there are two or more of them."""
        lines, rest = [], {}
        for job in listed:
            if job.array_job_id is not None and job.state == "PENDING" and job.started_at is None:
                rest.setdefault(job.array_job_id, []).append(job)
            else:
                lines.append(self._squeue_line(job))
        for array_id, tasks in rest.items():
            if len(tasks) == 1:  # the last one pending is listed as itself, as Slurm does
                lines.append(self._squeue_line(tasks[0]))
                continue
            throttle = self.throttles.get(array_id, 0)
            listing = index_list(job.array_task or 0 for job in tasks) + (f"%{throttle}" if throttle else "")
            lines.append("|".join((array_id, array_id, listing, f"{array_id}_[{listing}]", "PENDING",
                                   tasks[0].reason or "None", "", tasks[0].name)))
        return lines

    def _squeue_line(self, job: FakeJob) -> str:
        if job.array_job_id is not None:
            return "|".join((job.slurm_id, job.array_job_id, str(job.array_task), job.shown_id, job.state,
                             job.reason or "None", job.node, job.name))
        return "|".join((job.slurm_id, job.slurm_id, "N/A", job.slurm_id, job.state, job.reason or "None", job.node,
                         job.name))

    def _scontrol_line(self, job: FakeJob) -> str:
        now = trio.current_time()
        ran = 0 if job.started_at is None else int((job.ended_at or now) - job.started_at)
        limit = "UNLIMITED" if job.time_limit_s is None else _clock(job.time_limit_s)
        array = [] if job.array_job_id is None else [
            ("ArrayJobId", job.array_job_id), ("ArrayTaskId", str(job.array_task)),
            ("ArrayTaskThrottle", str(self.throttles.get(job.array_job_id, 0)))]
        fields = [
            ("JobId", job.slurm_id), *array, ("JobName", job.name), ("UserId", f"{job.user}({self.uid})"),
            ("GroupId", f"{job.user}({self.uid})"), ("MCS_label", "N/A"), ("Priority", "4294901759"),
            ("Nice", "0"), ("Account", job.options.get("--account", "(null)")),
            ("QOS", job.options.get("--qos", "(null)")), ("JobState", job.state),
            ("Reason", (job.reason or "None").replace(" ", "_")), ("Dependency", "(null)"),
            ("Requeue", "1" if "--requeue" in job.options else "0"), ("Restarts", str(job.restarts)),
            ("BatchFlag", "1"),
            ("Reboot", "0"), ("ExitCode", "%d:%d" % job.exit_code), ("RunTime", _clock(ran)),
            ("TimeLimit", limit), ("Partition", job.options.get("--partition", self.partitions[0])),
            ("NodeList", job.node), ("NumNodes", "1"), ("NumCPUs", "1"), ("NumTasks", "1"),
            ("WorkDir", job.options.get("--chdir", "/")), ("StdErr", job.options.get("--error", "/dev/null")),
            ("StdIn", "/dev/null"), ("StdOut", job.options.get("--output", "/dev/null")), ("Power", ""),
        ]
        if job.gpus:
            fields.append(("TresPerNode", f"gres:gpu:{job.gpus}"))
        return " ".join(f"{key}={value}" for key, value in fields) + " "

    # -- the jobs' lives --------------------------------------------------------------------------

    def _make(self, name: str, user: str, gpus: int, options: dict[str, str], script: str,
              attempt_dir: Path | None, plan: SlurmScript, time_limit_s: float | None,
              array: tuple[str, int] | None = None) -> FakeJob:
        if self._nursery is None:
            raise RuntimeError("FakeSlurm is not running: start it with `await nursery.start(fake.simulate)`")
        job = FakeJob(str(self._next_id), name, user, gpus, options, script, attempt_dir, plan,
                      trio.current_time(), time_limit_s)
        self._next_id += 1
        if array is not None:
            job.array_job_id, job.array_task = array
        self.jobs[job.slurm_id] = job
        # Its first state is settled here, so that whoever asks next sees it whatever order
        # trio runs its tasks in.
        if "-H" in options or "--hold" in options:
            job.reason = "JobHeldUser"  # until released, which the fake does not do: it stays
            return job
        if plan.pending:
            job.reason = plan.pending[0][0]
        elif not self._may_start(job):
            job.reason = self._held_for(job)
        else:
            self._nursery.start_soon(self._run, job, self._begin(job))
            return job
        self._nursery.start_soon(self._life, job)
        return job

    def _may_start(self, job: FakeJob) -> bool:
        return not self.paused and self.free_gpus >= job.gpus and self._held_for(job) != THROTTLED

    def _held_for(self, job: FakeJob) -> str:
        """Why Slurm holds a job it could run but for what it asks: an array's throttle, or GPUs."""
        throttle = self.throttles.get(job.array_job_id or "", 0)
        if throttle and self._running_tasks(job.array_job_id or "") >= throttle:
            return THROTTLED
        return "Resources"

    async def _life(self, job: FakeJob, pending: tuple[tuple[str, float], ...] | None = None) -> None:
        for reason, seconds in job.plan.pending if pending is None else pending:
            job.reason = reason
            with trio.move_on_after(seconds):
                await job.stop.wait()
            if job.state != "PENDING":
                return
        while job.state == "PENDING" and not self._may_start(job):
            if not self.paused:
                job.reason = self._held_for(job)
            await self._next_change()
        if job.state != "PENDING":
            return  # cancelled while it waited
        await self._run(job, self._begin(job))

    def _begin(self, job: FakeJob) -> Spec | None:
        """Slurm starts the job: its batch script execs our shim."""
        job.state, job.reason, job.node, job.started_at = "RUNNING", None, self.node, trio.current_time()
        if job.array_job_id is not None:
            self.most_running[job.array_job_id] = max(self.most_running.get(job.array_job_id, 0),
                                                      self._running_tasks(job.array_job_id))
        self._wake()
        return self._shim_starts(job)

    async def _run(self, job: FakeJob, spec: Spec | None) -> None:
        plan = job.plan
        assert job.started_at is not None
        if job.restarts:  # a rerun Slurm made: our shim does nothing, exit 0
            self._end(job, "COMPLETED", (0, 0))
            return
        shim_timeout = spec.timeout_s if spec is not None and spec.timeout_s is not None else math.inf
        limit = job.time_limit_s if job.time_limit_s is not None else math.inf
        first = min(plan.runs_s, shim_timeout, limit)
        with trio.move_on_after(first):
            await job.stop.wait()
        if job.stop.is_set() or first < min(plan.runs_s, shim_timeout):
            # scancel, or Slurm's time limit: SIGTERM to the batch shell, our shim, which cancels the job
            state = "CANCELLED" if job.stop.is_set() else "TIMEOUT"
            job.state = "COMPLETING"
            await trio.sleep(plan.stops_after_s)
            self._shim_ends(job, spec, "signaled" if plan.term_kills_first else "cancelled", None, signal.SIGTERM)
            if job.preempted:
                self._requeue(job)
            else:
                self._end(job, state, (0, signal.SIGTERM))
        elif first < plan.runs_s:  # the shim's own timeout: it stops the job, and exits as the job did
            await trio.sleep(min(plan.stops_after_s, spec.grace_s if spec is not None else 0.0))
            self._shim_ends(job, spec, "timeout", None, signal.SIGTERM)
            self._end(job, "FAILED", (128 + signal.SIGTERM, 0))
        elif plan.signal is not None:
            self._shim_ends(job, spec, "signaled", None, plan.signal)
            self._end(job, "FAILED", (128 + plan.signal, 0))  # the shim exits 128+N
        else:
            self._shim_ends(job, spec, "exited", plan.exit_code, None)
            self._end(job, "COMPLETED" if plan.exit_code == 0 else "FAILED", (plan.exit_code, 0))

    def _requeue(self, job: FakeJob) -> None:
        if "--requeue" not in job.options:
            self._end(job, "PREEMPTED", (0, signal.SIGTERM))
            return
        job.restarts += 1
        job.preempted, job.stop = False, trio.Event()
        job.state, job.node, job.reason = "PENDING", "", "BeginTime"
        self._wake()
        assert self._nursery is not None
        self._nursery.start_soon(self._life, job, (("BeginTime", self.requeue_delay_s),))

    def _cancel(self, job: FakeJob) -> None:
        job.cancelled_by = self.uid
        job.stop.set()
        if job.state == "PENDING":
            self._end(job, "CANCELLED", (0, 0))

    def _end(self, job: FakeJob, state: str, exit_code: tuple[int, int]) -> None:
        job.state, job.exit_code, job.ended_at = state, exit_code, trio.current_time()
        if state == "FAILED":
            job.reason = "NonZeroExitCode"
        self._wake()
        assert self._nursery is not None
        self._nursery.start_soon(self._purge, job)

    async def _purge(self, job: FakeJob) -> None:
        """MinJobAge after its end, slurmctld forgets the job (not while it is stopped)."""
        await trio.sleep(self.min_job_age_s)
        while self.paused:
            await self._next_change()
        job.in_queue = False

    def _shim_starts(self, job: FakeJob) -> Spec | None:
        """What our one-shot shim does as the batch script ``exec``s it: read spec.json, start
        the job, write runtime.json (or, with no usable spec, the spawn failure)."""
        if job.attempt_dir is None or not job.plan.runtime_record or job.restarts:
            return None
        job_dir = os.fspath(job.attempt_dir)
        try:
            with open(os.path.join(job_dir, SPEC_FILE)) as file:
                spec = Spec({**json.load(file), "job_dir": job_dir})
        except (OSError, ValueError, RequestError) as error:
            record_spawn_failure(job_dir, 127, f"cannot read {SPEC_FILE}: {error}")
            return None
        self._next_pid += 2
        pid = self._next_pid
        write_json_atomic(os.path.join(job_dir, RUNTIME_FILE), runtime_record(
            spec, shim_pid=pid - 1, shim_start_time=1, pid=pid, start_time=1,
            started_at=1.7e9 + trio.current_time(), placement={"host": self.node, "slurm_job_id": job.slurm_id}))
        return spec

    def _shim_ends(self, job: FakeJob, spec: Spec | None, reason: str, exit_code: int | None,
                   signum: int | None) -> None:
        if spec is None or not job.plan.exit_record:
            return
        record = exit_record(reason, exit_code=exit_code, signum=None if signum is None else int(signum),
                             pid=self._next_pid, owner=spec.owner(), forwarded=[])
        write_json_atomic(os.path.join(spec.job_dir, EXIT_FILE), record)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _next_change(self) -> None:
        await self._changed.wait()


def _oneshot_dir(script: str) -> Path | None:
    """The attempt dir of the batch script's ``exec <python> ... --oneshot DIR`` (None: another script)."""
    for line in script.splitlines():
        if line.startswith("exec "):
            words = shlex.split(line)
            if "--oneshot" in words[:-1]:
                return Path(words[words.index("--oneshot") + 1])
    return None


def _array_dirs(script: str) -> dict[int, Path]:
    """Each task's attempt dir of an array's batch script: its ``N) exec ... --oneshot DIR ;;`` lines."""
    dirs = {}
    for line in script.splitlines():
        index, paren, command = line.partition(") exec ")
        if paren and index.strip().isdigit():
            words = shlex.split(command.removesuffix(";;"))
            if "--oneshot" in words[:-1]:
                dirs[int(index)] = Path(words[words.index("--oneshot") + 1])
    return dirs


def _split(args: list[str], tool: str, *, flags: set[str], values: dict[str, str],
           positional: bool = False) -> tuple[set[str], dict[str, str], str | None]:
    """A command's options: the flags given, each value by its short name ('' holds the
    positional words), or the error the command prints for one it does not know."""
    seen: set[str] = set()
    given: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        key, eq, value = arg.partition("=")
        if arg in flags:
            seen.add(arg)
        elif key in values:
            if not eq:
                if i + 1 == len(args):
                    return seen, given, f"{tool}: option '{arg}' requires an argument\n"
                i += 1
                value = args[i]
            given[values[key]] = value
        elif positional and not arg.startswith("-"):
            given[""] = f"{given.get('', '')} {arg}".strip()
        else:
            return seen, given, f"{tool}: unrecognized option '{arg}'\nTry \"{tool} --help\" for more information\n"
        i += 1
    return seen, given, None


def _time_limit_s(text: str) -> float | None:
    """sbatch's ``--time`` in seconds: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``."""
    days, dash, rest = text.partition("-")
    if not dash:
        days, rest = "0", text
    parts = rest.split(":")
    if not days.isdigit() or not all(p.isdigit() for p in parts) or len(parts) > 3:
        return None
    numbers = [int(p) for p in parts]
    if dash:  # D-H[:M[:S]]
        numbers += [0] * (3 - len(numbers))
        hours, minutes, seconds = numbers
    elif len(numbers) == 1:
        hours, minutes, seconds = 0, numbers[0], 0
    elif len(numbers) == 2:
        hours, (minutes, seconds) = 0, numbers
    else:
        hours, minutes, seconds = numbers
    return float(((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds)


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    days, seconds = divmod(seconds, 86400)
    text = f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    return f"{days}-{text}" if days else text
