"""Helpers for the shim and launcher tests: real processes, found through a marker env var.

Every job a test starts carries ``GPUPLANE_TEST_JOB=<unique marker>`` in its environment,
so ``job_processes(marker)`` finds everything descended from it, wherever it went (another
process group, another session, re-parented). Waiting is done on real conditions: pidfds
for process exits, short polls for files.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from gpuplaned.launching.client import Launcher, Spawned, SpawnRequest
from gpuplaned.launching.job_files import ExitRecord, read_exit
from gpuplaned.shim.procs import read_proc_stat

MARKER_VAR = "GPUPLANE_TEST_JOB"
WAIT_S = 10.0  # generous: a loaded 2-core CI box


def job_processes(marker: str) -> list[int]:
    """Live (not zombie) processes whose environment holds ``MARKER_VAR=marker``."""
    needle = f"{MARKER_VAR}={marker}".encode() + b"\0"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if needle in environ:
            stat = read_proc_stat(int(name))
            if stat is not None and stat[0] not in ("Z", "X"):
                found.append(int(name))
    return found


def kill_job_processes(marker: str) -> None:
    for _ in range(50):
        pids = job_processes(marker)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def session_and_group(pid: int) -> tuple[int, int]:
    """``(session id, process group id)`` of a live process, from ``/proc/<pid>/stat``."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rpartition(b")")[2].split()
    return int(fields[3]), int(fields[2])


async def wait_until(predicate: Callable[[], Any], what: str, timeout: float = WAIT_S,
                     interval: float = 0.005) -> Any:
    """Poll ``predicate`` until it is truthy; fail after ``timeout`` seconds."""
    with trio.fail_after(timeout):
        while True:
            value = predicate()
            if value:
                return value
            await trio.sleep(interval)
    raise AssertionError(what)  # pragma: no cover - fail_after raises first


async def wait_job_end(launcher: Launcher, spawned: Spawned, job_dir: Path,
                       timeout: float = WAIT_S) -> ExitRecord:
    """Wait for the launcher's exit event for the job, check it against exit.json, return it."""
    with trio.fail_after(timeout):
        event = await launcher.wait_exit(spawned.id)
    record = read_exit(job_dir)
    assert record is not None, f"the job {spawned.id} ended without exit.json"
    assert event == record, (event, record)
    return record


class Jobs:
    """Builds SpawnRequests in a test's tmp dir, all tagged with the test's marker."""

    def __init__(self, root: Path, marker: str) -> None:
        self.root = root
        self.marker = marker
        self._n = 0

    def base_env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LC_ALL": "C",
            MARKER_VAR: self.marker,
        }

    def request(self, argv: list[str], *, name: str | None = None, env: dict[str, str] | None = None,
                cwd: Path | None = None, timeout_s: float | None = None,
                grace_s: float = 1.0) -> SpawnRequest:
        self._n += 1
        name = name or f"job{self._n}"
        job_dir = self.root / name
        full_env = self.base_env()
        full_env.update(env or {})
        return SpawnRequest(
            id=name, job_dir=job_dir, argv=argv, cwd=cwd or self.root, env=full_env,
            timeout_s=timeout_s, grace_s=grace_s,
        )
