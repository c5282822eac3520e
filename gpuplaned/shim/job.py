"""The per-job shim: runs in a forked copy of the launcher, one job at a time.

Steps 1 to 5 of the package docstring's theory of operation: ``shim_main`` sets the shim up
and takes requests from its pipe; ``_run_job`` starts one job (``_start_child``), writes
its records and reports; ``_supervise`` waits for it, stops it on a cancel or its timeout,
and sweeps its descendants. Standard library only, like the rest of the package.
"""

from __future__ import annotations

import errno as errno_mod
import json
import os
import select
import signal
import time

from .procs import PR_SET_CHILD_SUBREAPER, children, detach_fds, kill, read_proc_stat, write_all
from .records import (
    EXIT_CANNOT_EXECUTE,
    EXIT_FILE,
    EXIT_NOT_FOUND,
    RUNTIME_FILE,
    STDERR_FILE,
    STDOUT_FILE,
    RequestError,
    Spec,
    exit_record,
    record_spawn_failure,
    runtime_record,
    shim_log,
    sync_paths,
    write_json_atomic,
)

TYPE_CHECKING = False  # typing costs the launcher, and so every shim, ~2 MB of heap
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# What a shim takes from sigtimedwait (blocked from before its fork: the launcher blocks
# them), and what it ignores (ignored in the launcher already, so that shims inherit it).
WAITED = frozenset({signal.SIGCHLD, signal.SIGTERM})
SHIM_IGNORES = (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE)
_DEFAULT_SIGNALS = tuple(sorted(signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}))
# A job's records are fsynced once it has run this long, not before it starts (step 3 of
# the package docstring).
DURABLE_AFTER_S = 0.5


class _SpawnFailed(Exception):
    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.message = message


def shim_main(spec_fd: int, report_fd: int, prctl: Any, spec: Spec | None) -> None:
    """Set up, then start and supervise jobs (``spec``, then each request read from
    ``spec_fd``) one at a time, until EOF on ``spec_fd``.

    ``prctl`` is libc's (None without ctypes). SIGINT/SIGHUP/SIGPIPE are ignored already
    (inherited from the launcher) and SIGTERM/SIGCHLD blocked (before the fork).
    """
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # whatever the launcher does with it, we wait
    subreaper = prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    os.close(detach_fds([spec_fd, report_fd]))  # fd 0 is /dev/null now: the jobs' stdin
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
        _discard_pending(WAITED)  # a cancel meant for the job before, or a stray SIGCHLD
        try:
            reusable = _run_job(spec, report_fd, subreaper, me, shim_stat, requests)
        except BaseException as exc:
            shim_log(spec.job_dir, f"shim failed: {exc!r}")
            raise
        if not reusable:
            return
        spec = None


def _next_spec(line: bytes, report_fd: int) -> Spec | None:
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
        return Spec(request)
    except RequestError as exc:
        try:
            write_all(report_fd, json.dumps({"ok": False, "error": f"bad request: {exc}"}).encode() + b"\n")
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


def _run_job(spec: Spec, report_fd: int, subreaper: bool, me: int,
             shim_stat: tuple[str, int] | None, requests: _Requests) -> bool:
    """Start and supervise one job; True when it ended (or failed to start) and was
    reported, so that this shim may take another (False: the launcher is gone, and the shim
    is to exit)."""
    def report(obj: dict[str, Any]) -> bool:
        try:
            write_all(report_fd, json.dumps(obj).encode() + b"\n")
            return True
        except OSError:
            return False  # the launcher died; the job goes on regardless

    try:
        grown = _make_job_dir(spec.job_dir)
    except OSError as exc:
        message = f"cannot create job_dir {spec.job_dir!r}: {exc}"
        record_spawn_failure(spec.job_dir, EXIT_CANNOT_EXECUTE, message, owner=spec.owner())
        return report({"ok": False, "error": message})
    if not subreaper:
        # Orphaned descendants will go to init instead of us: cancel still reaches the
        # job's process group, but not what escaped it.
        shim_log(spec.job_dir, "cannot become a child subreaper")
    try:
        if not grown:
            _remove_records(spec.job_dir)
        out_fd, err_fd = _open_logs(spec.job_dir)
    except OSError as exc:
        message = f"cannot open the logs in job_dir {spec.job_dir!r}: {exc}"
        record_spawn_failure(spec.job_dir, EXIT_CANNOT_EXECUTE, message, owner=spec.owner())
        return report({"ok": False, "error": message})
    try:
        pid, started_mono, started_at = _start_child(spec, out_fd, err_fd)
    except _SpawnFailed as failure:
        record_spawn_failure(spec.job_dir, failure.exit_code, failure.message, owner=spec.owner())
        return report({"ok": False, "error": failure.message})
    finally:
        os.close(out_fd)
        os.close(err_fd)
    child_stat = read_proc_stat(pid)
    runtime = runtime_record(spec, shim_pid=me, shim_start_time=shim_stat[1] if shim_stat else None,
                             pid=pid, start_time=child_stat[1] if child_stat else None,
                             started_at=started_at)
    runtime_path = os.path.join(spec.job_dir, RUNTIME_FILE)
    try:
        write_json_atomic(runtime_path, runtime)
    except OSError as exc:  # the job runs anyway; say so where someone will look
        shim_log(spec.job_dir, f"cannot write {RUNTIME_FILE}: {exc}")
        runtime_path = None

    def make_durable() -> None:
        # The file, its name (the rename is not covered by the file's fsync: on ext4 it
        # lands in a later journal commit) and the names of the directories made for it.
        try:
            sync_paths([p for p in (runtime_path, spec.job_dir, *grown) if p])
        except OSError as exc:
            shim_log(spec.job_dir, f"cannot sync {RUNTIME_FILE}: {exc}")
    report({k: runtime[k] for k in _REPORTED} | {"ok": True})

    status, reason, durable = _supervise(pid, started_mono, spec.timeout_s, spec.grace_s, make_durable,
                                         lambda: _cancels_for(requests, spec.id))
    if os.WIFEXITED(status):
        exit_code, signum = os.WEXITSTATUS(status), None
        reason = reason or "exited"
    else:
        exit_code, signum = None, os.WTERMSIG(status)
        reason = reason or "signaled"
    record = exit_record(reason, exit_code=exit_code, signum=signum, pid=pid, owner=spec.owner())
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
    spec = Spec(sample)
    json.dumps(runtime_record(spec, shim_pid=1, shim_start_time=1, pid=1, start_time=1,
                              started_at=time.time()), sort_keys=True)
    json.dumps({"ok": True, "pid": 1, "started_at": 1.5})


_REPORTED = ("shim_pid", "shim_start_time", "pid", "pgid", "start_time", "started_at")


def _remove_records(job_dir: str) -> None:
    """Remove the ``runtime.json``/``exit.json`` of an earlier spawn in a reused job dir: they
    must not pass for the next one's."""
    for name in (EXIT_FILE, RUNTIME_FILE):
        try:
            os.unlink(os.path.join(job_dir, name))
        except FileNotFoundError:
            pass


def _open_logs(job_dir: str) -> tuple[int, int]:
    """``(stdout fd, stderr fd)``: the job dir's logs, opened to append (created 0600).

    Raises:
        OSError: either cannot be opened (neither is left open).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    out_fd = os.open(os.path.join(job_dir, STDOUT_FILE), flags, 0o600)
    try:
        err_fd = os.open(os.path.join(job_dir, STDERR_FILE), flags, 0o600)
    except OSError:
        os.close(out_fd)
        raise
    return out_fd, err_fd


def _make_job_dir(job_dir: str) -> list[str]:
    """Create ``job_dir`` (0700; missing parents with the default mode).

    Returns the directories that gained an entry, deepest first (to be fsynced for the new
    names to be durable); ``[]`` when ``job_dir`` existed. One ``mkdir`` for each directory made
    and one for each found missing: a first attempt's dir (its job's folder missing too) takes
    three, a later attempt's one.

    Raises:
        OSError: it cannot be created, or exists and is not a directory.
    """
    made: list[str] = []
    missing = [job_dir]  # deepest first
    while missing:
        path = missing[-1]
        try:
            os.mkdir(path, 0o700 if path == job_dir else 0o777)
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if parent == path:
                raise
            missing.append(parent)
            continue
        except FileExistsError:  # job_dir was there, or a parent was made meanwhile (by another shim)
            if not os.path.isdir(path):
                raise NotADirectoryError(errno_mod.ENOTDIR, "exists and is not a directory", path) from None
        else:
            made.append(path)
        missing.pop()
    return [os.path.dirname(path) for path in reversed(made)]


def _start_child(spec: Spec, out_fd: int, err_fd: int) -> tuple[int, float, float]:
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


def _describe_failure(spec: Spec, stage: str, err: int) -> tuple[int, str]:
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
    forward: frozenset[int] = frozenset(),
    forwarded: list[int] | None = None,
) -> tuple[int, str | None, bool]:
    """Wait for the main process and clean up after it; returns ``(wait status, reason, durable)``.

    ``reason`` is ``"cancelled"`` or ``"timeout"`` when we asked the job to stop, else None.
    ``make_durable`` is called once the job has run ``DURABLE_AFTER_S``; ``durable`` says
    whether it was, and so whether the exit record is to be made durable too.
    ``is_cancel`` says whether a SIGTERM is meant for this job.
    Each signal of ``forward`` (blocked by the caller, like ``WAITED``) that arrives is sent on
    to the job's process group and appended to ``forwarded``; supervision goes on.
    Every other descendant is dead and reaped when this returns.
    """
    reason: str | None = None
    timeout_at = None if timeout_s is None else started + timeout_s
    durable_at: float | None = started + DURABLE_AFTER_S
    kill_at: float | None = None
    waited = WAITED | forward
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
            info = signal.sigtimedwait(waited, max(0.0, min(wake) - now))
        else:
            info = signal.sigwaitinfo(waited)
        if info is not None and info.si_signo in forward:
            kill(pid, info.si_signo, group=True)
            if forwarded is not None:
                forwarded.append(info.si_signo)
            continue
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
    for child in children():
        if child != main:
            try:
                os.waitpid(child, os.WNOHANG)
            except ChildProcessError:
                pass


def _signal_job(main: int, signum: int) -> None:
    """``signum`` to the job's group and to every re-parented descendant."""
    kill(main, signum, group=True)
    if signum == signal.SIGTERM:
        kill(main, signal.SIGCONT, group=True)  # a stopped process cannot act on SIGTERM
    for child in children():
        if child != main:
            kill(child, signum)
            if signum == signal.SIGTERM:
                kill(child, signal.SIGCONT)


def _sweep(main: int) -> None:
    """SIGKILL and reap every descendant but the (exited, unreaped) main process.

    While the main process is an unreaped zombie its pid, which is the group id, cannot be
    reused, so ``killpg`` cannot hit a stranger. A process killed here hands its children to
    us (we are the subreaper), so repeat until the main process is our only child.
    """
    while True:
        kill(main, signal.SIGKILL, group=True)
        others = [c for c in children() if c != main]
        if not others:
            return
        for child in others:
            kill(child, signal.SIGKILL)
        for child in others:
            try:
                os.waitpid(child, 0)
            except ChildProcessError:
                pass
