"""The launcher loop (``--serve``): requests on stdin, replies and exit events on stdout.

One ``poll()`` over stdin and the pipes of the shims it forks (see the package docstring
for the protocol and the theory of operation). Each shim runs ``job.shim_main`` in a forked
copy of this process. Standard library only, like the rest of the package.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import sys
import time

from .forked import MAX_REPORT, Running, Shim, Waiting, read_line, read_some, stop_stuck
from .job import SHIM_IGNORES, WAITED, shim_main
from .oneshot import main as oneshot_main
from .procs import PR_SET_CHILD_SUBREAPER, detach_fds, load_libc, write_all
from .records import (
    EXIT_CANNOT_EXECUTE,
    EXIT_FILE,
    RUNTIME_FILE,
    RequestError,
    Spec,
    orphan_record,
    record_spawn_failure,
)

TYPE_CHECKING = False  # typing costs the launcher, and so every shim, ~2 MB of heap
if TYPE_CHECKING:
    from typing import Any

REPORT_TIMEOUT_S = 30.0  # a shim that has not reported by then is killed; the spawn fails
PREFORK = 2  # idle shims kept forked ahead of their requests
MAX_IDLE = 4  # idle shims kept for reuse after their jobs (at least PREFORK)
MAX_JOBS_PER_SHIM = 1000  # then it exits, so nothing a shim accumulates lasts forever
_MAX_LINE = 16 * 1024 * 1024


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
    for signum in SHIM_IGNORES:
        signal.signal(signum, signal.SIG_IGN)
    libc = load_libc()
    prctl = None if libc is None else libc.prctl  # resolved once, not in every shim
    subreaper = prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    # Everything imported so far is shared with every shim; keep the collector from
    # touching (and so copying) those pages.
    gc.freeze()
    return _Server(stdin_fd, stdout_fd, prctl, report_timeout_s, max(0, prefork), subreaper).run()


class _ReplyFailed(Exception):
    """Our stdout is gone: the daemon went away (the jobs do not need us)."""


class _TooLong(Exception):
    pass


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
        self.idle: list[Shim] = []
        self.max_idle = max(prefork, MAX_IDLE)
        self.waiting: dict[int, Waiting] = {}
        self.running: dict[int, Running] = {}  # by report fd: started jobs, until their exit line
        self.running_by_id: dict[str, Running] = {}
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
            spec = Spec(req)
        except RequestError as exc:
            message = f"bad request: {exc}"
            job_dir = req.get("job_dir")
            if isinstance(job_dir, str) and os.path.isabs(job_dir):
                record_spawn_failure(job_dir, EXIT_CANNOT_EXECUTE, message)
            self._reply({"id": req.get("id"), "ok": False, "error": message}, seq)
            return
        self._dispatch(spec, line, seq)

    def _dispatch(self, spec: Spec, line: bytes, seq: Any) -> None:
        """Hand the request to an idle shim, or fork one that has it already."""
        while self.idle:
            shim = self.idle.pop()  # the most recently used: its pages are the warmest
            try:
                # A pipe the shim is blocked reading: only a dead shim makes this fail.
                write_all(shim.spec_fd, line + b"\n")
            except OSError:
                shim.close()
                continue
            break
        else:
            try:
                shim = self._fork_shim(spec)
            except OSError as exc:
                message = f"cannot fork a shim: {exc}"
                record_spawn_failure(spec.job_dir, EXIT_CANNOT_EXECUTE, message, owner=spec.owner())
                self._reply({"id": spec.id, "ok": False, "error": message}, seq)
                return
        shim.jobs += 1
        waiting = Waiting("shim", shim.pid, shim.report_fd,
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
            write_all(running.shim.spec_fd, json.dumps({"cancel": req_id}).encode() + b"\n")
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
                self.orphan_ends[req_id] = orphan_record(info)

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
            write_all(self.stdout_fd, json.dumps(reply).encode() + b"\n")
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

    def _fork_shim(self, spec: Spec | None = None) -> Shim:
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
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, WAITED)
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
                shim_main(spec_r, report_w, self.prctl, spec)
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
        return Shim(pid, pidfd, spec_w, report_r)

    def _on_readable(self, waiting: Waiting) -> None:
        if read_line(waiting, waiting.fd):
            self._finish(waiting)

    def _forget(self, waiting: Waiting, *, keep_fd: bool = False) -> None:
        if self.waiting.get(waiting.fd) is waiting:
            del self.waiting[waiting.fd]
            if not keep_fd:
                self.poller.unregister(waiting.fd)
                if waiting.shim is not None:
                    waiting.shim.close()
                else:
                    os.close(waiting.fd)

    def _finish(self, waiting: Waiting) -> None:
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
                running = Running(waiting.shim, waiting.req_id, rest, report.get("pid"))
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

    def _on_exit_readable(self, running: Running) -> None:
        if read_line(running, running.shim.report_fd):
            self._exit_line(running)

    def _exit_line(self, running: Running) -> None:
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
            write_all(self.stdout_fd, json.dumps({"event": "exit", "id": running.req_id, "exit": record}).encode()
                       + b"\n")
        except OSError:
            raise _ReplyFailed() from None

    def _release(self, shim: Shim, said: bytes) -> None:
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

    def _on_timeout(self, waiting: Waiting) -> None:
        if self._drain(waiting):
            self._finish(waiting)
            return
        outcome = stop_stuck(waiting.pid, waiting.fd, kill_job=waiting.kind == "shim")
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

    def _drain(self, waiting: Waiting) -> bool:
        """Read what the pipe holds; True once a whole report (or EOF) is in."""
        while True:
            chunk = read_some(waiting.fd)
            if chunk is None:
                return False
            waiting.data += chunk
            if not chunk or b"\n" in waiting.data or len(waiting.data) > MAX_REPORT:
                return True

    def _record_failure(self, waiting: Waiting, message: str, *, overwrite: bool) -> None:
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
                detach_fds([report_w])
                job_dir = waiting.job_dir
                if overwrite or not os.path.exists(os.path.join(job_dir, RUNTIME_FILE)):
                    record_spawn_failure(job_dir, EXIT_CANNOT_EXECUTE, message,
                                          only_if_missing=not overwrite)
            finally:
                os._exit(0)
        os.close(report_w)
        os.set_blocking(report_r, False)
        recorder = Waiting("recorder", pid, report_r, time.monotonic() + self.report_timeout_s,
                            waiting.req_id, waiting.seq, waiting.job_dir, reply)
        self.waiting[report_r] = recorder
        self.poller.register(report_r, select.POLLIN)


def main(argv: list[str] | None = None) -> int:
    """The program ``__main__`` runs: ``--serve [--report-timeout SECONDS] [--prefork N]``, or
    ``--oneshot ATTEMPT_DIR`` (one job, in this process: ``oneshot``)."""
    args = sys.argv[1:] if argv is None else argv
    usage = ("usage: gpuplaned/shim/__main__.py --serve [--report-timeout SECONDS] [--prefork N]"
             "  (requests on stdin, replies on stdout)\n"
             "       gpuplaned/shim/__main__.py --oneshot ATTEMPT_DIR  (runs ATTEMPT_DIR/spec.json)\n")
    if args and args[0] == "--oneshot":
        if len(args) != 2 or not args[1]:
            sys.stderr.write(usage)
            return 2
        return oneshot_main(args[1])
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

