"""What Slurm's text output says, parsed: pure functions, no processes, no trio.

Text is the baseline (``squeue -h -o``, ``scontrol -o show job``, ``sacct -n -P``): its
fields have read the same from 22.05 to 25.11, while ``--json`` changed shape in every
release (docs/slurm.md lists what differs, and tests/slurm/recorded/ holds an output of each
release). Each parser takes the command's stdout and returns frozen records:

- ``parse_squeue``: one ``QueueRow`` per line of ``squeue -h -o SQUEUE_FORMAT``;
- ``parse_scontrol_jobs``: one ``JobDetail`` per record of ``scontrol -o show job``;
- ``parse_sacct``: one ``AccountingRow`` per line of ``sacct -n -P -X -o SACCT_FIELDS``;
- ``parse_sbatch_parsable``: the job id of ``sbatch --parsable`` (``id`` or ``id;cluster``);
- ``parse_version``: ``slurm 22.05.8`` / ``slurm-wlm 22.05.8`` as ``(22, 5, 8)``.

A line that is not what the command prints raises ``SlurmParseError`` naming the line: a
format we do not understand must never read as "no jobs".
"""

from __future__ import annotations

import re

import attrs

# The squeue fields, "|"-separated: the numeric job id (each array task has its own), the
# array's job id (the job's own id when it is no array), the array task id ("N/A", "3", or
# the pending tasks "4-9%2"), the id as users see it ("12", "12_3", "12_[4-9%2]"), the state,
# the reason (state_desc when set, so it may hold spaces and commas), the nodes, and the name
# last, as the one field whose text is anyone's.
SQUEUE_FORMAT = "%A|%F|%K|%i|%T|%r|%N|%j"
SACCT_FIELDS = ("JobID", "JobIDRaw", "JobName", "State", "ExitCode", "Reason", "NodeList")

# Every state job_state_string() prints (src/common/slurm_protocol_defs.c, 22.05 to 25.11;
# EXPEDITING is new in 25.11), by what it means for whoever waits on the job.
PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT",
                            "RESV_DEL_HOLD", "EXPEDITING"})
ACTIVE_STATES = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING",
                           "STAGE_OUT", "RESIZING"})
ENDED_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                          "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED"})
KNOWN_STATES = PENDING_STATES | ACTIVE_STATES | ENDED_STATES


class SlurmParseError(ValueError):
    """A line of a Slurm command's output is not in the format asked for."""

    def __init__(self, command: str, line: str, problem: str) -> None:
        super().__init__(f"{command}: {problem}: {line!r}")
        self.command = command
        self.line = line
        self.problem = problem


@attrs.frozen
class ExitCode:
    """Slurm's ``status:signal``: the exit status of the batch script, or the signal that
    ended it (then status is 0)."""

    status: int
    signal: int

    @property
    def succeeded(self) -> bool:
        return self.status == 0 and self.signal == 0


@attrs.frozen
class JobState:
    """A state as Slurm prints it, split: ``name`` (``CANCELLED``) and what follows it
    (``by 0``: the uid that cancelled it, in sacct)."""

    name: str
    detail: str = ""

    @property
    def pending(self) -> bool:
        return self.name in PENDING_STATES

    @property
    def active(self) -> bool:
        return self.name in ACTIVE_STATES

    @property
    def ended(self) -> bool:
        return self.name in ENDED_STATES


@attrs.frozen
class QueueRow:
    """One job (or the pending rest of an array) as ``squeue`` lists it."""

    job_id: str  # the numeric id scancel and scontrol take
    array_job_id: str | None  # None unless an array
    array_task: str | None  # "3", or for pending tasks still in one record "4-9%2"
    display_id: str  # "12", "12_3", "12_[4-9%2]"
    state: JobState
    reason: str | None  # None when Slurm says "None"
    nodes: str
    name: str


@attrs.frozen
class JobDetail:
    """What ``scontrol -o show job`` says of a job that matters to us. ``fields`` keeps every
    key as printed, for what is not lifted out."""

    job_id: str
    name: str
    state: JobState
    reason: str | None
    exit_code: ExitCode
    restarts: int
    nodes: str
    array_job_id: str | None
    array_task: str | None
    fields: dict[str, str] = attrs.field(eq=False, repr=False)

    @property
    def gpus_per_node(self) -> int:
        """The GPUs a node of the job asks for: ``TresPerNode=gres:gpu:2`` (22.05),
        ``gres/gpu:2`` (23.02 on), ``gres/gpu:a100:2`` with a type; 0 when it asks none."""
        for request in self.fields.get("TresPerNode", "").split(","):
            kind, *rest = request.replace("gres/", "gres:", 1).split(":")[1:] or [""]
            if kind == "gpu":
                return int(rest[-1]) if rest and rest[-1].isdigit() else 1
        return 0


@attrs.frozen
class AccountingRow:
    """One job (its allocation line, ``-X``) as ``sacct -n -P`` reports it."""

    job_id: str  # as sacct prints it: "12", "12_3"
    raw_id: str  # the numeric id
    name: str
    state: JobState
    exit_code: ExitCode
    reason: str | None
    nodes: str


def parse_state(text: str, command: str = "state") -> JobState:
    """``RUNNING``, ``CANCELLED by 1000`` (sacct), ``COMPLETED+`` (a truncated field)."""
    name, _, detail = text.strip().partition(" ")
    name = name.rstrip("+")
    if name not in KNOWN_STATES:
        raise SlurmParseError(command, text, f"unknown job state {name!r}")
    return JobState(name, detail.strip())


def parse_exit_code(text: str, command: str = "exit code") -> ExitCode:
    """``3:0`` (exit status 3), ``0:15`` (killed by SIGTERM)."""
    match = re.fullmatch(r"(\d+):(\d+)", text.strip())
    if match is None:
        raise SlurmParseError(command, text, "an exit code is status:signal")
    return ExitCode(int(match[1]), int(match[2]))


def reason_name(reason: str | None) -> str | None:
    """The reason's name without its detail: ``ReqNodeNotAvail`` for squeue's
    ``ReqNodeNotAvail, UnavailableNodes:n1`` and scontrol's ``ReqNodeNotAvail,_UnavailableNodes:n1``
    (scontrol replaces a described reason's spaces with ``_``; squeue prints it as it is)."""
    return reason.split(",", 1)[0].strip() if reason else None


def _reason(text: str) -> str | None:
    text = text.strip()
    return None if text in ("", "None", "(null)") else text


def parse_squeue(stdout: str) -> list[QueueRow]:
    rows = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 7)
        if len(parts) != 8:
            raise SlurmParseError("squeue", line, f"expected the 8 fields of {SQUEUE_FORMAT!r}")
        job_id, array_job, array_task, display_id, state, reason, nodes, name = parts
        if not job_id.isdigit():
            raise SlurmParseError("squeue", line, "the job id is not a number")
        is_array = array_task != "N/A"
        rows.append(QueueRow(job_id=job_id, array_job_id=array_job if is_array else None,
                             array_task=array_task if is_array else None, display_id=display_id,
                             state=parse_state(state, "squeue"), reason=_reason(reason), nodes=nodes, name=name))
    return rows


# A key of scontrol's one-line records: letters, digits and the few punctuation marks some
# keys carry (CPUs/Task, ReqB:S:C:T, AllocNode:Sid, JOB_GRES).
_KEY = r"[A-Za-z][A-Za-z0-9_/:]*"
_PAIR = re.compile(rf"({_KEY})=(.*?)(?= {_KEY}=|\s*$)")


def parse_scontrol_jobs(stdout: str) -> list[JobDetail]:
    """Each record of ``scontrol -o show job [id]``: one line per job, ``Key=value`` pairs
    separated by single spaces. A value runs up to the next `` Key=``, so a job name with
    spaces still reads whole. A reason with a description reads as scontrol prints it, its
    spaces made ``_`` (``reason_name`` gives its name)."""
    jobs = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        if line.strip() == "No jobs in the system":
            continue
        fields: dict[str, str] = {}
        for key, value in _PAIR.findall(line.strip()):
            # The first of a key counts: 25.11's SubmitLine (and a Command, a Comment) holds
            # whatever the user typed, " ExitCode=0:0" included, and all of those come later.
            fields.setdefault(key, value)
        for key in ("JobId", "JobName", "JobState", "Reason", "ExitCode"):
            if key not in fields:
                raise SlurmParseError("scontrol show job", line, f"no {key}=")
        restarts = fields.get("Restarts", "0")
        if not fields["JobId"].isdigit() or not restarts.isdigit():
            raise SlurmParseError("scontrol show job", line, "JobId and Restarts are numbers")
        jobs.append(JobDetail(
            job_id=fields["JobId"], name=fields["JobName"],
            state=parse_state(fields["JobState"], "scontrol show job"),
            reason=_reason(fields["Reason"]),
            exit_code=parse_exit_code(fields["ExitCode"], "scontrol show job"),
            restarts=int(restarts), nodes=_null(fields.get("NodeList", "")),
            array_job_id=fields.get("ArrayJobId"), array_task=fields.get("ArrayTaskId"), fields=fields))
    return jobs


def _null(text: str) -> str:
    return "" if text == "(null)" else text


def parse_sacct(stdout: str) -> list[AccountingRow]:
    rows = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != len(SACCT_FIELDS):
            raise SlurmParseError("sacct", line, f"expected the {len(SACCT_FIELDS)} fields {','.join(SACCT_FIELDS)}")
        job_id, raw_id, name, state, exit_code, reason, nodes = parts
        if not raw_id.isdigit():
            raise SlurmParseError("sacct", line, "JobIDRaw is not a number")
        rows.append(AccountingRow(job_id=job_id, raw_id=raw_id, name=name, state=parse_state(state, "sacct"),
                                  exit_code=parse_exit_code(exit_code, "sacct"), reason=_reason(reason),
                                  nodes="" if nodes == "None assigned" else nodes))
    return rows


def parse_sbatch_parsable(stdout: str) -> str:
    """``sbatch --parsable`` prints ``id`` or ``id;cluster`` (on a federation or with -M)."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    job_id = line.split(";", 1)[0]
    if not job_id.isdigit():
        raise SlurmParseError("sbatch --parsable", stdout, "expected a job id")
    return job_id


def parse_version(stdout: str) -> tuple[int, int, int]:
    """``squeue --version``: ``slurm 23.11.10`` (SchedMD's builds) or ``slurm-wlm 22.05.8``
    (Debian's); a pre-release such as ``25.11.0-0rc1`` reads as its release."""
    match = re.search(r"\b(\d+)\.(\d+)\.(\d+)", stdout)
    if match is None or not stdout.strip().startswith("slurm"):
        raise SlurmParseError("--version", stdout.strip(), "expected 'slurm X.Y.Z'")
    return int(match[1]), int(match[2]), int(match[3])
