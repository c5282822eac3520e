"""The job launcher ("zygote") and the per-job shim: standard library only, runnable by path.

The runner starts ``python -I -S /abs/path/shim.py --serve`` once. That process, the
**launcher**, reads newline-delimited JSON requests on stdin and answers each with one JSON
line on stdout, in order:

    {"op": "spawn", "id": ..., "job_dir": "/abs", "argv": [...], "cwd": "/abs", "env": {...},
     "timeout_s": float | null, "grace_s": float}
      -> {"id": ..., "ok": true, "shim_pid", "shim_start_time", "pid", "pgid", "start_time"}
      -> {"id": ..., "ok": false, "error": "argv[0] 'nosuch' not found: ..."}
    {"op": "ping"} -> {"ok": true, "pong": true}

On EOF it exits; the jobs it started keep running. It must not import gpuplaned: it runs
by file path in isolated mode.

Theory of operation
-------------------
Starting an interpreter costs ~35 ms, so the launcher ``fork()``s a **shim** per job instead
(single-threaded, so the fork is safe; the shim never returns into the launcher's code and
leaves through ``os._exit``). The shim:

1. ``setsid()``: its own session, so signals aimed at the daemon's group or terminal miss it;
   becomes a child subreaper, so descendants that lose their parent (including ones that
   ``setsid()`` out of the job's group) are re-parented to it and stay within reach;
   ignores SIGINT/SIGHUP/SIGPIPE and keeps SIGTERM/SIGCHLD blocked, taking them one at a
   time from ``sigtimedwait`` (no handlers, no races with ``waitpid``).
2. Removes ``runtime.json``/``exit.json`` left in the job dir by an earlier spawn, opens
   ``stdout.log``/``stderr.log`` there (append, 0644), enters the job's cwd and starts the
   job's **main process** with ``posix_spawn``: own process group, stdin ``/dev/null``,
   stdout/stderr straight into the files (no pipe the daemon could break), default signal
   dispositions, an empty mask, no other fds, argv[0] looked up on the job env's PATH. A
   failed exec comes back as an errno (see ``_start_child``).
3. Writes ``runtime.json`` (temp file, fsync, rename) and reports to the launcher.
4. Waits. SIGTERM (cancel) or ``timeout_s`` sends SIGTERM (and SIGCONT) to the group and to
   re-parented descendants, then SIGKILL after ``grace_s``; a second SIGTERM kills at once.
5. When the main process has exited it is left a zombie, so its pid (the group id) cannot
   be reused, while the group and every other descendant is SIGKILLed and reaped; only
   then is it reaped itself and ``exit.json`` written (temp file, fsync, rename). The shim
   exits 0.

A spawn that fails (no such command, missing cwd, permission denied) gets an ``ok: false``
reply and an ``exit.json`` with reason ``spawn_failed``, exit code 127 (not found) or 126.
"""

from __future__ import annotations

import ctypes
import errno as errno_mod
import gc
import json
import os
import signal
import sys
import time
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


def write_json_atomic(path: str, obj: dict[str, Any]) -> None:
    """Write ``obj`` to ``path`` so readers see the old file or the whole new one."""
    tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        data = json.dumps(obj, sort_keys=True).encode() + b"\n"
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)


# ---------------------------------------------------------------------------------------
# The launcher.


def serve(stdin_fd: int = 0, stdout_fd: int = 1) -> int:
    """Answer requests on ``stdin_fd`` until EOF; returns the exit code."""
    # Shims are never waited for here: the kernel reaps them, and after we are gone
    # they are re-parented like any orphan.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    libc = _load_libc()
    # Everything imported so far is shared with every shim; keep the collector from
    # touching (and so copying) those pages.
    gc.freeze()
    buf = b""
    while True:
        nl = buf.find(b"\n")
        if nl < 0:
            if len(buf) > _MAX_LINE:
                sys.stderr.write("gpuplane launcher: request line too long; exiting\n")
                return 1
            chunk = os.read(stdin_fd, 65536)
            if not chunk:
                return 0
            buf += chunk
            continue
        line, buf = buf[:nl], buf[nl + 1:]
        if not line.strip():
            continue
        reply = handle_request(line, libc)
        try:
            _write_all(stdout_fd, json.dumps(reply).encode() + b"\n")
        except OSError:  # the daemon went away; the jobs do not need us
            return 0


def handle_request(line: bytes, libc: Any = None) -> dict[str, Any]:
    """One request line -> one reply dict (spawning forks a shim)."""
    try:
        req = json.loads(line)
        if not isinstance(req, dict):
            raise RequestError("a request must be a JSON object")
    except (ValueError, RecursionError) as exc:
        return {"id": None, "ok": False, "error": f"bad request: {exc}"}
    op = req.get("op")
    if op == "ping":
        reply: dict[str, Any] = {"ok": True, "pong": True}
        if "id" in req:
            reply["id"] = req["id"]
        return reply
    if op != "spawn":
        return {"id": req.get("id"), "ok": False, "error": f"bad request: unknown op {op!r}"}
    try:
        spec = _Spec(req)
    except RequestError as exc:
        message = f"bad request: {exc}"
        job_dir = req.get("job_dir")
        if isinstance(job_dir, str) and os.path.isabs(job_dir):
            _record_spawn_failure(job_dir, EXIT_CANNOT_EXECUTE, message)
        return {"id": req.get("id"), "ok": False, "error": message}
    reply = _launch(spec, libc)
    reply["id"] = spec.id
    return reply


def _load_libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _launch(spec: _Spec, libc: Any) -> dict[str, Any]:
    """Fork a shim for ``spec`` and return its report."""
    report_r, report_w = os.pipe()
    # Blocked before the fork, so a SIGTERM that reaches the shim early is queued for its
    # wait loop instead of killing it.
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WAITED)
    try:
        pid = os.fork()
    except OSError as exc:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        os.close(report_r)
        os.close(report_w)
        message = f"cannot fork a shim: {exc}"
        _record_spawn_failure(spec.job_dir, EXIT_CANNOT_EXECUTE, message)
        return {"ok": False, "error": message}
    if pid == 0:
        code = 1
        try:
            os.close(report_r)
            _run_shim(spec, report_w, libc)
            code = 0
        except BaseException as exc:  # noqa: BLE001 - nothing may escape into the launcher's loop
            _shim_log(spec.job_dir, f"shim failed: {exc!r}")
        finally:
            os._exit(code)
    signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    os.close(report_w)
    data = b""
    try:
        while not data.endswith(b"\n"):
            chunk = os.read(report_r, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(report_r)
    try:
        report = json.loads(data)
    except ValueError:
        message = f"shim {pid} exited before reporting"
        if not os.path.exists(os.path.join(spec.job_dir, RUNTIME_FILE)):
            # Nothing was started, unless the shim died between runtime.json and its
            # report; then the job runs, and runtime.json is what the runner reconciles.
            _record_spawn_failure(spec.job_dir, EXIT_CANNOT_EXECUTE, message, only_if_missing=True)
        return {"ok": False, "error": message}
    return report


# ---------------------------------------------------------------------------------------
# The shim (runs in a forked copy of the launcher).


def _run_shim(spec: _Spec, report_fd: int, libc: Any) -> None:
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the launcher ignores it to auto-reap
    for signum in _SHIM_IGNORES:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, _WAITED)
    if libc is None or libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        # Orphaned descendants will go to init instead of us: cancel still reaches the
        # job's process group, but not what escaped it.
        _shim_log(spec.job_dir, "cannot become a child subreaper")
    # Away from the daemon's pipes: holding them would keep the daemon from seeing EOF.
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    keep = sorted({devnull, report_fd})
    _close_fds_except(keep)

    def report(obj: dict[str, Any]) -> None:
        try:
            _write_all(report_fd, json.dumps(obj).encode() + b"\n")
        except OSError:
            pass  # the launcher died; the job goes on regardless
        os.close(report_fd)

    try:
        os.makedirs(spec.job_dir, exist_ok=True)
        # A reused job dir: records of an earlier spawn must not pass for this one's.
        for name in (EXIT_FILE, RUNTIME_FILE):
            try:
                os.unlink(os.path.join(spec.job_dir, name))
            except FileNotFoundError:
                pass
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        out_fd = os.open(os.path.join(spec.job_dir, STDOUT_FILE), flags, 0o644)
        err_fd = os.open(os.path.join(spec.job_dir, STDERR_FILE), flags, 0o644)
    except OSError as exc:
        message = f"cannot open the logs in job_dir {spec.job_dir!r}: {exc}"
        _record_spawn_failure(spec.job_dir, EXIT_CANNOT_EXECUTE, message)
        report({"ok": False, "error": message})
        return
    try:
        pid, started_mono, started_at = _start_child(spec, out_fd, err_fd)
    except _SpawnFailed as failure:
        _record_spawn_failure(spec.job_dir, failure.exit_code, failure.message)
        report({"ok": False, "error": failure.message})
        return
    finally:
        os.close(out_fd)
        os.close(err_fd)
        os.close(devnull)
    me = os.getpid()
    shim_stat = read_proc_stat(me)
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
    try:
        write_json_atomic(os.path.join(spec.job_dir, RUNTIME_FILE), runtime)
    except OSError as exc:  # the job runs anyway; say so where someone will look
        _shim_log(spec.job_dir, f"cannot write {RUNTIME_FILE}: {exc}")
    report({k: runtime[k] for k in ("shim_pid", "shim_start_time", "pid", "pgid", "start_time")}
           | {"ok": True})

    status, reason = _supervise(pid, started_mono, spec.timeout_s, spec.grace_s)
    if os.WIFEXITED(status):
        exit_code, signum = os.WEXITSTATUS(status), None
        reason = reason or "exited"
    else:
        exit_code, signum = None, os.WTERMSIG(status)
        reason = reason or "signaled"
    write_json_atomic(os.path.join(spec.job_dir, EXIT_FILE), {
        "exit_code": exit_code,
        "signal": signum,
        "signal_name": signal_name(signum) if signum is not None else None,
        "reason": reason,
        "ended_at": time.time(),
        "pid": pid,
        "error": None,
    })


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
    pid: int, started: float, timeout_s: float | None, grace_s: float
) -> tuple[int, str | None]:
    """Wait for the main process and clean up after it; returns ``(wait status, reason)``.

    ``reason`` is ``"cancelled"`` or ``"timeout"`` when we asked the job to stop, else None.
    Every other descendant is dead and reaped when this returns.
    """
    reason: str | None = None
    timeout_at = None if timeout_s is None else started + timeout_s
    kill_at: float | None = None
    while True:
        _reap_others(pid)
        if _has_exited(pid):
            break
        now = time.monotonic()
        if reason is None and timeout_at is not None and now >= timeout_at:
            reason = "timeout"
            _signal_job(pid, signal.SIGTERM)
            kill_at = now + grace_s
        if kill_at is not None and now >= kill_at:
            _signal_job(pid, signal.SIGKILL)
            kill_at = None
            continue  # re-check for the exit before sleeping
        wake = [t for t in (kill_at, timeout_at if reason is None else None) if t is not None]
        if wake:
            info = signal.sigtimedwait(_WAITED, max(0.0, min(wake) - now))
        else:
            info = signal.sigwaitinfo(_WAITED)
        if info is not None and info.si_signo == signal.SIGTERM:
            if reason is None:
                reason = "cancelled"
                _signal_job(pid, signal.SIGTERM)
                kill_at = time.monotonic() + grace_s
            else:  # asked again: do not wait out the grace period
                _signal_job(pid, signal.SIGKILL)
                kill_at = None
    _sweep(pid)
    _, status = os.waitpid(pid, 0)
    return status, reason


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


def _children() -> list[int]:
    """Our direct children (zombies included)."""
    me = os.getpid()
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
        os.makedirs(job_dir, exist_ok=True)
        write_json_atomic(path, {
            "exit_code": exit_code,
            "signal": None,
            "signal_name": None,
            "reason": "spawn_failed",
            "ended_at": time.time(),
            "pid": None,
            "error": message,
        })
    except OSError as exc:
        _shim_log(job_dir, f"cannot record the spawn failure ({message}): {exc}")


def _shim_log(job_dir: str, message: str) -> None:
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()}: {message}\n"
    try:
        fd = os.open(os.path.join(job_dir, SHIM_LOG_FILE),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    except OSError:
        return
    try:
        os.write(fd, line.encode(errors="replace"))
    except OSError:
        pass
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["--serve"]:
        sys.stderr.write("usage: shim.py --serve  (requests on stdin, replies on stdout)\n")
        return 2
    return serve()


if __name__ == "__main__":
    sys.exit(main())
