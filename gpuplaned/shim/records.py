"""What the launcher, the shim and the daemon share: the job files and their records.

A job dir holds the job's ``stdout.log``/``stderr.log``, ``runtime.json`` (written once the
job's main process is started: ``runtime_record``), ``exit.json`` (written once it and all
its descendants are gone: ``exit_record``) and, only when something went wrong in the shim,
``shim.log``. The request a spawn carries is ``Spec``. The daemon imports this module for
the file names and reads the files through ``gpuplaned.launching.job_files``.

A request may name its attempt, ``job_id`` and ``attempt`` (the daemon's always do); both
records then carry them, so that a record read back is known to be that attempt's.
``EXIT_REASONS`` are the values of ``exit.json``'s ``reason``
(``gpuplaned.domain.failures.ExitReason``, which this package cannot import).

Standard library only, like the rest of the package.
"""

from __future__ import annotations

import json
import os
import signal
import time

TYPE_CHECKING = False  # typing costs the launcher, and so every shim, ~2 MB of heap
if TYPE_CHECKING:
    from typing import Any

STDOUT_FILE = "stdout.log"
STDERR_FILE = "stderr.log"
RUNTIME_FILE = "runtime.json"
EXIT_FILE = "exit.json"
SHIM_LOG_FILE = "shim.log"  # the shim's own complaints; absent when all went well
SPEC_FILE = "spec.json"  # a one-shot shim's request (a Slurm batch job's: see ``oneshot``)

EXIT_NOT_FOUND = 127
EXIT_CANNOT_EXECUTE = 126

EXIT_REASONS = ("exited", "signaled", "cancelled", "timeout", "spawn_failed")


class RequestError(ValueError):
    """A malformed request; the launcher answers ``ok: false`` and carries on."""


class Spec:
    """One validated spawn request."""

    __slots__ = ("id", "job_dir", "argv", "cwd", "env", "timeout_s", "grace_s", "job_id", "attempt")

    def __init__(self, req: dict[str, Any]) -> None:
        self.id = req.get("id")
        self.job_id = req.get("job_id")
        if self.job_id is not None and (not isinstance(self.job_id, str) or not self.job_id):
            raise RequestError(f"job_id must be a non-empty string or null, got {self.job_id!r}")
        self.attempt = req.get("attempt")
        if self.attempt is not None and (type(self.attempt) is not int or self.attempt < 1):
            raise RequestError(f"attempt must be a positive integer or null, got {self.attempt!r}")
        self.job_dir = req.get("job_dir")
        if not isinstance(self.job_dir, str) or not os.path.isabs(self.job_dir):
            raise RequestError(f"job_dir must be an absolute path, got {self.job_dir!r}")
        argv = req.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise RequestError(f"argv must be a non-empty list of strings, got {argv!r}")
        if not argv[0]:
            raise RequestError("argv[0] is empty")
        self.argv: list[str] = argv
        self.cwd = req.get("cwd")
        if not isinstance(self.cwd, str) or not os.path.isabs(self.cwd):
            raise RequestError(f"cwd must be an absolute path, got {self.cwd!r}")
        env = req.get("env")
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise RequestError("env must map strings to strings")
        for key in env:
            if not key or "=" in key:
                raise RequestError(f"bad env variable name {key!r}")
        # exec takes C strings: a NUL would fail it only in the shim, after the fork.
        for what, values in (("job_dir", [self.job_dir]), ("argv", argv), ("cwd", [self.cwd]),
                             ("env", [*env, *env.values()])):
            if any("\0" in v for v in values):
                raise RequestError(f"{what} cannot contain NUL bytes")
        self.env: dict[str, str] = env
        self.timeout_s = _number(req, "timeout_s", None)
        grace = _number(req, "grace_s", 10.0)
        self.grace_s: float = 10.0 if grace is None else grace

    def owner(self) -> dict[str, Any]:
        """The attempt the request names, as its records carry it ({} when it names none)."""
        return {} if self.job_id is None else {"job_id": self.job_id, "attempt": self.attempt}


def _number(req: dict[str, Any], key: str, default: float | None) -> float | None:
    value = req.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise RequestError(f"{key} must be a non-negative number or null, got {value!r}")
    return float(value)


def runtime_record(spec: Spec, *, shim_pid: int, shim_start_time: int | None, pid: int,
                   start_time: int | None, started_at: float,
                   placement: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``runtime.json`` holds: the job's shim and main process (pid plus start time, so
    a reused pid is never taken for them), as started for ``spec``.

    The main process leads a process group of its own, so its pid is the group's id.
    ``placement`` is where a one-shot shim runs: ``{"host": ..., "slurm_job_id": ...}``
    (absent from a local shim's record, where the node is the daemon's own).
    """
    return spec.owner() | (placement or {}) | {
        "id": spec.id,
        "shim_pid": shim_pid,
        "shim_start_time": shim_start_time,
        "pid": pid,
        "pgid": pid,
        "start_time": start_time,
        "argv": spec.argv,
        "cwd": spec.cwd,
        "env_keys": sorted(spec.env),
        "started_at": started_at,
        "timeout_s": spec.timeout_s,
        "grace_s": spec.grace_s,
    }


def exit_record(reason: str, *, exit_code: int | None, signum: int | None, pid: int | None,
                error: str | None = None, owner: dict[str, Any] | None = None,
                forwarded: list[str] | None = None) -> dict[str, Any]:
    """What ``exit.json`` holds (and the shim's exit line says): how the job's main process
    ended, now.

    ``reason`` is one of ``EXIT_REASONS``: ``exited``, ``signaled``, ``cancelled``,
    ``timeout`` or ``spawn_failed``; ``exit_code`` is set when the main process exited
    (127/126 for a spawn failure), ``signum`` when a signal killed it. ``owner`` is
    ``Spec.owner()``: whose exit it is. ``forwarded`` (a one-shot shim's record only) names
    the signals the shim passed on to the job, in order, such as Slurm's SIGUSR2 warning.
    """
    return (owner or {}) | ({} if forwarded is None else {"forwarded": forwarded}) | {
        "exit_code": exit_code,
        "signal": signum,
        "signal_name": signal_name(signum) if signum is not None else None,
        "reason": reason,
        "ended_at": time.time(),
        "pid": pid,
        "error": error,
    }


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def write_json_atomic(path: str, obj: dict[str, Any], *, sync: bool = False) -> None:
    """Write ``obj`` to ``path`` so readers see the old file or the whole new one.

    With ``sync`` the file is fsynced before the rename and its directory after it, which
    is what makes the new name itself durable (see ``sync_paths``).
    """
    tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        data = json.dumps(obj, sort_keys=True).encode() + b"\n"
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    if sync:
        sync_paths((os.path.dirname(path),))


def sync_paths(paths: tuple[str, ...] | list[str]) -> None:
    """fsync each file or directory in ``paths`` (a directory's fsync makes its new names durable)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def record_spawn_failure(
    job_dir: str, exit_code: int, message: str, *, only_if_missing: bool = False,
    owner: dict[str, Any] | None = None,
) -> None:
    """Write ``exit.json`` (reason ``spawn_failed``, fsynced) for a job that was never
    started; what cannot be written goes to ``shim.log``, where possible."""
    path = os.path.join(job_dir, EXIT_FILE)
    if only_if_missing and os.path.exists(path):
        return
    try:
        os.makedirs(job_dir, mode=0o700, exist_ok=True)
        write_json_atomic(path, exit_record("spawn_failed", exit_code=exit_code, signum=None, pid=None,
                                            error=message, owner=owner),
                          sync=True)  # rare, and the only account of what went wrong
    except (OSError, ValueError) as exc:  # ValueError: a path no system call takes
        shim_log(job_dir, f"cannot record the spawn failure ({message}): {exc}")


def orphan_record(info: Any) -> dict[str, Any]:
    """What ``exit.json`` would have said of a job's main process that outlived its shim,
    from the launcher's ``waitid`` of it."""
    signaled = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
    return exit_record("signaled" if signaled else "exited",
                       exit_code=None if signaled else info.si_status,
                       signum=info.si_status if signaled else None,
                       pid=info.si_pid, error="its shim died first")


def shim_log(job_dir: str, message: str) -> None:
    """Append ``message`` to the job dir's ``shim.log``; quietly nothing where it cannot."""
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()}: {message}\n"
    try:
        fd = os.open(os.path.join(job_dir, SHIM_LOG_FILE),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    except (OSError, ValueError):
        return
    try:
        os.write(fd, line.encode(errors="replace"))
    except OSError:
        pass
    finally:
        os.close(fd)
