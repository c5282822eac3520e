"""The daemon's client of the launcher: one long-lived process that runs each job under a shim.

``open_launcher`` starts ``python -I -S gpuplaned/shim/__main__.py --serve`` (see the
``gpuplaned.shim`` package docstring for its protocol and theory of operation) and gives a
``Launcher``: ``spawn`` a ``SpawnRequest``, ``wait_exit`` for its end (the record itself,
before ``exit.json`` is even read), ``cancel`` by request id (so a cancel never reaches a
later job of the same shim), ``orphan_exit`` for a job whose shim died first, ``ping``.

Why a launcher rather than one interpreter per job: an interpreter start alone is
~35 ms; a fork of the warm launcher is about a millisecond, and the launcher forks its
shims ahead of time. Spawns are pipelined: the launcher hands a request to a shim and reads
the next one while the first shim is still setting up, so many spawns may be in flight
and their replies come back in the order the shims finish (each request carries a ``seq``
that its reply echoes).

Errors: ``SpawnError`` (the command could not be started; the launcher's message, and
``exit.json`` has reason ``spawn_failed``), ``LauncherGone`` (the launcher died or was
closed; the runner restarts it); both are ``LauncherError``\\ s.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import attrs
import trio

from gpuplaned import shim
from gpuplaned.launching.job_files import ExitRecord, InvalidField, exit_record, parse
from gpuplaned.runtime import eager

log = logging.getLogger("gpuplaned.runner")

SHIM_PATH = Path(shim.__file__).resolve().with_name("__main__.py")  # the launcher program
CLOSE_GRACE_S = 2.0  # after closing its stdin, how long the launcher gets to exit
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


def _str_dict(value: Mapping[str, str]) -> dict[str, str]:
    return dict(value)


@attrs.frozen
class SpawnRequest:
    """One command to start. ``env`` is the job's full environment (PATH lookup uses it).

    ``job_id`` and ``attempt`` name the attempt (the runner's requests always do): the job's
    ``runtime.json`` and ``exit.json`` then carry them.
    """

    id: str
    job_dir: Path = attrs.field(converter=Path)
    argv: tuple[str, ...] = attrs.field(converter=tuple)
    cwd: Path = attrs.field(converter=Path)
    env: dict[str, str] = attrs.field(converter=_str_dict)
    timeout_s: float | None = None
    grace_s: float = 10.0  # SIGTERM -> SIGKILL on cancel and timeout
    job_id: str | None = None
    attempt: int | None = None


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
class _SpawnReply:
    """The launcher's answer to a spawn that started its job."""

    id: str | None
    ok: bool
    shim_pid: int
    shim_start_time: int | None
    pid: int
    pgid: int
    start_time: int | None
    started_at: float | None = None


class _Waiter:
    __slots__ = ("seq", "reply")

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.reply: dict[str, Any] | None = None


class Launching(Protocol):
    """What the runner asks of a launcher: ``Launcher``, or ``gpuplaned.testing.FakeLauncher``."""

    async def spawn(self, request: SpawnRequest) -> Spawned: ...
    async def wait_exit(self, request_id: str) -> ExitRecord | None: ...
    async def cancel(self, request_id: str) -> bool: ...
    async def orphan_exit(self, request_id: str) -> ExitRecord | None: ...


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
        the job has run ``gpuplaned.shim.job.DURABLE_AFTER_S``), and ``Spawned.started_at``
        is its ``started_at``. ``wait_exit(Spawned.id)`` tells of its end.

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
            "job_id": request.job_id,
            "attempt": request.attempt,
        })
        if reply.get("id") != request.id:
            self._break(f"reply for {reply.get('id')!r} to the request for {request.id!r}")
            raise LauncherGone(self._gone)
        if not reply.get("ok"):
            raise SpawnError(str(reply.get("error", "spawn failed")), request.id)
        try:
            started = parse(reply, _SpawnReply, "the spawn reply")
        except InvalidField as exc:
            self._break(f"malformed spawn reply {reply!r}: {exc}")
            raise LauncherGone(self._gone) from None
        return Spawned(request.id, started.shim_pid, started.shim_start_time, started.pid, started.pgid,
                       started.start_time, started.started_at)

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
        except InvalidField as exc:
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
        await trio.lowlevel.checkpoint_if_cancelled()
        # The reply is waited for anyway: the lock and the write take no turn of the scheduler
        # when they need not wait (two task steps of every job's start).
        await eager.acquire(self._send_lock)
        try:
            if self._gone is not None:
                raise LauncherGone(self._gone)
            self._pending[waiter.seq] = waiter
            try:
                # A half-written request would put the stream out of step for good. The
                # launcher reads its stdin between any two steps of its work, so this
                # finishes promptly unless it is stopped, and ends if it dies.
                with trio.CancelScope(shield=True):
                    await eager.write(self._stdin.fileno(), self._stdin, data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                del self._pending[waiter.seq]
                self._set_gone(f"launcher pid {self.pid} stopped reading requests ({exc!r})")
                raise LauncherGone(self._gone) from exc
        finally:
            self._send_lock.release()
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
        except InvalidField as exc:
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
        python: the interpreter to run the launcher with; default ``sys.executable``. It
            runs isolated (``-I -S``): the shim needs only the standard library.
        report_timeout_s: how long a shim may take to start its job and write
            ``runtime.json`` before the spawn fails and the shim is killed; default
            ``gpuplaned.shim.serve.REPORT_TIMEOUT_S`` (30 s).
        prefork: idle shims the launcher keeps forked ahead of requests; default
            ``gpuplaned.shim.serve.PREFORK`` (2); 0 forks each on its request.

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
