"""The job launcher ("zygote") and the per-job shim: standard library only, runnable by path.

The runner starts ``python -I -S /abs/path/shim.py --serve`` once. That process, the
**launcher**, reads newline-delimited JSON requests on stdin and answers each with one JSON
line on stdout:

    {"op": "spawn", "id": ..., "job_dir": "/abs", "argv": [...], "cwd": "/abs", "env": {...},
     "timeout_s": float | null, "grace_s": float, "seq": int}
      -> {"id": ..., "ok": true, "shim_pid", "shim_start_time", "pid", "pgid", "start_time",
          "started_at", "seq"}
      -> {"id": ..., "ok": false, "error": "argv[0] 'nosuch' not found: ...", "seq"}
    {"op": "ping", "seq": int} -> {"ok": true, "pong": true, "seq"}
    {"op": "cancel", "id": ..., "seq": int} -> {"id": ..., "ok": true, "cancelled": bool, "seq"}
    {"op": "orphan", "id": ..., "seq": int} -> {"id": ..., "ok": true, "exit": {...} | null, "seq"}

and, unasked, once a job it started has ended (after ``exit.json`` is written):

    {"event": "exit", "id": ..., "exit": {what exit.json holds} | null}

``exit`` is null when the shim ended without saying (it was killed): ``exit.json`` is
then the only record, if there is one, and the job itself may still be running (see
"Orphaned jobs" below; ``orphan`` asks how it ended, once nothing of it is left). A
launcher that is restarted does not know the jobs of the one before; the daemon watches
those through their shims' pids.

Requests are **pipelined**: the launcher hands a spawn to a shim and goes straight on to
the next request, so replies come back in the order the shims finish, not the order of the
requests. ``seq`` (optional, any JSON value) is echoed in the reply to tell them apart; a
reply without one (a request that was not valid JSON) cannot be matched to anything.
``started_at`` is the wall clock just before ``posix_spawn``, the same value as in
``runtime.json``.

On EOF it answers what is still in flight, then exits; the jobs it started keep running.
It must not import gpuplaned: it runs by file path in isolated mode.

Theory of operation
-------------------
Starting an interpreter costs ~35 ms, so the launcher ``fork()``s a **shim** per job instead
(single-threaded, so the fork is safe; the shim never returns into the launcher's code and
leaves through ``os._exit``). Shims are forked *ahead* of their request (``prefork`` of them
wait idle, blocked on a pipe of their own), so a request only costs the launcher a pipe
write: the fork and the shim's setup below are off the critical path. The shim:

1. ``setsid()``: its own session, so signals aimed at the daemon's group or terminal miss it;
   becomes a child subreaper, so descendants that lose their parent (including ones that
   ``setsid()`` out of the job's group) are re-parented to it and stay within reach;
   ignores SIGINT/SIGHUP/SIGPIPE and keeps SIGTERM/SIGCHLD blocked, taking them one at a
   time from ``sigtimedwait`` (no handlers, no races with ``waitpid``); closes every fd but
   its two pipes and ``/dev/null``. Then it waits for its request (EOF: exit quietly).
2. Creates the job dir (0700; what exists is left as it is), removes ``runtime.json``/
   ``exit.json`` left there by an earlier spawn, opens ``stdout.log``/``stderr.log`` (append,
   0644), enters the job's cwd and starts the job's **main process** with ``posix_spawn``:
   own process group, stdin ``/dev/null``, stdout/stderr straight into the files (no pipe
   the daemon could break), default signal dispositions, an empty mask, no other fds,
   argv[0] looked up on the job env's PATH. A failed exec comes back as an errno (see
   ``_start_child``).
3. Writes ``runtime.json`` (temp file, rename) and reports to the launcher, which replies.
   Durability is deferred: once the job has run ``DURABLE_AFTER_S`` the shim fsyncs
   ``runtime.json``, the job dir and any parent it created, and then writes ``exit.json``
   with an fsync too. A job that ends sooner (a trivial one) gets no fsync at all, which
   keeps two to four journal commits (~0.3 ms each, more on a busy disk) off the path from
   one queued job to the next. Nothing is lost when a process dies: the page cache holds
   the records. Only a power cut within the first half second of a job can lose them, and
   the store's own commits (``synchronous=NORMAL``) are not fsynced either: a lost
   ``runtime.json`` reads as "never started" (back to the queue), a lost or torn
   ``exit.json`` as LOST.
4. Waits. SIGTERM (cancel) or ``timeout_s`` sends SIGTERM (and SIGCONT) to the group and to
   re-parented descendants, then SIGKILL after ``grace_s``; a second SIGTERM kills at once.
5. When the main process has exited it is left a zombie, so its pid (the group id) cannot
   be reused, while the group and every other descendant is SIGKILLed and reaped; only
   then is it reaped itself and ``exit.json`` written (temp file, rename; fsynced as step 3
   says). The same record goes down the report pipe, which the shim kept open, and the
   launcher passes it on as an ``exit`` event. The shim exits 0.

A spawn that fails (no such command, missing cwd, permission denied, a job dir that cannot
be created) gets an ``ok: false`` reply and an ``exit.json`` with reason ``spawn_failed``,
exit code 127 (not found) or 126. Its shim started nothing and takes the next request: no
request, however bad, ends a shim (what exec cannot take, such as a NUL byte, is refused
before any shim sees it).

Orphaned jobs: a shim can die before its job (``kill -9``, a bug). The launcher is a child
subreaper, so the job's processes are then re-parented to it rather than to init, and it
reaps its children as it goes (shims, helpers, such jobs; once per turn of its loop, so a
child that ends while the launcher is idle stays a zombie until the next request). The
exit status of such a job's main process, which no shim is left to write to ``exit.json``,
is kept until an ``orphan`` request takes it. The daemon follows such a job by its
processes (``runtime.json``) until none is left, and holds its GPUs meanwhile. Shims,
which are the launcher's children too, are not affected: they outlive the launcher as
before, and a job whose shim dies after the launcher has gone goes to init, its exit
status unknown.

A shim that has not reported ``report_timeout_s`` (default 30 s) after it got its request
is stopped, its job's process group (if it got as far as starting one) and then the shim
itself are SIGKILLed, and the reply is ``ok: false`` ("... did not report within ..."). A
shim that exits without reporting gets ``ok: false`` too. In both cases the reply waits for
a short-lived helper process to write ``exit.json`` (``spawn_failed``), so the launcher
itself never touches a job dir on a possibly hung file system.
"""

from __future__ import annotations

import ctypes
import errno as errno_mod
import gc
import json
import os
import select
import signal
import sys
import time

TYPE_CHECKING = False  # typing costs the launcher, and so every shim, ~2 MB of heap
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

STDOUT_FILE = "stdout.log"
STDERR_FILE = "stderr.log"
RUNTIME_FILE = "runtime.json"
EXIT_FILE = "exit.json"
SHIM_LOG_FILE = "shim.log"  # the shim's own complaints; absent when all went well

EXIT_NOT_FOUND = 127
EXIT_CANNOT_EXECUTE = 126

_PR_SET_CHILD_SUBREAPER = 36
_MAX_LINE = 16 * 1024 * 1024
_WAITED = frozenset({signal.SIGCHLD, signal.SIGTERM})
_SHIM_IGNORES = (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE)
_DEFAULT_SIGNALS = tuple(sorted(signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}))


class RequestError(ValueError):
    """A malformed request; the launcher answers ``ok: false`` and carries on."""


class _SpawnFailed(Exception):
    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.message = message


class _Spec:
    """One validated spawn request."""

    __slots__ = ("id", "job_dir", "argv", "cwd", "env", "timeout_s", "grace_s")

    def __init__(self, req: dict[str, Any]) -> None:
        self.id = req.get("id")
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


def _number(req: dict[str, Any], key: str, default: float | None) -> float | None:
    value = req.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise RequestError(f"{key} must be a non-negative number or null, got {value!r}")
    return float(value)


# ---------------------------------------------------------------------------------------
# Helpers shared with gpuplaned.launcher (it imports this module for them).


def read_proc_stat(pid: int) -> tuple[str, int] | None:
    """``(state, starttime)`` from ``/proc/<pid>/stat``; None when there is no such process.

    The command name is in parentheses and may itself contain ``)`` or spaces, so the
    fields are counted after the last ``)``: state is field 3, starttime (clock ticks
    since boot) field 22.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rpartition(b")")[2].split()
    try:
        return fields[0].decode("ascii"), int(fields[19])
    except (IndexError, ValueError):
        return None


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


# ---------------------------------------------------------------------------------------
# The launcher.

REPORT_TIMEOUT_S = 30.0  # a shim that has not reported by then is killed; the spawn fails
PREFORK = 2  # idle shims kept forked ahead of their requests
MAX_IDLE = 4  # idle shims kept for reuse after their jobs (at least PREFORK)
MAX_JOBS_PER_SHIM = 1000  # then it exits, so nothing a shim accumulates lasts forever
# A job's records are fsynced once it has run this long, not before it starts: see step 3.
DURABLE_AFTER_S = 0.5
_MAX_REPORT = 1024 * 1024


def serve(
    stdin_fd: int = 0,
    stdout_fd: int = 1,
    *,
    report_timeout_s: float = REPORT_TIMEOUT_S,
    prefork: int = PREFORK,
) -> int:
    """Answer requests on ``stdin_fd`` until EOF and the last reply; returns the exit code.

    Args:
        report_timeout_s: how long a shim may take from its request to its report.
        prefork: how many idle shims to keep ready (0: fork each one on request).
    """
    # Our children (shims, helpers, and the jobs of shims that died first: see "Theory of
    # operation") are reaped as we go, so that a job's exit status can be known.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # What shims ignore, ignored here already so that they inherit it. We are in a session
    # of our own, and stop on EOF, not on signals from a terminal.
    for signum in _SHIM_IGNORES:
        signal.signal(signum, signal.SIG_IGN)
    libc = _load_libc()
    prctl = None if libc is None else libc.prctl  # resolved once, not in every shim
    subreaper = prctl is not None and prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    # Everything imported so far is shared with every shim; keep the collector from
    # touching (and so copying) those pages.
    gc.freeze()
    return _Server(stdin_fd, stdout_fd, prctl, report_timeout_s, max(0, prefork), subreaper).run()


class _ReplyFailed(Exception):
    """Our stdout is gone: the daemon went away (the jobs do not need us)."""


class _TooLong(Exception):
    pass


class _Shim:
    """A forked shim: it reads requests on ``spec_fd`` and reports on ``report_fd``.

    ``pidfd`` names it for signals even once it is gone (shims are reaped by the kernel,
    so a bare pid could be reused); None where pidfds are not available.
    """

    __slots__ = ("pid", "pidfd", "spec_fd", "report_fd", "jobs")

    def __init__(self, pid: int, pidfd: int | None, spec_fd: int, report_fd: int) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.spec_fd = spec_fd
        self.report_fd = report_fd
        self.jobs = 0  # requests handed to it

    def signal(self, signum: int) -> None:
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signum)
            else:
                os.kill(self.pid, signum)
        except OSError:
            pass  # gone

    def close(self) -> None:
        """Let it go: EOF on its request pipe makes an idle shim exit."""
        os.close(self.spec_fd)
        os.close(self.report_fd)
        if self.pidfd is not None:
            os.close(self.pidfd)


class _Running:
    """A started job's shim: its report pipe stays open until the shim writes the exit line.

    ``pid`` is the job's main process, as the shim reported it.
    """

    __slots__ = ("shim", "req_id", "data", "pid")

    def __init__(self, shim: _Shim, req_id: Any, data: bytes, pid: Any = None) -> None:
        self.shim = shim
        self.req_id = req_id
        self.data = data
        self.pid = pid


class _Waiting:
    """A process whose end (a report line, or EOF) a reply waits for.

    ``kind`` is ``"shim"`` (the reply is the shim's report) or ``"recorder"`` (a helper
    writing a spawn failure's ``exit.json``; the reply is ready in ``reply``).
    """

    __slots__ = ("kind", "pid", "fd", "deadline", "data", "req_id", "seq", "job_dir", "reply", "shim")

    def __init__(self, kind: str, pid: int, fd: int, deadline: float, req_id: Any, seq: Any,
                 job_dir: str, reply: dict[str, Any] | None = None, shim: _Shim | None = None) -> None:
        self.kind = kind
        self.pid = pid
        self.fd = fd
        self.shim = shim
        self.deadline = deadline
        self.data = b""
        self.req_id = req_id
        self.seq = seq
        self.job_dir = job_dir
        self.reply = reply


class _Server:
    """The launcher's loop: one ``poll()`` over stdin and every pending shim's report pipe.

    Each turn handles at most one request line, then looks at the pipes again, so reports
    are answered while a burst of requests is still being handed out. Idle shims are
    forked only when there is nothing else to do. Job dirs are the business of shims and
    helper processes, so a hung file system cannot stop the loop; the exceptions are a
    malformed request and a failed fork, whose ``exit.json`` is written here directly.
    """

    def __init__(self, stdin_fd: int, stdout_fd: int, prctl: Any, report_timeout_s: float,
                 prefork: int, subreaper: bool = False) -> None:
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd
        self.prctl = prctl
        self.report_timeout_s = report_timeout_s
        self.prefork = prefork
        self.buf = bytearray()
        self.scanned = 0  # self.buf[:scanned] holds no newline
        self.stdin_open = True
        self.poller = select.poll()
        self.idle: list[_Shim] = []
        self.max_idle = max(prefork, MAX_IDLE)
        self.waiting: dict[int, _Waiting] = {}
        self.running: dict[int, _Running] = {}  # by report fd: started jobs, until their exit line
        self.running_by_id: dict[str, _Running] = {}
        self.subreaper = subreaper
        # Jobs whose shims died before them, by main pid: ours to reap (we are a subreaper).
        self.orphans: dict[int, Any] = {}
        self.orphan_ends: dict[Any, dict[str, Any]] = {}  # by request id, until asked for

    def run(self) -> int:
        self.poller.register(self.stdin_fd, select.POLLIN)
        try:
            while True:
                try:
                    line = self._next_line()
                except _TooLong:
                    sys.stderr.write("gpuplane launcher: request line too long; exiting\n")
                    return 1
                if line is None and not self.stdin_open and not self.waiting:
                    return 0
                # Only while no spawn is in flight: a fork here would compete for a CPU with
                # the shims doing their latency-critical part (the fork, and the launcher's
                # own copy-on-write faults after it, are ~1 ms).
                refill = self.stdin_open and not self.waiting and len(self.idle) < self.prefork
                timeout = 0 if line is not None or refill else self._poll_timeout_ms()
                events = self.poller.poll(timeout)
                for fd, _ in events:
                    if fd == self.stdin_fd:
                        self._read_stdin()
                    elif fd in self.waiting:
                        self._on_readable(self.waiting[fd])
                    elif fd in self.running:
                        self._on_exit_readable(self.running[fd])
                self._reap()
                if line is not None:
                    self._handle(line)
                elif refill and not events:
                    self._refill()
                self._expire()
        except _ReplyFailed:
            return 0
        finally:
            for shim in self.idle:  # EOF on their request pipe: they exit
                shim.close()
            self.idle.clear()
            for running in self.running.values():  # their jobs go on; exit.json has the exit too
                running.shim.close()
            self.running.clear()
            self.running_by_id.clear()

    # -- requests -----------------------------------------------------------------------

    def _next_line(self) -> bytes | None:
        nl = self.buf.find(b"\n", self.scanned)
        if nl < 0:
            self.scanned = len(self.buf)
            if len(self.buf) > _MAX_LINE:
                raise _TooLong()
            return None
        line = bytes(self.buf[:nl])
        del self.buf[: nl + 1]
        self.scanned = 0
        return line

    def _read_stdin(self) -> None:
        try:
            chunk = os.read(self.stdin_fd, 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if chunk:
            self.buf += chunk
            return
        self.stdin_open = False
        self.poller.unregister(self.stdin_fd)

    def _handle(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise RequestError("a request must be a JSON object")
        except (ValueError, RecursionError) as exc:
            self._reply({"id": None, "ok": False, "error": f"bad request: {exc}"}, None)
            return
        seq = req.get("seq")
        op = req.get("op")
        if op == "ping":
            reply: dict[str, Any] = {"ok": True, "pong": True}
            if "id" in req:
                reply["id"] = req["id"]
            self._reply(reply, seq)
            return
        if op == "cancel":
            self._reply({"id": req.get("id"), "ok": True, "cancelled": self._cancel(req.get("id"))}, seq)
            return
        if op == "orphan":
            self._reply({"id": req.get("id"), "ok": True, "exit": self._orphan_end(req.get("id"))}, seq)
            return
        if op != "spawn":
            self._reply({"id": req.get("id"), "ok": False,
                         "error": f"bad request: unknown op {op!r}"}, seq)
            return
        try:
            spec = _Spec(req)
        except RequestError as exc:
            message = f"bad request: {exc}"
            job_dir = req.get("job_dir")
            if isinstance(job_dir, str) and os.path.isabs(job_dir):
                _record_spawn_failure(job_dir, EXIT_CANNOT_EXECUTE, message)
            self._reply({"id": req.get("id"), "ok": False, "error": message}, seq)
            return
        self._dispatch(spec, line, seq)

    def _dispatch(self, spec: _Spec, line: bytes, seq: Any) -> None:
        """Hand the request to an idle shim, or fork one that has it already."""
        while self.idle:
            shim = self.idle.pop()  # the most recently used: its pages are the warmest
            try:
                # A pipe the shim is blocked reading: only a dead shim makes this fail.
                _write_all(shim.spec_fd, line + b"\n")
            except OSError:
                shim.close()
                continue
            break
        else:
            try:
                shim = self._fork_shim(spec)
            except OSError as exc:
                message = f"cannot fork a shim: {exc}"
                _record_spawn_failure(spec.job_dir, EXIT_CANNOT_EXECUTE, message)
                self._reply({"id": spec.id, "ok": False, "error": message}, seq)
                return
        shim.jobs += 1
        waiting = _Waiting("shim", shim.pid, shim.report_fd,
                           time.monotonic() + self.report_timeout_s, spec.id, seq, spec.job_dir, shim=shim)
        self.waiting[shim.report_fd] = waiting
        self.poller.register(shim.report_fd, select.POLLIN)

    def _cancel(self, req_id: Any) -> bool:
        """Cancel the running job ``req_id``; False when no job of that id is running.

        The shim is told which job the cancel is for on its request pipe, then signalled:
        a shim that has since moved on to another job knows to ignore it.
        """
        running = self.running_by_id.get(req_id) if isinstance(req_id, str) else None
        if running is None:
            return False
        try:
            _write_all(running.shim.spec_fd, json.dumps({"cancel": req_id}).encode() + b"\n")
        except OSError:
            return False  # it is gone: its exit (or its end without one) is on the way
        running.shim.signal(signal.SIGTERM)
        return True

    def _reap(self) -> None:
        """Reap every child of ours that has ended: shims, helpers, and the main processes
        of jobs whose shims died first, whose ends are kept for ``orphan`` requests.

        Once per turn of the loop (a system call): a child that ends while nothing else
        happens stays a zombie until the next request or report.
        """
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG)
            except ChildProcessError:
                return
            if info is None:
                return
            req_id = self.orphans.pop(info.si_pid, None)
            if req_id is None:  # its shim died, and its report pipe's end is still to be read
                req_id = next((r.req_id for r in self.running.values() if r.pid == info.si_pid), None)
            if req_id is not None:
                self.orphan_ends[req_id] = _orphan_record(info)

    def _orphan_end(self, req_id: Any) -> dict[str, Any] | None:
        """How the main process of job ``req_id``, whose shim died first, ended: what
        ``exit.json`` would have held; None when we do not know (it is still running, or it
        is not ours to reap)."""
        self._reap()
        for pid in [pid for pid, owner in self.orphans.items() if owner == req_id]:
            try:
                os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                del self.orphans[pid]  # not ours after all: it went elsewhere (or never came)
        return self.orphan_ends.pop(req_id, None)

    def _reply(self, reply: dict[str, Any], seq: Any) -> None:
        if seq is not None:
            reply["seq"] = seq
        try:
            _write_all(self.stdout_fd, json.dumps(reply).encode() + b"\n")
        except OSError:
            raise _ReplyFailed() from None

    # -- shims --------------------------------------------------------------------------

    def _refill(self) -> None:
        try:
            # At the back of the line: shims back from a job (their pages copied already,
            # no faults to take) go first.
            self.idle.insert(0, self._fork_shim())
        except OSError:
            self.prefork = len(self.idle)  # fork fails now; requests will say why

    def _fork_shim(self, spec: _Spec | None = None) -> _Shim:
        """Fork a shim: for ``spec``, or an idle one that reads its first request from its pipe."""
        spec_r, spec_w = os.pipe()
        try:
            report_r, report_w = os.pipe()
        except OSError:
            os.close(spec_r)
            os.close(spec_w)
            raise
        # Blocked before the fork, so a SIGTERM that reaches the shim early is queued for its
        # wait loop instead of killing it.
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WAITED)
        try:
            pid = os.fork()
        except OSError:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            for fd in (spec_r, spec_w, report_r, report_w):
                os.close(fd)
            raise
        if pid == 0:
            code = 1
            try:
                os.close(spec_w)
                os.close(report_r)
                _shim_main(spec_r, report_w, self.prctl, spec)
                code = 0
            finally:  # nothing may escape into the launcher's loop
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        os.close(spec_r)
        os.close(report_w)
        os.set_blocking(report_r, False)
        try:
            pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None  # no pidfds here, or it died already (its pipes will say so)
        return _Shim(pid, pidfd, spec_w, report_r)

    def _on_readable(self, waiting: _Waiting) -> None:
        if _read_line(waiting, waiting.fd):
            self._finish(waiting)

    def _forget(self, waiting: _Waiting, *, keep_fd: bool = False) -> None:
        if self.waiting.get(waiting.fd) is waiting:
            del self.waiting[waiting.fd]
            if not keep_fd:
                self.poller.unregister(waiting.fd)
                if waiting.shim is not None:
                    waiting.shim.close()
                else:
                    os.close(waiting.fd)

    def _finish(self, waiting: _Waiting) -> None:
        """The report is in (or the process is gone): reply."""
        if waiting.kind == "recorder":
            self._forget(waiting)
            assert waiting.reply is not None
            self._reply(waiting.reply, waiting.seq)
            return
        head, newline, rest = waiting.data.partition(b"\n")
        try:
            report = json.loads(head)
        except ValueError:
            report = None
        if isinstance(report, dict) and isinstance(report.get("ok"), bool):
            started = report["ok"] is True and bool(newline)
            # A started job's shim keeps the pipe and writes its exit line on it later; one
            # that could not start its job has nothing left of it and may take the next.
            self._forget(waiting, keep_fd=True)
            if not started:
                self.poller.unregister(waiting.fd)
                assert waiting.shim is not None
                self._release(waiting.shim, waiting.data if report["ok"] is False else b"")
            report["id"] = waiting.req_id
            self._reply(report, waiting.seq)
            if started:
                assert waiting.shim is not None
                running = _Running(waiting.shim, waiting.req_id, rest, report.get("pid"))
                self.running[waiting.fd] = running
                if isinstance(waiting.req_id, str):
                    self.running_by_id[waiting.req_id] = running
                if b"\n" in rest:
                    self._exit_line(running)
            return
        self._forget(waiting)
        # Nothing was started, unless the shim died between runtime.json and its report;
        # then the job runs, and runtime.json is what the runner reconciles.
        self._record_failure(waiting, f"shim {waiting.pid} exited before reporting",
                             overwrite=False)

    def _on_exit_readable(self, running: _Running) -> None:
        if _read_line(running, running.shim.report_fd):
            self._exit_line(running)

    def _exit_line(self, running: _Running) -> None:
        """A started job's shim wrote its exit line (or went without one): pass it on.

        ``exit`` is what the shim wrote to ``exit.json``, or null when the shim ended
        without a line (killed), so the daemon reads (or misses) ``exit.json`` itself. The
        job of a shim that died may still run: it is ours now, to reap (``_reap``).
        """
        shim = running.shim
        del self.running[shim.report_fd]
        if self.running_by_id.get(running.req_id) is running:
            del self.running_by_id[running.req_id]
        self.poller.unregister(shim.report_fd)
        try:
            record = json.loads(running.data.partition(b"\n")[0])
        except ValueError:
            record = None
        if not isinstance(record, dict):
            record = None
            if self.subreaper and isinstance(running.pid, int) and running.req_id not in self.orphan_ends:
                self.orphans[running.pid] = running.req_id
        self._release(shim, running.data if record is not None else b"")
        try:
            _write_all(self.stdout_fd, json.dumps({"event": "exit", "id": running.req_id, "exit": record}).encode()
                       + b"\n")
        except OSError:
            raise _ReplyFailed() from None

    def _release(self, shim: _Shim, said: bytes) -> None:
        """Keep a shim that has said (``said``: its one line, and nothing after it) how its
        request ended, with nothing of a job left, for another: no fork, no copy-on-write
        faults, no exit. Within limits; else let it go."""
        if (said.endswith(b"\n") and said.count(b"\n") == 1 and self.stdin_open
                and len(self.idle) < self.max_idle and shim.jobs < MAX_JOBS_PER_SHIM):
            self.idle.append(shim)
        else:
            shim.close()

    def _poll_timeout_ms(self) -> int:
        if not self.waiting:
            return -1
        left = min(w.deadline for w in self.waiting.values()) - time.monotonic()
        return max(0, int(left * 1000) + 1)

    def _expire(self) -> None:
        if not self.waiting:
            return
        now = time.monotonic()
        for waiting in [w for w in self.waiting.values() if w.deadline <= now]:
            self._on_timeout(waiting)

    def _on_timeout(self, waiting: _Waiting) -> None:
        if self._drain(waiting):
            self._finish(waiting)
            return
        outcome = _stop_stuck(waiting.pid, waiting.fd, kill_job=waiting.kind == "shim")
        if outcome in ("reported", "gone"):  # just now: its report (or EOF) is in the pipe
            self._drain(waiting)
            self._finish(waiting)
            return
        self._forget(waiting)
        if waiting.kind == "recorder":
            assert waiting.reply is not None
            waiting.reply["error"] += (
                f" (and {EXIT_FILE} could not be written within {self.report_timeout_s:g} s)")
            self._reply(waiting.reply, waiting.seq)
            return
        message = (f"shim {waiting.pid} did not report within {self.report_timeout_s:g} s;"
                   " killed it")
        if outcome:
            message += f" and its job (pid {', '.join(map(str, outcome))})"
        self._record_failure(waiting, message, overwrite=True)

    def _drain(self, waiting: _Waiting) -> bool:
        """Read what the pipe holds; True once a whole report (or EOF) is in."""
        while True:
            chunk = _read_some(waiting.fd)
            if chunk is None:
                return False
            waiting.data += chunk
            if not chunk or b"\n" in waiting.data or len(waiting.data) > _MAX_REPORT:
                return True

    def _record_failure(self, waiting: _Waiting, message: str, *, overwrite: bool) -> None:
        """Reply ``ok: false`` once a helper process has written ``exit.json``."""
        reply = {"id": waiting.req_id, "ok": False, "error": message}
        try:
            report_r, report_w = os.pipe()
        except OSError:
            self._reply(reply, waiting.seq)
            return
        try:
            pid = os.fork()
        except OSError:
            os.close(report_r)
            os.close(report_w)
            self._reply(reply, waiting.seq)
            return
        if pid == 0:
            try:
                os.close(report_r)
                _detach_fds([report_w])
                job_dir = waiting.job_dir
                if overwrite or not os.path.exists(os.path.join(job_dir, RUNTIME_FILE)):
                    _record_spawn_failure(job_dir, EXIT_CANNOT_EXECUTE, message,
                                          only_if_missing=not overwrite)
            finally:
                os._exit(0)
        os.close(report_w)
        os.set_blocking(report_r, False)
        recorder = _Waiting("recorder", pid, report_r, time.monotonic() + self.report_timeout_s,
                            waiting.req_id, waiting.seq, waiting.job_dir, reply)
        self.waiting[report_r] = recorder
        self.poller.register(report_r, select.POLLIN)


def _read_line(into: _Waiting | _Running, fd: int) -> bool:
    """Add what ``fd`` holds to ``into.data``; True once a line is whole (or EOF, or too long)."""
    chunk = _read_some(fd)
    if chunk is None:
        return False
    into.data += chunk
    return not chunk or b"\n" in into.data or len(into.data) > _MAX_REPORT


def _read_some(fd: int) -> bytes | None:
    """A non-blocking read: None when nothing is there yet, b"" at EOF."""
    try:
        return os.read(fd, 65536)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""


def _stop_stuck(pid: int, fd: int, *, kill_job: bool) -> str | list[int]:
    """Kill a forked child of ours that is late with its report on ``fd``.

    Returns ``"gone"`` (it had exited), ``"reported"`` (its report came in after all; it
    was left running) or the pids of the job processes it had started, whose process
    groups were SIGKILLed along with it.

    While the child holds the write end of ``fd`` it is alive, so a pidfd opened before
    that check names it and no other process; it is stopped before its children are read,
    so none of them can be reaped (and its pid reused) before they are killed.
    """
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return "gone"
    except (AttributeError, OSError):
        pidfd = None

    def send(signum: int) -> None:
        try:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signum)
            else:
                os.kill(pid, signum)
        except OSError:
            pass

    try:
        check = select.poll()
        check.register(fd, select.POLLIN)
        if check.poll(0):  # data or EOF: no longer stuck
            return "reported"
        send(signal.SIGSTOP)
        _wait_stopped(pid)
        if check.poll(0):
            send(signal.SIGCONT)
            return "reported"
        jobs = _children(pid) if kill_job else []
        for child in jobs:
            _kill(child, signal.SIGKILL, group=True)
            _kill(child, signal.SIGKILL)
        send(signal.SIGKILL)
        return jobs
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _wait_stopped(pid: int, limit_s: float = 0.1) -> None:
    """Wait (briefly) until a process we sent SIGSTOP runs no more user code.

    Uninterruptible sleep counts: it stops on its way out of the kernel.
    """
    give_up = time.monotonic() + limit_s
    while True:
        stat = read_proc_stat(pid)
        if stat is None or stat[0] not in ("R", "S") or time.monotonic() >= give_up:
            return
        time.sleep(0.0005)


def _load_libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _detach_fds(keep: list[int]) -> int:
    """Point fds 0-2 at /dev/null and close every other fd but ``keep``; returns /dev/null's.

    Holding the daemon's pipes would keep the daemon from seeing the launcher's EOF.
    """
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    _close_fds_except(sorted({devnull, *keep}))
    return devnull


# ---------------------------------------------------------------------------------------
# The shim (runs in a forked copy of the launcher).


def _shim_main(spec_fd: int, report_fd: int, prctl: Any, spec: _Spec | None) -> None:
    """Set up, then start and supervise jobs (``spec``, then each request read from
    ``spec_fd``) one at a time, until EOF on ``spec_fd``.

    ``prctl`` is libc's (None without ctypes). SIGINT/SIGHUP/SIGPIPE are ignored already
    (inherited from the launcher) and SIGTERM/SIGCHLD blocked (before the fork).
    """
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # whatever the launcher does with it, we wait
    subreaper = prctl is not None and prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    os.close(_detach_fds([spec_fd, report_fd]))  # fd 0 is /dev/null now: the jobs' stdin
    me = os.getpid()
    shim_stat = read_proc_stat(me)
    if spec is None:
        _warm_up()
    requests = _Requests(spec_fd)
    while True:
        while spec is None:
            line = requests.next()
            if line is None:
                return  # the launcher is done with us (or gone)
            spec = _next_spec(line, report_fd)
        _discard_pending(_WAITED)  # a cancel meant for the job before, or a stray SIGCHLD
        try:
            reusable = _run_job(spec, report_fd, subreaper, me, shim_stat, requests)
        except BaseException as exc:
            _shim_log(spec.job_dir, f"shim failed: {exc!r}")
            raise
        if not reusable:
            return
        spec = None


def _next_spec(line: bytes, report_fd: int) -> _Spec | None:
    """The spawn request in ``line``; None for anything else (a cancel that came too late for
    its job). The launcher has checked the request already; should this copy of the check
    refuse it all the same, the refusal is the report, and the shim lives on."""
    try:
        request = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(request, dict) or request.get("op") != "spawn":
        return None
    try:
        return _Spec(request)
    except RequestError as exc:
        try:
            _write_all(report_fd, json.dumps({"ok": False, "error": f"bad request: {exc}"}).encode() + b"\n")
        except OSError:
            pass  # the launcher is gone; EOF on the request pipe follows
        return None


class _Requests:
    """Lines from the launcher: spawn requests while idle, cancels while a job runs."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""
        self.eof = False

    def next(self) -> bytes | None:
        """The next non-empty line, waiting for it; None at EOF."""
        while True:
            line, newline, rest = self.buf.partition(b"\n")
            if newline:
                self.buf = rest
                if line.strip():
                    return line
                continue
            if not self._read():
                return None

    def pending(self) -> list[bytes]:
        """The whole lines that have arrived, without waiting."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        while not self.eof and poller.poll(0) and self._read():
            pass
        *lines, self.buf = self.buf.split(b"\n")
        return [line for line in lines if line.strip()]

    def _read(self) -> bool:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except InterruptedError:
                continue
            if not chunk:
                self.eof = True
                return False
            self.buf += chunk
            return True


def _cancels_for(requests: _Requests, job_id: Any) -> bool:
    """On a SIGTERM: is it a cancel of this job? The launcher writes which job a cancel is
    for before it signals, so a SIGTERM with no line came from elsewhere (a person, a
    service manager) and means the job we run; one whose lines all name other jobs was
    meant for a job this shim ran before."""
    ids = []
    for line in requests.pending():
        try:
            ids.append(json.loads(line).get("cancel"))
        except (ValueError, AttributeError):
            continue
    return not ids or job_id in ids


def _discard_pending(signals: frozenset[int]) -> None:
    """Take every pending (blocked) signal of ``signals`` off the queue."""
    while signal.sigtimedwait(signals, 0) is not None:
        pass


def _run_job(spec: _Spec, report_fd: int, subreaper: bool, me: int,
             shim_stat: tuple[str, int] | None, requests: _Requests) -> bool:
    """Start and supervise one job; True when it ended (or failed to start) and was
    reported, so that this shim may take another (False: the launcher is gone, and the shim
    is to exit)."""
    def report(obj: dict[str, Any]) -> bool:
        try:
            _write_all(report_fd, json.dumps(obj).encode() + b"\n")
            return True
        except OSError:
            return False  # the launcher died; the job goes on regardless

    try:
        grown = _make_job_dir(spec.job_dir)
    except OSError as exc:
        message = f"cannot create job_dir {spec.job_dir!r}: {exc}"
        _record_spawn_failure(spec.job_dir, EXIT_CANNOT_EXECUTE, message)
        return report({"ok": False, "error": message})
    if not subreaper:
        # Orphaned descendants will go to init instead of us: cancel still reaches the
        # job's process group, but not what escaped it.
        _shim_log(spec.job_dir, "cannot become a child subreaper")
    try:
        if not grown:
            # A reused job dir: records of an earlier spawn must not pass for this one's.
            for name in (EXIT_FILE, RUNTIME_FILE):
                try:
                    os.unlink(os.path.join(spec.job_dir, name))
                except FileNotFoundError:
                    pass
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        out_fd = os.open(os.path.join(spec.job_dir, STDOUT_FILE), flags, 0o600)
        try:
            err_fd = os.open(os.path.join(spec.job_dir, STDERR_FILE), flags, 0o600)
        except OSError:
            os.close(out_fd)
            raise
    except OSError as exc:
        message = f"cannot open the logs in job_dir {spec.job_dir!r}: {exc}"
        _record_spawn_failure(spec.job_dir, EXIT_CANNOT_EXECUTE, message)
        return report({"ok": False, "error": message})
    try:
        pid, started_mono, started_at = _start_child(spec, out_fd, err_fd)
    except _SpawnFailed as failure:
        _record_spawn_failure(spec.job_dir, failure.exit_code, failure.message)
        return report({"ok": False, "error": failure.message})
    finally:
        os.close(out_fd)
        os.close(err_fd)
    child_stat = read_proc_stat(pid)
    runtime = {
        "id": spec.id,
        "shim_pid": me,
        "shim_start_time": shim_stat[1] if shim_stat else None,
        "pid": pid,
        "pgid": pid,
        "start_time": child_stat[1] if child_stat else None,
        "argv": spec.argv,
        "cwd": spec.cwd,
        "env_keys": sorted(spec.env),
        "started_at": started_at,
        "timeout_s": spec.timeout_s,
        "grace_s": spec.grace_s,
    }
    runtime_path = os.path.join(spec.job_dir, RUNTIME_FILE)
    try:
        write_json_atomic(runtime_path, runtime)
    except OSError as exc:  # the job runs anyway; say so where someone will look
        _shim_log(spec.job_dir, f"cannot write {RUNTIME_FILE}: {exc}")
        runtime_path = None

    def make_durable() -> None:
        # The file, its name (the rename is not covered by the file's fsync: on ext4 it
        # lands in a later journal commit) and the names of the directories made for it.
        try:
            sync_paths([p for p in (runtime_path, spec.job_dir, *grown) if p])
        except OSError as exc:
            _shim_log(spec.job_dir, f"cannot sync {RUNTIME_FILE}: {exc}")
    report({k: runtime[k] for k in _REPORTED} | {"ok": True})

    status, reason, durable = _supervise(pid, started_mono, spec.timeout_s, spec.grace_s, make_durable,
                                         lambda: _cancels_for(requests, spec.id))
    if os.WIFEXITED(status):
        exit_code, signum = os.WEXITSTATUS(status), None
        reason = reason or "exited"
    else:
        exit_code, signum = None, os.WTERMSIG(status)
        reason = reason or "signaled"
    record = {
        "exit_code": exit_code,
        "signal": signum,
        "signal_name": signal_name(signum) if signum is not None else None,
        "reason": reason,
        "ended_at": time.time(),
        "pid": pid,
        "error": None,
    }
    write_json_atomic(os.path.join(spec.job_dir, EXIT_FILE), record, sync=durable)
    # The same record, straight to the launcher and on to the daemon: sooner than the
    # shim's own exit (a process teardown, then a pidfd wake-up) and no file to read.
    return report(record)


def _warm_up() -> None:
    """What an idle shim does while it waits: the copy-on-write faults of a request.

    A forked shim's first touch of a page it shares with the launcher copies that page;
    decoding a request and encoding a report touch a few hundred. Doing it on sample data
    here takes them off the path from request to reply.
    """
    sample = json.loads('{"op": "spawn", "id": "x", "job_dir": "/x", "argv": ["x"], "cwd": "/",'
                        ' "env": {"PATH": "/x"}, "timeout_s": null, "grace_s": 1.0, "seq": 1}')
    spec = _Spec(sample)
    json.dumps({"id": spec.id, "shim_pid": 1, "shim_start_time": 1, "pid": 1, "pgid": 1,
                "start_time": 1, "argv": spec.argv, "cwd": spec.cwd, "env_keys": sorted(spec.env),
                "started_at": time.time(), "timeout_s": spec.timeout_s, "grace_s": spec.grace_s},
               sort_keys=True)
    json.dumps({"ok": True, "pid": 1, "started_at": 1.5})


_REPORTED = ("shim_pid", "shim_start_time", "pid", "pgid", "start_time", "started_at")


def _make_job_dir(job_dir: str) -> list[str]:
    """Create ``job_dir`` (0700; missing parents with the default mode).

    Returns the directories that gained an entry, deepest first (to be fsynced for the new
    names to be durable); ``[]`` when ``job_dir`` existed.

    Raises:
        OSError: it cannot be created, or exists and is not a directory.
    """
    try:
        os.mkdir(job_dir, 0o700)
        return [os.path.dirname(job_dir)]
    except FileExistsError:
        if not os.path.isdir(job_dir):
            raise NotADirectoryError(errno_mod.ENOTDIR, "exists and is not a directory",
                                     job_dir) from None
        return []
    except FileNotFoundError:
        pass
    grown = []
    path = job_dir
    while True:
        parent = os.path.dirname(path)
        grown.append(parent)
        if parent == path or os.path.isdir(parent):
            break
        path = parent
    os.makedirs(job_dir, mode=0o700, exist_ok=True)
    return grown


def _close_fds_except(keep: list[int]) -> None:
    low = 3
    for fd in keep:
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, _max_fd())


def _max_fd() -> int:
    try:
        return max(os.sysconf("SC_OPEN_MAX"), 256)
    except (OSError, ValueError):
        return 65536


def _start_child(spec: _Spec, out_fd: int, err_fd: int) -> tuple[int, float, float]:
    """Start the job's main process; returns ``(pid, monotonic, wall)`` at its start.

    ``posix_spawn`` (glibc: ``clone(CLONE_VFORK)`` + exec) does in C what a fork would do
    in Python, without copying the shim's page tables or running any Python in the child:
    its own process group, an empty signal mask, default dispositions for every signal,
    stdout/stderr onto the log files (fd 0 already is /dev/null and every other fd is
    CLOEXEC). glibc reports a failed exec's errno back to us, which is the CLOEXEC-pipe
    trick done for us. argv[0] is looked up on the *job's* PATH here (``posix_spawnp``
    would use ours), in ``execvpe``'s order and with its choice of error.

    glibc leaves its two internal signals (32 and 33) ignored in the child; no program can
    name them, and glibc installs its own handlers when it needs them.

    Raises:
        _SpawnFailed: the cwd or the command is missing or unusable.
    """
    try:
        os.chdir(spec.cwd)  # the child inherits it; relative paths resolve from it
    except OSError as exc:
        raise _SpawnFailed(*_describe_failure(spec, "chdir", exc.errno or 0)) from None
    argv0 = spec.argv[0]
    if "/" in argv0:
        candidates = [argv0]
    else:
        path = spec.env.get("PATH", os.defpath)
        candidates = [os.path.join(d, argv0) for d in path.split(os.pathsep)]
    file_actions = [(os.POSIX_SPAWN_DUP2, out_fd, 1), (os.POSIX_SPAWN_DUP2, err_fd, 2)]
    first_err = None
    last_err = errno_mod.ENOENT
    for candidate in candidates:
        if len(candidates) > 1 and not os.path.exists(candidate):
            continue  # cheaper than a failed spawn
        started_at = time.time()
        started_mono = time.monotonic()
        try:
            pid = os.posix_spawn(
                candidate, spec.argv, spec.env,
                file_actions=file_actions,
                setpgroup=0,
                setsigmask=(),  # explicitly empty: omitted would inherit our blocked set
                setsigdef=_DEFAULT_SIGNALS,
            )
        except OSError as exc:
            last_err = exc.errno or 0
            if last_err not in (errno_mod.ENOENT, errno_mod.ENOTDIR) and first_err is None:
                first_err = last_err
            continue
        except (ValueError, TypeError) as exc:  # what exec cannot take: a failure, not a crash
            raise _SpawnFailed(EXIT_CANNOT_EXECUTE, f"cannot execute argv[0] {argv0!r}: {exc}") from None
        return pid, started_mono, started_at
    raise _SpawnFailed(*_describe_failure(spec, "exec", first_err or last_err))


def _describe_failure(spec: _Spec, stage: str, err: int) -> tuple[int, str]:
    detail = f"[Errno {err}] {os.strerror(err)}" if err else "unknown error"
    not_found = err in (errno_mod.ENOENT, errno_mod.ENOTDIR)
    code = EXIT_NOT_FOUND if not_found else EXIT_CANNOT_EXECUTE
    if stage == "exec":
        what = f"argv[0] {spec.argv[0]!r}"
        if not_found:
            return code, f"{what} not found: {detail}"
        if err == errno_mod.EACCES:
            return code, f"{what} is not executable: {detail}"
        return code, f"cannot execute {what}: {detail}"
    if not_found:
        return code, f"cwd {spec.cwd!r} not found: {detail}"
    return code, f"cannot enter cwd {spec.cwd!r}: {detail}"


def _supervise(
    pid: int, started: float, timeout_s: float | None, grace_s: float,
    make_durable: Callable[[], None] = lambda: None,
    is_cancel: Callable[[], bool] = lambda: True,
) -> tuple[int, str | None, bool]:
    """Wait for the main process and clean up after it; returns ``(wait status, reason, durable)``.

    ``reason`` is ``"cancelled"`` or ``"timeout"`` when we asked the job to stop, else None.
    ``make_durable`` is called once the job has run ``DURABLE_AFTER_S``; ``durable`` says
    whether it was, and so whether the exit record is to be made durable too.
    ``is_cancel`` says whether a SIGTERM is meant for this job.
    Every other descendant is dead and reaped when this returns.
    """
    reason: str | None = None
    timeout_at = None if timeout_s is None else started + timeout_s
    durable_at: float | None = started + DURABLE_AFTER_S
    kill_at: float | None = None
    while True:
        _reap_others(pid)
        if _has_exited(pid):
            break
        now = time.monotonic()
        if durable_at is not None and now >= durable_at:
            make_durable()
            durable_at = None
        if reason is None and timeout_at is not None and now >= timeout_at:
            reason = "timeout"
            _signal_job(pid, signal.SIGTERM)
            kill_at = now + grace_s
        if kill_at is not None and now >= kill_at:
            _signal_job(pid, signal.SIGKILL)
            kill_at = None
            continue  # re-check for the exit before sleeping
        wake = [t for t in (kill_at, durable_at, timeout_at if reason is None else None) if t is not None]
        if wake:
            info = signal.sigtimedwait(_WAITED, max(0.0, min(wake) - now))
        else:
            info = signal.sigwaitinfo(_WAITED)
        if info is not None and info.si_signo == signal.SIGTERM and is_cancel():
            if reason is None:
                reason = "cancelled"
                _signal_job(pid, signal.SIGTERM)
                kill_at = time.monotonic() + grace_s
            else:  # asked again: do not wait out the grace period
                _signal_job(pid, signal.SIGKILL)
                kill_at = None
    _sweep(pid)
    _, status = os.waitpid(pid, 0)
    return status, reason, durable_at is None


def _has_exited(pid: int) -> bool:
    """True once the main process is a zombie; WNOWAIT leaves it unreaped (see _sweep)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _reap_others(main: int) -> None:
    """Reap exited re-parented descendants (never the main process)."""
    for child in _children():
        if child != main:
            try:
                os.waitpid(child, os.WNOHANG)
            except ChildProcessError:
                pass


def _signal_job(main: int, signum: int) -> None:
    """``signum`` to the job's group and to every re-parented descendant."""
    _kill(main, signum, group=True)
    if signum == signal.SIGTERM:
        _kill(main, signal.SIGCONT, group=True)  # a stopped process cannot act on SIGTERM
    for child in _children():
        if child != main:
            _kill(child, signum)
            if signum == signal.SIGTERM:
                _kill(child, signal.SIGCONT)


def _sweep(main: int) -> None:
    """SIGKILL and reap every descendant but the (exited, unreaped) main process.

    While the main process is an unreaped zombie its pid, which is the group id, cannot be
    reused, so ``killpg`` cannot hit a stranger. A process killed here hands its children to
    us (we are the subreaper), so repeat until the main process is our only child.
    """
    while True:
        _kill(main, signal.SIGKILL, group=True)
        others = [c for c in _children() if c != main]
        if not others:
            return
        for child in others:
            _kill(child, signal.SIGKILL)
        for child in others:
            try:
                os.waitpid(child, 0)
            except ChildProcessError:
                pass


def _kill(pid: int, signum: int, *, group: bool = False) -> None:
    try:
        if group:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except OSError:
        pass  # gone already, or no longer ours to signal


def _children(parent: int | None = None) -> list[int]:
    """The direct children (zombies included) of ``parent`` (default: us)."""
    me = os.getpid() if parent is None else parent
    try:
        with open(f"/proc/{me}/task/{me}/children", "rb") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        pass
    children = []  # no CONFIG_PROC_CHILDREN: scan every process's parent
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rpartition(b")")[2].split()
                if int(fields[1]) == me:
                    children.append(int(name))
            except (OSError, IndexError, ValueError):
                continue
    return children


def _record_spawn_failure(
    job_dir: str, exit_code: int, message: str, *, only_if_missing: bool = False
) -> None:
    path = os.path.join(job_dir, EXIT_FILE)
    if only_if_missing and os.path.exists(path):
        return
    try:
        os.makedirs(job_dir, mode=0o700, exist_ok=True)
        write_json_atomic(path, {
            "exit_code": exit_code,
            "signal": None,
            "signal_name": None,
            "reason": "spawn_failed",
            "ended_at": time.time(),
            "pid": None,
            "error": message,
        }, sync=True)  # rare, and the only account of what went wrong
    except (OSError, ValueError) as exc:  # ValueError: a path no system call takes
        _shim_log(job_dir, f"cannot record the spawn failure ({message}): {exc}")


def _orphan_record(info: Any) -> dict[str, Any]:
    """What ``exit.json`` would have said of a job's main process that outlived its shim,
    from the launcher's ``waitid`` of it."""
    signaled = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
    return {
        "exit_code": None if signaled else info.si_status,
        "signal": info.si_status if signaled else None,
        "signal_name": signal_name(info.si_status) if signaled else None,
        "reason": "signaled" if signaled else "exited",
        "ended_at": time.time(),
        "pid": info.si_pid,
        "error": "its shim died first",
    }


def _shim_log(job_dir: str, message: str) -> None:
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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    usage = ("usage: shim.py --serve [--report-timeout SECONDS] [--prefork N]"
             "  (requests on stdin, replies on stdout)\n")
    if not args or args[0] != "--serve" or len(args) % 2 != 1:
        sys.stderr.write(usage)
        return 2
    options: dict[str, Any] = {}
    for flag, value in zip(args[1::2], args[2::2]):
        try:
            if flag == "--report-timeout":
                options["report_timeout_s"] = float(value)
                if not options["report_timeout_s"] > 0:
                    raise ValueError(value)
            elif flag == "--prefork":
                options["prefork"] = int(value)
            else:
                raise ValueError(flag)
        except ValueError:
            sys.stderr.write(usage)
            return 2
    return serve(**options)


if __name__ == "__main__":
    sys.exit(main())
