"""The daemon's side of job start-up: a client for the launcher, and the job-file helpers.

Owns the one long-lived launcher process (``gpuplaned/shim.py --serve``, see that module's
theory of operation) that runs each job under a shim: one job at a time per shim, and a
shim whose job has ended takes the next. Jobs never depend on this side: a shim is in its
own session, writes the job's output straight to files and records the exit status in
``exit.json``, so the daemon (and the launcher) may die and come back at any time. While
the launcher lives, ``Launcher.wait_exit`` hears of each end from it (the record itself,
before the file is even read) and ``Launcher.cancel`` cancels by request id, so a cancel
never reaches a later job of the same shim. What the runner needs otherwise is here, as
plain functions over the job dir and ``/proc``:

- ``read_runtime`` / ``read_exit``: the shim's ``runtime.json`` and ``exit.json``;
- ``process_start_time`` / ``is_same_process``: a pid plus its start time names one
  process, so a reused pid is never mistaken for a job;
- ``wait_process_exit``: wait for a process that is not our child (pidfd);
- ``signal_shim``: cancel (SIGTERM) a job through its shim, refusing a reused pid (only for
  a job whose launcher is gone, and whose ``exit.json`` is not written: a shim takes no new
  job once its launcher is gone, nor before that file is written);
- ``job_processes`` / ``signal_process``: what is left of a job whose shim died first, to
  follow and to stop (``Launcher.orphan_exit`` tells how its main process ended, when the
  launcher, their subreaper, reaped it);
- ``classify_failure``, ``failure_line`` and ``tail_text``: the failure reason for a
  finished job, and the line of its stderr that tells why.

Why a launcher rather than one ``python shim.py`` per job: an interpreter start alone is
~35 ms; a fork of the warm launcher is about a millisecond, and the launcher forks its
shims ahead of time. Spawns are pipelined: the launcher hands a request to a shim and reads
the next one while the first shim is still setting up, so many spawns may be in flight
and their replies come back in the order the shims finish (each request carries a ``seq``
that its reply echoes).

Errors: ``SpawnError`` (the command could not be started; the launcher's message, and
``exit.json`` has reason ``spawn_failed``), ``LauncherGone`` (the launcher died or was
closed; the runner restarts it), ``CorruptRecord`` (a job file that is not what the shim
writes). All are ``LauncherError``\\ s except ``CorruptRecord``, a ``ValueError``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from gpuplaned import shim as _shim
from gpuplaned.protocol.discovery import pid_alive

log = logging.getLogger("gpuplaned.runner")

SHIM_PATH = Path(_shim.__file__).resolve()
STDOUT_FILE = _shim.STDOUT_FILE
STDERR_FILE = _shim.STDERR_FILE
RUNTIME_FILE = _shim.RUNTIME_FILE
EXIT_FILE = _shim.EXIT_FILE
REPORT_TIMEOUT_S = _shim.REPORT_TIMEOUT_S
PREFORK = _shim.PREFORK

CLOSE_GRACE_S = 2.0  # after closing its stdin, how long the launcher gets to exit
POLL_INTERVAL_S = 0.2  # wait_process_exit without pidfds
TAIL_BYTES = 64 * 1024
OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError")
MAX_LOG_LINE = 500  # characters of the line that tells why a job failed
_MAX_REPLY = 1024 * 1024


class LauncherError(Exception):
    """Base of the launcher client's errors."""


class SpawnError(LauncherError):
    """The launcher could not start the command; ``exit.json`` records it too.

    Attributes:
        job_id: the request's id.
        message: the launcher's explanation, e.g. ``argv[0] 'nosuch' not found: ...``.
    """

    def __init__(self, message: str, job_id: str) -> None:
        super().__init__(message)
        self.message = message
        self.job_id = job_id


class LauncherGone(LauncherError):
    """The launcher process died or was closed. Jobs it started are unaffected."""


class CorruptRecord(ValueError):
    """A job file (``runtime.json``, ``exit.json``) exists but is not what a shim writes."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def _str_dict(value: Mapping[str, str]) -> dict[str, str]:
    return dict(value)


@attrs.frozen
class SpawnRequest:
    """One command to start. ``env`` is the job's full environment (PATH lookup uses it)."""

    id: str
    job_dir: Path = attrs.field(converter=Path)
    argv: tuple[str, ...] = attrs.field(converter=tuple)
    cwd: Path = attrs.field(converter=Path)
    env: dict[str, str] = attrs.field(converter=_str_dict)
    timeout_s: float | None = None
    grace_s: float = 10.0  # SIGTERM -> SIGKILL on cancel and timeout


@attrs.frozen
class Spawned:
    """A started job: its shim and its main process (also the process group leader)."""

    id: str
    shim_pid: int
    shim_start_time: int | None  # clock ticks since boot, /proc/<pid>/stat field 22
    pid: int
    pgid: int
    start_time: int | None
    # Wall clock (epoch seconds) just before the exec; ``runtime.json``'s ``started_at``.
    # None only from a launcher that does not report it.
    started_at: float | None = None


@attrs.frozen
class Runtime:
    """``runtime.json``: written by the shim once the command has been exec'd."""

    id: str | None
    shim_pid: int
    shim_start_time: int | None
    pid: int
    pgid: int
    start_time: int | None
    argv: tuple[str, ...]
    cwd: str
    env_keys: tuple[str, ...]
    started_at: float  # wall clock, epoch seconds (data only)
    timeout_s: float | None
    grace_s: float


@attrs.frozen
class ExitRecord:
    """``exit.json``: written by the shim after the job and all its descendants are gone.

    ``reason`` is one of ``exited``, ``signaled``, ``cancelled``, ``timeout``,
    ``spawn_failed``. ``exit_code`` is set when the main process exited (127/126 for a
    spawn failure), ``signal`` when a signal killed it.
    """

    exit_code: int | None
    signal: int | None
    signal_name: str | None
    reason: str
    ended_at: float  # wall clock, epoch seconds (data only)
    pid: int | None
    error: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0 and self.signal is None and self.reason == "exited"


REASONS = frozenset({"exited", "signaled", "cancelled", "timeout", "spawn_failed"})


class _Waiter:
    __slots__ = ("seq", "reply")

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.reply: dict[str, Any] | None = None


class Launcher:
    """A running launcher process. Get one from ``open_launcher()``.

    Requests may be issued from many tasks at once, and the launcher works on them all at
    once: a slow spawn does not hold up the others. Each request carries a fresh ``seq``
    that the launcher echoes in its reply, and joins a table of waiters when it is written;
    whichever waiter is not blocked elsewhere reads the next reply and hands it to the
    waiter with that ``seq`` (a reply without one goes to the oldest waiter, as from a
    launcher that answers in order). A caller that is cancelled after its request went out
    leaves its waiter behind, so its reply is still consumed and never taken for another's.
    """

    def __init__(self, proc: trio.Process) -> None:
        self._proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self._stdin = proc.stdin
        self._stdout = proc.stdout
        self._send_lock = trio.Lock()
        self._pending: dict[int, _Waiter] = {}  # by seq, oldest first
        self._next_seq = 0
        self._buf = bytearray()
        self._reading = False
        self._progress = trio.Event()
        self._gone: str | None = None  # why no new request may be sent
        self._eof = False  # no more replies will come
        # Exit events by request id, until ``wait_exit`` takes them: a value of None means
        # the shim ended without a record.
        self._exits: dict[str, ExitRecord | None] = {}

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def gone(self) -> bool:
        return self._gone is not None

    async def ping(self) -> None:
        """Round-trip one request.

        Raises:
            LauncherGone: the launcher has exited or was closed.
        """
        reply = await self._call({"op": "ping"})
        if reply.get("pong") is not True:
            self._break(f"unexpected reply to ping: {reply!r}")
            raise LauncherGone(self._gone)

    async def spawn(self, request: SpawnRequest) -> Spawned:
        """Start ``request.argv`` through a new shim; returns once the command is exec'd.

        ``request.job_dir`` need not exist: the shim creates it (mode 0700; parents as
        needed). ``runtime.json`` is in the job dir by the time this returns (fsynced once
        the job has run ``shim.DURABLE_AFTER_S``), and ``Spawned.started_at`` is its
        ``started_at``. ``wait_exit(Spawned.id)`` tells of its end.

        Raises:
            SpawnError: no such command, no such cwd, permission denied, a job dir that
                cannot be created, a bad request, a shim that did not report within the
                launcher's report timeout (it and any job it started were killed);
                ``exit.json`` (reason ``spawn_failed``) records it as well, where the job dir
                can be written.
            LauncherGone: the launcher has exited or was closed (nothing was started, or,
                if it died mid-request, look for ``runtime.json``).

        Cancellation: a request already written is still carried out; if the caller is
        cancelled while waiting for the reply the job may be running, and its
        ``runtime.json`` is the record.
        """
        reply = await self._call({
            "op": "spawn",
            "id": request.id,
            "job_dir": str(request.job_dir),
            "argv": list(request.argv),
            "cwd": str(request.cwd),
            "env": request.env,
            "timeout_s": request.timeout_s,
            "grace_s": request.grace_s,
        })
        if reply.get("id") != request.id:
            self._break(f"reply for {reply.get('id')!r} to the request for {request.id!r}")
            raise LauncherGone(self._gone)
        if not reply.get("ok"):
            raise SpawnError(str(reply.get("error", "spawn failed")), request.id)
        try:
            return Spawned(
                id=request.id,
                shim_pid=_int(reply, "shim_pid"),
                shim_start_time=_int(reply, "shim_start_time", optional=True),
                pid=_int(reply, "pid"),
                pgid=_int(reply, "pgid"),
                start_time=_int(reply, "start_time", optional=True),
                started_at=_float(reply, "started_at", optional=True) if "started_at" in reply
                else None,
            )
        except _Invalid as exc:
            self._break(f"malformed spawn reply {reply!r}: {exc}")
            raise LauncherGone(self._gone) from None

    async def cancel(self, request_id: str) -> bool:
        """Cancel (SIGTERM, grace period, SIGKILL) a job this launcher started; False when it
        is not running (it has ended, or this launcher never started it).

        Use this, not a signal to the shim's pid, for the jobs of a live launcher: the
        launcher tells the shim which job the cancel is for, and a shim that has moved on
        to another job ignores it.

        Raises:
            LauncherGone: the launcher has exited or was closed.
        """
        reply = await self._call({"op": "cancel", "id": request_id})
        return reply.get("cancelled") is True

    async def orphan_exit(self, request_id: str) -> ExitRecord | None:
        """How a job this launcher started ended after its shim died first (``wait_exit``
        gave None): its main process's exit, which the launcher reaped as their subreaper.

        Ask once none of the job's processes is left (``job_processes``). Returns None when
        the launcher does not know: the job was never re-parented to it, or is still running.
        Each end is told once.

        Raises:
            LauncherGone: the launcher has exited or was closed.
        """
        reply = await self._call({"op": "orphan", "id": request_id})
        data = reply.get("exit")
        if not isinstance(data, dict):
            return None
        try:
            return exit_record(data)
        except _Invalid as exc:
            log.warning("job %s: the launcher's record of its end is malformed (%s)", request_id, exc)
            return None

    async def wait_exit(self, request_id: str) -> ExitRecord | None:
        """Wait for the end of a job this launcher started (``Spawned.id``).

        Returns its exit record (what ``exit.json`` holds), or None when its shim ended
        without one (it was killed; ``exit.json`` may still tell, or nothing does).

        A malformed record is logged and taken as None.

        Raises:
            LauncherGone: the launcher went away first; the job is not affected (watch its
                shim's pid instead).

        Cancellation: safe; an exit that arrives later is kept for the next call.
        """
        await self._read_until(lambda: request_id in self._exits)
        return self._exits.pop(request_id)

    async def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        self._next_seq += 1
        waiter = _Waiter(self._next_seq)
        data = json.dumps(message | {"seq": waiter.seq}).encode() + b"\n"
        async with self._send_lock:
            if self._gone is not None:
                raise LauncherGone(self._gone)
            await trio.lowlevel.checkpoint_if_cancelled()
            self._pending[waiter.seq] = waiter
            try:
                # A half-written request would put the stream out of step for good. The
                # launcher reads its stdin between any two steps of its work, so this
                # finishes promptly unless it is stopped, and ends if it dies.
                with trio.CancelScope(shield=True):
                    await self._stdin.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                del self._pending[waiter.seq]
                self._set_gone(f"launcher pid {self.pid} stopped reading requests ({exc!r})")
                raise LauncherGone(self._gone) from exc
        await self._read_until(lambda: waiter.reply is not None)
        assert waiter.reply is not None
        return waiter.reply

    async def _read_until(self, done: Callable[[], bool]) -> None:
        """Take a turn at reading the launcher's lines (one task reads, the others wait for
        its progress) until ``done()``.

        Raises:
            LauncherGone: the launcher's output ended first. (Lines written before it went
                are still handed out.)
        """
        while not done():
            if self._reading:
                await self._progress.wait()
            elif self._eof and b"\n" not in self._buf:
                raise LauncherGone(self._gone)
            else:
                await self._read_reply()

    async def _read_reply(self) -> None:
        """Read one reply line and hand it to its waiter."""
        self._reading = True
        try:
            while (nl := self._buf.find(b"\n")) < 0:
                if len(self._buf) > _MAX_REPLY:
                    self._break("reply line too long")
                    return
                try:
                    chunk = await self._stdout.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    chunk = b""
                if not chunk:
                    self._eof = True
                    status = self._proc.poll()
                    self._set_gone(
                        f"launcher pid {self.pid} exited"
                        + (f" with status {status}" if status is not None else "")
                    )
                    return
                self._buf += chunk
            line = bytes(self._buf[:nl])
            del self._buf[: nl + 1]
            try:
                reply = json.loads(line)
            except ValueError:
                reply = None
            if isinstance(reply, dict) and reply.get("event") == "exit":
                self._on_exit_event(reply, line)
                return
            if not isinstance(reply, dict) or not self._pending:
                self._break(f"unexpected reply {line[:200]!r}")
                return
            seq = reply.pop("seq", None)
            if seq is None:  # a launcher that answers in order
                seq = next(iter(self._pending))
            waiter = self._pending.pop(seq, None) if isinstance(seq, int) else None
            if waiter is None:
                self._break(f"reply to no request {line[:200]!r}")
                return
            waiter.reply = reply
        finally:
            self._reading = False
            self._progress.set()
            self._progress = trio.Event()

    def _on_exit_event(self, event: dict[str, Any], line: bytes) -> None:
        request_id, data = event.get("id"), event.get("exit")
        if not isinstance(request_id, str) or not (data is None or isinstance(data, dict)):
            self._break(f"malformed exit event {line[:200]!r}")
            return
        try:
            self._exits[request_id] = None if data is None else exit_record(data)
        except _Invalid as exc:
            log.warning("job %s: its shim's exit line is malformed (%s); reading exit.json instead",
                        request_id, exc)
            self._exits[request_id] = None

    def _set_gone(self, why: str) -> None:
        if self._gone is None:
            self._gone = why
        self._progress.set()
        self._progress = trio.Event()

    def _break(self, why: str) -> None:
        """The stream can no longer be trusted: stop the launcher (jobs are unaffected)."""
        self._set_gone(f"launcher pid {self.pid} protocol error: {why}")
        self._eof = True
        self._buf.clear()
        with contextlib.suppress(OSError):
            self._proc.kill()

    async def aclose(self) -> None:
        """Close stdin, give the launcher ``CLOSE_GRACE_S`` to exit, then kill it. Shielded."""
        with trio.CancelScope(shield=True):
            self._set_gone("launcher closed")
            await self._stdin.aclose()
            with trio.move_on_after(CLOSE_GRACE_S):
                await self._proc.wait()
            if self._proc.returncode is None:
                self._proc.kill()
                await self._proc.wait()
            await self._stdout.aclose()


@contextlib.asynccontextmanager
async def open_launcher(
    *,
    python: str | os.PathLike[str] | None = None,
    report_timeout_s: float | None = None,
    prefork: int | None = None,
) -> AsyncIterator[Launcher]:
    """Start a launcher; ready (it has answered a ping) when the body runs.

    Args:
        python: the interpreter to run ``shim.py`` with; default ``sys.executable``. It
            runs isolated (``-I -S``): the shim needs only the standard library.
        report_timeout_s: how long a shim may take to start its job and write
            ``runtime.json`` before the spawn fails and the shim is killed; default
            ``REPORT_TIMEOUT_S`` (30 s).
        prefork: idle shims the launcher keeps forked ahead of requests; default
            ``PREFORK`` (2); 0 forks each on its request.

    Resource handling: on exit the launcher's stdin is closed, it gets ``CLOSE_GRACE_S`` to
    exit and is killed otherwise. Jobs it started keep running.

    Raises:
        LauncherGone: the launcher exited before answering.
    """
    argv = [os.fspath(python or sys.executable), "-I", "-S", str(SHIM_PATH), "--serve"]
    if report_timeout_s is not None:
        if not report_timeout_s > 0:
            raise ValueError(f"report_timeout_s must be positive, got {report_timeout_s!r}")
        argv += ["--report-timeout", repr(float(report_timeout_s))]
    if prefork is not None:
        if prefork < 0:
            raise ValueError(f"prefork must be >= 0, got {prefork!r}")
        argv += ["--prefork", str(int(prefork))]
    proc = await trio.lowlevel.open_process(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,  # a Ctrl-C meant for the daemon's terminal must not reach it
        close_fds=True,
    )
    launcher = Launcher(proc)
    try:
        await launcher.ping()
        yield launcher
    finally:
        await launcher.aclose()


# ---------------------------------------------------------------------------------------
# Job files.


class _Invalid(ValueError):
    pass


def _field(data: Mapping[str, Any], key: str) -> Any:
    if key not in data:
        raise _Invalid(f"missing {key!r}")
    return data[key]


def _int(data: Mapping[str, Any], key: str, *, optional: bool = False) -> Any:
    value = _field(data, key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"{key!r} must be an integer, got {value!r}")
    return value


def _float(data: Mapping[str, Any], key: str, *, optional: bool = False) -> Any:
    value = _field(data, key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Invalid(f"{key!r} must be a number, got {value!r}")
    return float(value)


def _str(data: Mapping[str, Any], key: str, *, optional: bool = False) -> Any:
    value = _field(data, key) if not optional else data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _Invalid(f"{key!r} must be a string, got {value!r}")
    return value


def _strs(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = _field(data, key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Invalid(f"{key!r} must be a list of strings, got {value!r}")
    return tuple(value)


def _load(path: Path) -> dict[str, Any] | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise CorruptRecord(path, f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CorruptRecord(path, "not a JSON object")
    return data


def read_runtime(job_dir: str | os.PathLike[str]) -> Runtime | None:
    """``job_dir/runtime.json``; None while it does not exist.

    Raises:
        CorruptRecord: the file is not valid JSON or lacks a field.
    """
    path = Path(job_dir) / RUNTIME_FILE
    data = _load(path)
    if data is None:
        return None
    try:
        return Runtime(
            id=_str(data, "id", optional=True),
            shim_pid=_int(data, "shim_pid"),
            shim_start_time=_int(data, "shim_start_time", optional=True),
            pid=_int(data, "pid"),
            pgid=_int(data, "pgid"),
            start_time=_int(data, "start_time", optional=True),
            argv=_strs(data, "argv"),
            cwd=_str(data, "cwd"),
            env_keys=_strs(data, "env_keys"),
            started_at=_float(data, "started_at"),
            timeout_s=_float(data, "timeout_s", optional=True),
            grace_s=_float(data, "grace_s"),
        )
    except _Invalid as exc:
        raise CorruptRecord(path, str(exc)) from None


def read_exit(job_dir: str | os.PathLike[str]) -> ExitRecord | None:
    """``job_dir/exit.json``; None while the job (or its clean-up) is still running.

    Raises:
        CorruptRecord: the file is not valid JSON, lacks a field or has an unknown reason.
    """
    path = Path(job_dir) / EXIT_FILE
    data = _load(path)
    if data is None:
        return None
    try:
        return exit_record(data)
    except _Invalid as exc:
        raise CorruptRecord(path, str(exc)) from None


def exit_record(data: Mapping[str, Any]) -> ExitRecord:
    """An ``ExitRecord`` from what a shim writes (``exit.json``, or its exit line).

    Raises:
        ValueError: a field is missing or of the wrong type, or the reason is unknown.
    """
    reason = _str(data, "reason")
    if reason not in REASONS:
        raise _Invalid(f"unknown reason {reason!r}")
    return ExitRecord(
        exit_code=_int(data, "exit_code", optional=True),
        signal=_int(data, "signal", optional=True),
        signal_name=_str(data, "signal_name", optional=True),
        reason=reason,
        ended_at=_float(data, "ended_at"),
        pid=_int(data, "pid", optional=True),
        error=_str(data, "error", optional=True),
    )


def tail_text(path: str | os.PathLike[str], max_bytes: int = TAIL_BYTES) -> str:
    """The last ``max_bytes`` of a log as text ("" if it does not exist).

    A cut-off first line is dropped when the tail holds a newline; undecodable bytes are
    replaced.
    """
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes)
            f.seek(start)
            data = f.read(max_bytes)
    except FileNotFoundError:
        return ""
    if start > 0:
        nl = data.find(b"\n")
        if 0 <= nl < len(data) - 1:
            data = data[nl + 1:]
    return data.decode("utf-8", errors="replace")


def classify_failure(
    record: ExitRecord, stderr_tail: str = "", oom_killed: bool = False
) -> tuple[str | None, str | None]:
    """Why a finished job failed, as ``(failure_reason, detail)``; ``(None, None)`` on success.

    ``failure_reason`` is one of ``SPAWN_FAILED``, ``CANCELLED`` (the caller maps it to the
    CANCELLED state), ``TIMEOUT``, ``OOM`` (``oom_killed`` from the kernel's cgroup
    counters, or an out-of-memory message in ``stderr_tail``), ``SIGNAL(SIGSEGV)``-style,
    or ``EXIT_CODE``. A job that exited 0 succeeded whatever its stderr says.
    """
    if record.reason == "spawn_failed":
        return "SPAWN_FAILED", record.error or f"exit code {record.exit_code}"
    if record.reason == "cancelled":
        return "CANCELLED", "cancelled"
    if record.reason == "timeout":
        return "TIMEOUT", "timed out"
    if record.exit_code == 0 and record.signal is None:
        return None, None
    if oom_killed:
        return "OOM", "killed by the kernel's OOM killer"
    for marker in OOM_MARKERS:
        if marker in stderr_tail:
            return "OOM", f"stderr: {marker}"
    if record.signal is not None:
        name = record.signal_name or _shim.signal_name(record.signal)
        return f"SIGNAL({name})", f"killed by {name}"
    return "EXIT_CODE", f"exit code {record.exit_code}"


def failure_line(stderr_tail: str, failure_reason: str | None) -> str | None:
    """The line of a failed job's stderr that tells why: for ``OOM`` the last one with an
    out-of-memory message, else the last one that is not blank; None when stderr is empty.
    At most ``MAX_LOG_LINE`` characters."""
    lines = [line.strip() for line in stderr_tail.splitlines() if line.strip()]
    if failure_reason == "OOM":
        lines = [line for line in lines if any(marker in line for marker in OOM_MARKERS)] or lines
    return lines[-1][:MAX_LOG_LINE] if lines else None


# ---------------------------------------------------------------------------------------
# Processes that are not our children.


def process_start_time(pid: int) -> int | None:
    """``/proc/<pid>/stat`` field 22 (clock ticks since boot); None if there is no such pid."""
    stat = _shim.read_proc_stat(pid)
    return None if stat is None else stat[1]


def is_same_process(pid: int, start_time: int | None) -> bool:
    """True while ``pid`` is the live (not zombie) process that started at ``start_time``.

    A pid that was reused by another process, or one that has exited, gives False.
    """
    if start_time is None:
        return False
    stat = _shim.read_proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X") and stat[1] == start_time


def _open_pidfd(pid: int) -> int | None:
    """A pidfd for ``pid``; None when pidfds are unavailable.

    Raises:
        ProcessLookupError: there is no such process.
    """
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        raise
    except (AttributeError, OSError):
        return None


async def wait_process_exit(pid: int, start_time: int | None = None) -> None:
    """Return once ``pid`` has exited; it need not be our child.

    With ``start_time``, a pid that already names another process counts as exited. Uses a
    pidfd; polls every ``POLL_INTERVAL_S`` where pidfds are unavailable.

    Cancellation: safe; nothing is left behind.
    """
    try:
        fd = _open_pidfd(pid)
    except ProcessLookupError:
        await trio.lowlevel.checkpoint()
        return
    if fd is None:
        while is_same_process(pid, start_time) if start_time is not None else pid_alive(pid):
            await trio.sleep(POLL_INTERVAL_S)
        await trio.lowlevel.checkpoint()
        return
    try:
        # Checked after opening the pidfd, so the fd surely names the process we mean.
        if start_time is not None and not is_same_process(pid, start_time):
            await trio.lowlevel.checkpoint()
            return
        await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)


def signal_shim(shim_pid: int, shim_start_time: int | None, sig: int = signal.SIGTERM) -> bool:
    """Send ``sig`` to a job's shim (SIGTERM = cancel); False if that shim is gone.

    Refuses (False) when ``shim_pid`` now names another process (see ``signal_process``).
    """
    return signal_process(shim_pid, shim_start_time, sig)


def signal_process(pid: int, start_time: int | None, sig: int) -> bool:
    """Send ``sig`` to the process ``pid`` that started at ``start_time``; False if it is gone.

    Refuses (False) when ``pid`` now names another process. With pidfds the check and the
    signal address the same process, so a pid reused in between cannot be hit.
    """
    try:
        fd = _open_pidfd(pid)
    except ProcessLookupError:
        return False
    try:
        if not is_same_process(pid, start_time):
            return False
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return False
    finally:
        if fd is not None:
            os.close(fd)
    return True


def job_processes(runtime: Runtime) -> list[tuple[int, int]]:
    """What is left of the job ``runtime`` describes once its shim is gone, as ``(pid, start
    time)``: the live processes of its process group, and the rest of its shim's session
    (those that left the group); [] once none is left. Zombies do not count.

    A group or session id stays taken while any process is in it, so a live process that
    holds the number as its pid, but started at another time than the job's main process
    (its shim), means the group (the session) is empty and the number has gone to another.
    Reads every ``/proc/<pid>/stat``: a few milliseconds.
    """
    table = _process_table()

    def empty(number: int, start_time: int | None) -> bool:
        held = table.get(number)
        return held is not None and held[3] != start_time

    group = None if empty(runtime.pgid, runtime.start_time) else runtime.pgid
    session = None if empty(runtime.shim_pid, runtime.shim_start_time) else runtime.shim_pid
    return [(pid, start) for pid, (state, pgrp, sid, start) in table.items()
            if state not in ("Z", "X") and pid != runtime.shim_pid and (pgrp == group or sid == session)]


def _process_table() -> dict[int, tuple[str, int, int, int]]:
    """Every process: pid -> (state, process group, session, start time), from ``/proc``."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
            table[int(name)] = (fields[0].decode("ascii"), int(fields[2]), int(fields[3]), int(fields[19]))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return table
