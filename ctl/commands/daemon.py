"""``gpuplanectl daemon`` starts gpuplaned in the background; ``gpuplanectl shutdown`` stops it.

``daemon`` launches ``python -m gpuplaned`` with this interpreter, detached (its own session,
stdin from /dev/null, stdout and stderr appended to ``<home>/logs/gpuplaned.log``), then waits
until the port-file names the new process and ``GET /api/v1/daemon`` says READY. If the
process exits first, it reports the exit code, the reason gpuplaned gave (a configuration
error, an HTTP port another program holds) and the tail of what it logged. When a daemon
already answers in the runtime dir, ``daemon`` says so and exits 0.

``shutdown`` asks the daemon to stop, then waits until its process has exited and its
port-file is gone.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from gpuplanectl import render
from gpuplanectl.client import DaemonClient, DaemonUnreachable, NoDaemon
from gpuplanectl.commands import Globals, JsonOption, connect, fail, globals_of, reporting
from gpuplanectl.exit_codes import EXIT_ENDPOINT_BUSY, EXIT_FAILURE, EXIT_USAGE

from gpuplaned.protocol.discovery import PortFileError, pid_alive, read_portfile
from gpuplaned.protocol.errors import ApiError, ErrorCode

LOG_NAME = "gpuplaned.log"
LOG_TAIL_LINES = 20
POLL_INTERVAL = 0.05
# gpuplaned gives its actors 20 s (daemon.STOP_DEADLINE) to stop, then cleans up.
SHUTDOWN_TIMEOUT = 25.0


def daemon(
    ctx: typer.Context,
    home: Annotated[str | None, typer.Option("--home", metavar="DIR", show_default=False,
                                             help="Data dir [env GPUPLANE_HOME; default ~/.local/share/gpuplane].")] = None,
    config: Annotated[str | None, typer.Option("--config", metavar="FILE", show_default=False,
                                               help="TOML config [default ~/.config/gpuplane/gpuplaned.toml].")] = None,
    listen: Annotated[str | None, typer.Option("--listen", metavar="URL", show_default=False,
                                               help="Explicit control endpoint: unix:///abs/path or tcp://127.0.0.1:PORT.")] = None,
    role: Annotated[str | None, typer.Option("--role", metavar="ROLE", show_default=False,
                                             help="all (default), server or agent.")] = None,
    log_level: Annotated[str | None, typer.Option("--log-level", metavar="LEVEL", show_default=False,
                                                  help="debug, info, warning or error.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", metavar="SECONDS", min=0.0,
                                           help="How long to wait for READY.")] = 20.0,
    json_output: JsonOption = False,
    daemon_args: Annotated[list[str] | None, typer.Argument(
        metavar="-- GPUPLANED_ARGS", show_default=False,
        help="More gpuplaned arguments, after `--` (e.g. -- --owner-pid 1234).")] = None,
) -> None:
    """Start gpuplaned in the background and wait until it is READY.

    A no-op (exit 0) when a daemon already answers in the runtime dir; one that is shutting
    down is waited for, then replaced. If gpuplaned exits before it is ready, prints the end
    of its log and exits with its exit code (2: bad flags or configuration, 3: another
    daemon owns the endpoint).
    """
    g = globals_of(ctx)
    with reporting(g, json_output):
        running = _running_daemon(g, timeout)
    if running is not None and running["state"] in ("STOPPING", "CLOSED"):
        # On its way out: let it finish, then start a fresh one in its place.
        if not _wait_stopped(g.runtime_dir, running["pid"], SHUTDOWN_TIMEOUT):
            fail(json_output, ErrorCode.UNAVAILABLE,
                 f"gpuplaned (pid {running['pid']}) is shutting down and has not exited after "
                 f"{SHUTDOWN_TIMEOUT:g} s", {"pid": running["pid"]})
        running = None
    if running is not None:
        _report_running(running, json_output)
        return

    log_path = daemon_home(home, config, os.environ) / "logs" / LOG_NAME
    argv = [sys.executable, "-m", "gpuplaned", "--runtime-dir", str(g.runtime_dir)]
    for flag, value in (("--home", home), ("--config", config), ("--listen", listen),
                        ("--role", role), ("--log-level", log_level)):
        if value is not None:
            argv += [flag, value]
    argv += daemon_args or []
    try:
        pid, log_start = _spawn_detached(argv, log_path)
    except OSError as exc:
        fail(json_output, ErrorCode.INTERNAL, f"cannot start gpuplaned: {exc}", {"log": str(log_path)})

    with reporting(g, json_output):
        outcome = _wait_ready(g, pid, timeout)
    if isinstance(outcome, dict):
        if json_output:
            render.print_json({"started": True, "daemon": outcome, "log": str(log_path)})
        else:
            print(f"gpuplaned {outcome['version']} started (pid {pid}): {outcome['state']}, "
                  f"listening on {render.endpoint_text(outcome['endpoints'])}")
            print(f"log: {log_path}")
        return

    if outcome is None:  # still alive but not READY in time; it keeps trying in the background
        fail(json_output, ErrorCode.UNAVAILABLE,
             f"gpuplaned (pid {pid}) did not become READY within {timeout:g} s; it is still starting",
             {"pid": pid, "log": str(log_path)},
             hint=f"Its log: {log_path}. Check again with `{g.ctl} status`.")

    exit_code = outcome
    if exit_code == EXIT_ENDPOINT_BUSY:
        # Another daemon won the race for this runtime dir since we looked: that one is fine.
        with reporting(g, json_output):
            running = _running_daemon(g, timeout)
        if running is not None:
            _report_running(running, json_output)
            return
    tail = _log_tail(log_path, log_start)
    code = {EXIT_USAGE: ErrorCode.BAD_REQUEST, EXIT_ENDPOINT_BUSY: ErrorCode.CONFLICT}.get(exit_code, ErrorCode.UNAVAILABLE)
    if exit_code < 0:
        text = f"gpuplaned was killed by signal {-exit_code} before it was ready"
    else:
        text = f"gpuplaned exited with code {exit_code} before it was ready"
    reason = _reason(tail)
    if reason:
        text = f"{text}: {reason}"
    shown = "\n".join(f"  {line}" for line in tail) or "  (it logged nothing)"
    fail(json_output, code, text, {"exit_code": exit_code, "reason": reason, "log": str(log_path), "log_tail": tail},
         text=f"{text}; the end of {log_path}:\n{shown}",
         exit_code=exit_code if exit_code in (EXIT_USAGE, EXIT_ENDPOINT_BUSY) else EXIT_FAILURE)


def shutdown(
    ctx: typer.Context,
    timeout: Annotated[float, typer.Option("--timeout", metavar="SECONDS", min=0.0,
                                           help="How long to wait for the daemon to exit.")] = SHUTDOWN_TIMEOUT,
    json_output: JsonOption = False,
) -> None:
    """Stop the daemon and wait until it has exited.

    The daemon stops its actors (the store last), removes its port-file and exits.
    """
    g = globals_of(ctx)
    with reporting(g, json_output):
        client = connect(g)
        if client.portfile is None:  # a remote daemon: no pid or port-file of it to watch here
            _shutdown_remote(client, timeout, json_output)
            return
        pid = client.portfile.pid
        try:
            client.post("/api/v1/daemon/shutdown")
        except ApiError as exc:
            if exc.code is not ErrorCode.STOPPING:  # already on its way down: just wait
                raise
    if not _wait_stopped(g.runtime_dir, pid, timeout):
        fail(json_output, ErrorCode.UNAVAILABLE, f"gpuplaned (pid {pid}) has not exited after {timeout:g} s",
             {"pid": pid}, hint=f"It may still be stopping its actors; check with `{g.ctl} status`.")
    if json_output:
        render.print_json({"pid": pid, "stopped": True})
    else:
        print(f"gpuplaned (pid {pid}) stopped")


def _shutdown_remote(client: DaemonClient, timeout: float, json_output: bool) -> None:
    """Ask the daemon behind ``client`` (its HTTP front) to stop, then wait until the front no
    longer answers: it closes as the daemon goes down."""
    pid = client.get("/api/v1/daemon")["pid"]
    try:
        client.post("/api/v1/daemon/shutdown")
    except ApiError as exc:
        if exc.code is not ErrorCode.STOPPING:  # already on its way down: just wait
            raise
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.get("/api/v1/daemon")
        except DaemonUnreachable:
            break  # the front is down
        except ApiError:
            pass  # still up, answering "stopping" or the like
        if time.monotonic() >= deadline:
            raise ApiError(ErrorCode.UNAVAILABLE, f"gpuplaned (pid {pid}) at {client.endpoint} still answers after "
                           f"{timeout:g} s", {"pid": pid, "server": client.endpoint})
        time.sleep(POLL_INTERVAL)
    if json_output:
        render.print_json({"pid": pid, "stopped": True})
    else:
        print(f"gpuplaned (pid {pid}) at {client.endpoint} stopped")


def daemon_home(flag: str | None, config: str | None, env: Mapping[str, str]) -> Path:
    """The daemon's data dir, by its rules: --home, else $GPUPLANE_HOME, else the config file's
    ``home``, else ~/.local/share/gpuplane.

    The config file is read on a best-effort basis: when it is broken the daemon reports that
    itself (into the log under the default home).
    """
    if flag:
        return Path(flag).expanduser().absolute()
    if env.get("GPUPLANE_HOME"):
        return Path(env["GPUPLANE_HOME"]).expanduser().absolute()
    if config:
        path = Path(config).expanduser()
    else:
        base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        path = Path(base) / "gpuplane" / "gpuplaned.toml"
    try:
        import tomllib  # only here: most invocations never read a config

        home = tomllib.loads(path.read_text(encoding="utf-8")).get("home")
    except (OSError, ValueError, RecursionError):  # the daemon itself says what is wrong with the file
        home = None
    if isinstance(home, str) and home:
        return Path(home).expanduser().absolute()
    return Path("~/.local/share/gpuplane").expanduser()


def _running_daemon(g: Globals, timeout: float) -> dict[str, Any] | None:
    """The daemon that answers in the runtime dir (waiting for one that is starting), or None.

    Raises:
        ApiError: it answered with an error other than "not ready yet".
    """
    try:
        client = DaemonClient.discover(g.runtime_dir, timeout=5.0)
        return client.get("/api/v1/daemon")
    except (NoDaemon, DaemonUnreachable):
        # Nothing there, or a port-file whose pid lives but whose socket does not answer
        # (a reused pid, a wedged daemon): gpuplaned's own endpoint claim tells these apart.
        return None
    except ApiError as exc:
        if exc.code is not ErrorCode.NOT_READY:
            raise
        info = _wait_ready(g, client.portfile.pid, timeout, child=False)
        if not isinstance(info, dict):
            raise ApiError(ErrorCode.UNAVAILABLE,
                           f"gpuplaned (pid {client.portfile.pid}) is starting but did not become "
                           f"READY within {timeout:g} s") from None
        return info


def _report_running(info: dict[str, Any], json_output: bool) -> None:
    if json_output:
        render.print_json({"started": False, "daemon": info})
    else:
        print(f"gpuplaned is already running (pid {info['pid']}, {info['state']}) "
              f"on {render.endpoint_text(info['endpoints'])}")


def _spawn_detached(argv: list[str], log_path: Path) -> tuple[int, int]:
    """Start ``argv`` in its own session with stdio on /dev/null and ``log_path``.

    posix_spawn rather than subprocess.Popen: this process deliberately leaves the child
    running, and a Popen object would warn about that when it is collected.

    Returns:
        The child's pid, and the log's size before it started (where its output begins).
    """
    log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        log_start = os.fstat(log_fd).st_size
        file_actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, log_fd, 1),
            (os.POSIX_SPAWN_DUP2, log_fd, 2),
        ]
        pid = os.posix_spawn(argv[0], argv, dict(os.environ), file_actions=file_actions, setsid=True)
    finally:
        os.close(log_fd)
    return pid, log_start


def _wait_ready(g: Globals, pid: int, timeout: float, *, child: bool = True) -> dict[str, Any] | int | None:
    """Wait until daemon ``pid`` is published in the runtime dir and READY.

    Args:
        child: ``pid`` is our child, so its exit can be collected (and must be, or it
            lingers as a zombie that still looks alive).

    Returns:
        Its ``GET /api/v1/daemon`` body once READY; its exit code if it exited first; None
        when ``timeout`` passed.
    """
    deadline = time.monotonic() + timeout
    while True:
        if child:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
        elif not pid_alive(pid):
            return EXIT_FAILURE
        try:
            client = DaemonClient.discover(g.runtime_dir, timeout=5.0)
            if client.portfile.pid == pid:
                info = client.get("/api/v1/daemon")
                if info.get("state") == "READY":
                    return info
        except (NoDaemon, DaemonUnreachable):
            pass
        except ApiError as exc:
            if exc.code is not ErrorCode.NOT_READY:
                raise
        if time.monotonic() >= deadline:
            return None
        time.sleep(POLL_INTERVAL)


def _wait_stopped(runtime_dir: Path, pid: int, timeout: float) -> bool:
    """Wait until process ``pid`` has exited and the port-file no longer names it."""
    deadline = time.monotonic() + timeout
    while True:
        if not pid_alive(pid) and not _portfile_names(runtime_dir, pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL)


def _portfile_names(runtime_dir: Path, pid: int) -> bool:
    try:
        return read_portfile(runtime_dir).pid == pid
    except (OSError, PortFileError):
        return False


def _reason(tail: list[str]) -> str | None:
    """Why gpuplaned would not start, as it said so itself (its last ``gpuplaned: ...`` line:
    a configuration error, a busy HTTP port), or None when it said nothing of the kind."""
    for line in reversed(tail):
        if line.startswith("gpuplaned: "):
            return line.removeprefix("gpuplaned: ")
    return None


def _log_tail(log_path: Path, start: int) -> list[str]:
    """The last lines this run appended to the log."""
    try:
        with open(log_path, "rb") as log:
            log.seek(start)
            text = log.read().decode(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-LOG_TAIL_LINES:]
