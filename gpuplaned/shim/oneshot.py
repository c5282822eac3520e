"""The one-shot shim: one job, supervised by the process that starts it (a Slurm batch job's).

``python -I -S /abs/path/gpuplaned/shim/__main__.py --oneshot <attempt dir>`` is what a batch
script ``exec``s (``gpuplaned.slurm.batch_job.shim_argv``), so this process is the batch
step's own and Slurm's signals reach it. It reads ``<attempt dir>/spec.json`` (the spawn
request's fields but ``job_dir``: ``argv``, ``cwd``, ``env``, ``timeout_s``, ``grace_s``,
``job_id``, ``attempt``; ``gpuplaned.slurm.batch_job.write_spec`` writes it), runs the job as
a forked local shim does (steps 2 to 5 of the package docstring, with ``job``'s helpers),
writes the same ``runtime.json``/``exit.json``/logs into the attempt dir, and exits with the
job's status (its exit code, 128+N for a signal N), so Slurm's ExitCode agrees.

What differs from a local shim:

- No launcher and no requests: SIGTERM (``scancel``, Slurm's preemption or time limit) is
  always a cancel (reason ``cancelled``). SIGUSR2 (``--signal=B:USR2@<s>``: Slurm's warning
  before either) goes on to the job's process group, supervision carries on, and
  ``exit.json``'s ``forwarded`` names each signal passed on.
- The job's environment is spec.json's plus Slurm's: every ``SLURM_*`` variable and the GPU
  binding (``GPU_BINDING``) of this process, which win over spec.json's.
- ``runtime.json`` also says where the job runs: ``host`` and ``slurm_job_id``.
- Every record is fsynced, and its directory, as soon as it is written: the attempt dir is
  on a filesystem the cluster shares, read by a daemon on another host.
- A requeued batch job (Slurm runs the script again with ``SLURM_RESTART_COUNT`` = k > 0, after
  a preemption) runs nothing and exits 0 at once, touching no file: the daemon records the
  preempted attempt as PREEMPTED, cancels Slurm's rerun, and makes the next attempt itself
  (the job's ``on_preempted`` policy), so no run of the job happens outside its attempts.
- A spec.json that is missing (exit 127) or unusable (126) is a spawn failure, as a command
  that cannot be started is: a message on stderr (Slurm's ``slurm-<id>.err``) and an
  ``exit.json`` with reason ``spawn_failed``.

Standard library only, like the rest of the package.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from .job import (
    SHIM_IGNORES,
    WAITED,
    _make_job_dir,
    _open_logs,
    _remove_records,
    _SpawnFailed,
    _start_child,
    _supervise,
)
from .procs import PR_SET_CHILD_SUBREAPER, close_fds_except, load_libc, read_proc_stat
from .records import (
    EXIT_CANNOT_EXECUTE,
    EXIT_FILE,
    EXIT_NOT_FOUND,
    RUNTIME_FILE,
    SPEC_FILE,
    RequestError,
    Spec,
    exit_record,
    record_spawn_failure,
    runtime_record,
    shim_log,
    signal_name,
    sync_paths,
    write_json_atomic,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

FORWARDED = frozenset({signal.SIGUSR2})  # Slurm's warning (--signal=B:USR2@<s>), for the job
GPU_BINDING = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES")
SPEC_KEYS = frozenset({"argv", "cwd", "env", "timeout_s", "grace_s", "job_id", "attempt"})
RESTART_VAR = "SLURM_RESTART_COUNT"


class Refused(Exception):
    """The attempt cannot be started: ``exit_code`` 127 (nothing to run) or 126."""

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.message = message


def main(attempt_dir: str) -> int:
    """Run the attempt of ``attempt_dir``; returns this process's exit status (the job's)."""
    # Before anything can arrive: Slurm's signals are taken from sigtimedwait, never handled.
    signal.pthread_sigmask(signal.SIG_BLOCK, WAITED | FORWARDED)
    for signum in SHIM_IGNORES:
        signal.signal(signum, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _detach_stdin()
    attempt_dir = os.path.normpath(os.path.abspath(attempt_dir))
    try:
        restarts = restart_count(os.environ)
    except Refused as refusal:
        return _complain(refusal)  # the attempt's own record, if any, is the first run's: left alone
    if restarts:
        sys.stderr.write(f"gpuplane shim: Slurm requeued this batch job ({RESTART_VAR}={restarts}); GPUPlane "
                         f"runs the job's next attempt itself, so this run does nothing\n")
        return 0
    try:
        spec = read_spec(attempt_dir)
    except Refused as refusal:
        record_spawn_failure(attempt_dir, refusal.exit_code, refusal.message)
        return _complain(refusal)
    spec.env = job_env(spec.env, os.environ)
    return run(spec)


def restart_count(environ: Mapping[str, str]) -> int:
    """How many times Slurm has requeued this batch job (``SLURM_RESTART_COUNT``; 0 when unset).

    Raises:
        Refused: the variable is not a whole number.
    """
    value = environ.get(RESTART_VAR, "0").strip() or "0"
    if not value.isdigit():
        raise Refused(EXIT_CANNOT_EXECUTE, f"{RESTART_VAR} must be a whole number, got {value!r}")
    return int(value)


def read_spec(attempt_dir: str) -> Spec:
    """The request in ``attempt_dir/spec.json``, to run with its files in ``attempt_dir``.

    Raises:
        Refused: the file is missing (127) or unreadable, not JSON, or not a valid request (126).
    """
    path = os.path.join(attempt_dir, SPEC_FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise Refused(EXIT_NOT_FOUND, f"{path} not found: nothing to run") from None
    except OSError as exc:
        raise Refused(EXIT_CANNOT_EXECUTE, f"cannot read {path}: {exc}") from None
    try:
        request = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise Refused(EXIT_CANNOT_EXECUTE, f"{path} is not JSON: {exc}") from None
    if not isinstance(request, dict):
        raise Refused(EXIT_CANNOT_EXECUTE, f"{path} must hold a JSON object, got {type(request).__name__}")
    unknown = sorted(set(request) - SPEC_KEYS)
    if unknown:
        raise Refused(EXIT_CANNOT_EXECUTE, f"{path}: unknown field(s) {', '.join(map(repr, unknown))}")
    if "argv" not in request or "cwd" not in request:
        raise Refused(EXIT_CANNOT_EXECUTE, f"{path} must name argv and cwd")
    try:
        spec = Spec({"env": {}, **request, "job_dir": attempt_dir})
    except RequestError as exc:
        raise Refused(EXIT_CANNOT_EXECUTE, f"{path}: {exc}") from None
    if spec.job_id is not None:
        spec.id = f"{spec.job_id}/{spec.attempt}"  # as the runner names a local attempt's spawn
    return spec


def job_env(env: Mapping[str, str], ours: Mapping[str, str]) -> dict[str, str]:
    """``env`` plus Slurm's part of ``ours``: every ``SLURM_*`` variable and the GPU binding,
    which win (Slurm placed the job; spec.json was written before it did)."""
    slurm = {k: v for k, v in ours.items() if k.startswith("SLURM_") or k in GPU_BINDING}
    return {**env, **slurm}


def run(spec: Spec) -> int:
    """Start ``spec``'s job, supervise it to its end, record it; returns the job's status."""
    try:
        grown = _make_job_dir(spec.job_dir)
        if not grown:
            _remove_records(spec.job_dir)  # of an earlier run of this same batch script
        out_fd, err_fd = _open_logs(spec.job_dir)
    except OSError as exc:
        return _fail(spec, Refused(EXIT_CANNOT_EXECUTE, f"cannot prepare the attempt dir {spec.job_dir!r}: {exc}"))
    libc = load_libc()
    if libc is None or libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        shim_log(spec.job_dir, "cannot become a child subreaper")  # the group is still reached
    me = os.getpid()
    shim_stat = read_proc_stat(me)
    try:
        pid, started_mono, started_at = _start_child(spec, out_fd, err_fd)
    except _SpawnFailed as failure:
        return _fail(spec, Refused(failure.exit_code, failure.message))
    finally:
        os.close(out_fd)
        os.close(err_fd)
    child_stat = read_proc_stat(pid)
    import socket  # here, not above: the launcher (which imports this module) has no use for it

    placement = {"host": socket.gethostname(), "slurm_job_id": os.environ.get("SLURM_JOB_ID")}
    runtime = runtime_record(spec, shim_pid=me, shim_start_time=shim_stat[1] if shim_stat else None,
                             pid=pid, start_time=child_stat[1] if child_stat else None,
                             started_at=started_at, placement=placement)
    try:
        write_json_atomic(os.path.join(spec.job_dir, RUNTIME_FILE), runtime, sync=True)
        sync_paths(grown)  # the attempt dir's own name, where this run made it
    except OSError as exc:  # the job runs anyway; say so where someone will look
        shim_log(spec.job_dir, f"cannot write {RUNTIME_FILE}: {exc}")
    forwarded: list[int] = []
    status, reason, _ = _supervise(pid, started_mono, spec.timeout_s, spec.grace_s,
                                   forward=FORWARDED, forwarded=forwarded)
    if os.WIFEXITED(status):
        exit_code, signum = os.WEXITSTATUS(status), None
    else:
        exit_code, signum = None, os.WTERMSIG(status)
    reason = reason or ("exited" if signum is None else "signaled")
    record = exit_record(reason, exit_code=exit_code, signum=signum, pid=pid, owner=spec.owner(),
                         forwarded=[signal_name(s) for s in forwarded])
    try:
        write_json_atomic(os.path.join(spec.job_dir, EXIT_FILE), record, sync=True)
    except OSError as exc:
        sys.stderr.write(f"gpuplaned shim --oneshot: cannot write {EXIT_FILE} in {spec.job_dir}: {exc}\n")
    return exit_code if signum is None else 128 + signum


def _fail(spec: Spec, refusal: Refused) -> int:
    record_spawn_failure(spec.job_dir, refusal.exit_code, refusal.message, owner=spec.owner())
    return _complain(refusal)


def _complain(refusal: Refused) -> int:
    try:
        sys.stderr.write(f"gpuplaned shim --oneshot: {refusal.message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # no stderr to tell: exit.json and the status say it
    return refusal.exit_code


def _detach_stdin() -> None:
    """stdin from /dev/null (the job's, which inherits it) and no fd but 0-2 left open: what
    the batch step handed us is not the job's. stdout/stderr stay: Slurm's own output files,
    where this shim's complaints go."""
    devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    os.dup2(devnull, 0)
    close_fds_except([])
