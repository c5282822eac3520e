"""Helpers for end-to-end tests: real gpuplaned processes in temporary dirs.

These poll real files and sockets with short sleeps; that is the honest way to wait on
another process. Timing logic inside the daemon is tested under trio's MockClock instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuplanectl.client import DaemonClient, DaemonUnreachable, NoDaemon

from gpuplaned.protocol.errors import ApiError
from gpuplaned.protocol.job_states import ENDED, values

READY_TIMEOUT = 20.0


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.02, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def ctl_follower(args: list[str], env: dict[str, str], limit_s: float = 60.0) -> subprocess.Popen[str]:
    """``gpuplanectl ARGS`` (a follower: ``events -f``, ``logs -f``) with pipes, killed after
    ``limit_s`` whatever happens, so a test blocked reading its output fails instead of hanging."""
    proc = subprocess.Popen([sys.executable, "-m", "gpuplanectl", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    watchdog = threading.Timer(limit_s, lambda: proc.poll() is None and proc.kill())
    watchdog.daemon = True
    watchdog.start()
    return proc


def processes_with_env(entry: str) -> list[int]:
    """Live processes (ours) whose environment contains ``KEY=VALUE`` exactly."""
    wanted = entry.encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if wanted not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] in ("Z", "X"):
                    continue
        except OSError:
            continue
        found.append(int(name))
    return found


def kill_processes_with_env(entry: str) -> None:
    for pid in processes_with_env(entry):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def base_env(root: Path) -> dict[str, str]:
    """An environment that keeps the daemon and CLI away from the real user's files."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANE_")}
    env.update(
        GPUPLANE_HOME=str(root / "home"),
        GPUPLANE_RUNTIME_DIR=str(root / "run"),
        XDG_CONFIG_HOME=str(root / "config"),
        PYTHONUNBUFFERED="1",
        # The HTTP front on a free port: test daemons run side by side, never on 8765.
        GPUPLANE_HTTP="127.0.0.1:0",
    )
    return env


def daemon_info(runtime_dir: Path) -> dict | None:
    """``GET /api/v1/daemon`` of the daemon published in ``runtime_dir``; None while none answers."""
    try:
        return DaemonClient.discover(runtime_dir, timeout=10).get("/api/v1/daemon")
    except (NoDaemon, DaemonUnreachable, ApiError):
        return None


class DaemonProcess:
    def __init__(self, root: Path, *args: str, env: dict[str, str] | None = None,
                 runtime_dir: Path | None = None) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.args = list(args)
        self.env = base_env(root)
        if runtime_dir is not None:
            self.env["GPUPLANE_RUNTIME_DIR"] = str(runtime_dir)
        self.env.update(env or {})
        self.runtime_dir = Path(self.env["GPUPLANE_RUNTIME_DIR"])
        self.home = Path(self.env["GPUPLANE_HOME"])
        self.log_path = root / f"gpuplaned-{len(list(root.glob('gpuplaned-*.log')))}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def portfile(self) -> Path:
        return self.runtime_dir / "gpuplaned.port"

    @property
    def socket_path(self) -> Path:
        return self.runtime_dir / "gpuplaned.sock"

    def start(self, **popen: Any) -> DaemonProcess:
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpuplaned", *self.args],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **popen,
        )
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def client(self) -> DaemonClient:
        return DaemonClient.discover(self.runtime_dir, timeout=10)

    def wait_ready(self, timeout: float = READY_TIMEOUT, pid: int | None = None) -> dict:
        """Wait until the daemon (``pid``, default our child) answers READY."""
        pid = self.pid if pid is None else pid

        def ready() -> dict | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"gpuplaned exited with {self.proc.returncode}:\n{self.log()}")
            info = daemon_info(self.runtime_dir)
            return info if info and info["state"] == "READY" and info["pid"] == pid else None

        return wait_for(ready, timeout, what="gpuplaned to be READY")

    def wait_exit(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"gpuplaned did not exit within {timeout} s:\n{self.log()}") from None

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def run_ctl(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run gpuplanectl against this daemon's runtime dir."""
        return subprocess.run(
            [sys.executable, "-m", "gpuplanectl", *args], env=self.env, capture_output=True,
            text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )


TERMINAL = set(values(ENDED))  # a LOST job has not ended: its node may yet tell how it did


class Jobs:
    """A thin API driver for one daemon."""

    def __init__(self, daemon, workdir: Path) -> None:
        self.daemon = daemon
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def client(self):
        return self.daemon.client()

    def submit(self, command: list[str], **fields) -> dict:
        body = {"command": command, "cwd": str(self.workdir), **fields}
        return self.client.post("/api/v1/jobs", body)["job"]

    def sh(self, script: str, **fields) -> dict:
        return self.submit(["sh", "-c", textwrap.dedent(script)], **fields)

    def get(self, job_id: str) -> dict:
        return self.client.get(f"/api/v1/jobs/{job_id}")["job"]

    def wait(self, job_id: str, *states: str, timeout: float = 20.0) -> dict:
        states = states or tuple(TERMINAL)

        def reached():
            job = self.get(job_id)
            return job if job["status"] in states else None

        return wait_for(reached, timeout, interval=0.05, what=f"{job_id} to reach {states}")

    def file(self, name: str) -> Path:
        return self.workdir / name

    def wait_node(self) -> None:
        """The runner registers the local node right after READY."""
        wait_for(lambda: self.client.get("/api/v1/nodes")["nodes"], what="the local node to register")

    @classmethod
    def start(cls, daemon_factory: Any, workdir: Path, *args: str) -> Jobs:
        """A READY daemon started with ``args``, its node registered, driven from ``workdir``."""
        daemon = daemon_factory(*args).start()
        daemon.wait_ready()
        jobs = cls(daemon, workdir)
        jobs.wait_node()
        return jobs

    def restart(self, daemon_factory: Any, *args: str) -> None:
        """Drive a new daemon (same dirs) after the current one died."""
        self.daemon = daemon_factory(*args).start()
        self.daemon.wait_ready()
        self.wait_node()


@contextlib.contextmanager
def running_jobs(root: Path, *args: str) -> Iterator[Jobs]:
    """A READY daemon started with ``args`` in ``root``, its node registered, and its ``Jobs``;
    killed, with its jobs, at the end. For a module's fixture: tests that share one daemon."""
    daemon = DaemonProcess(root / "d", *args).start()
    try:
        daemon.wait_ready()
        jobs = Jobs(daemon, root / "work")
        jobs.wait_node()
        yield jobs
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


@contextlib.contextmanager
def jobs_with_front(root: Path, *args: str) -> Iterator[tuple[Jobs, str]]:
    """A real daemon (two fake GPUs, node ``n1``, the TCP front on a free loopback port) and its
    ``Jobs`` in ``root``: (jobs, the front's URL); killed, with its jobs, at the end."""
    with running_jobs(root, "--gpus=fake:2", "--node-name", "n1", "--http", "127.0.0.1:0", *args) as jobs:
        yield jobs, wait_for(lambda: jobs.client.get("/api/v1/daemon")["endpoints"].get("http"), what="the front")
