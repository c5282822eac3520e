"""Helpers for the job-command tests: gpuplanectl run from a chosen dir, submit, and waiting on a job."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from helpers import DaemonProcess, wait_for

from gpuplaned.protocol.job_states import RETRYABLE, values

ENDED = values(RETRYABLE)  # ended, or LOST: what a CLI test waits for before it looks


def ctl(daemon: DaemonProcess, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """``daemon.run_ctl``, plus a working directory and extra environment variables."""
    return subprocess.run(
        [sys.executable, "-m", "gpuplanectl", *args], env={**daemon.env, **(env or {})}, cwd=cwd,
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )


def submit(daemon: DaemonProcess, *args: str, **kwargs: Any) -> dict[str, Any]:
    """``gpuplanectl submit --json ARGS``; returns the job."""
    result = ctl(daemon, "submit", "--json", *args, **kwargs)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)["job"]


def show(daemon: DaemonProcess, job_id: str) -> dict[str, Any]:
    result = ctl(daemon, "job", "show", "--json", job_id)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)["job"]


def wait_job(daemon: DaemonProcess, job_id: str, until: Callable[[dict[str, Any]], bool] = lambda j: j["status"] in ENDED,
             timeout: float = 15.0, what: str = "the job to end") -> dict[str, Any]:
    """Poll the job until ``until(job)``; returns that job.

    Polls ``GET /api/v1/jobs/ID``, the request ``job show --json`` makes and prints as it is: a
    gpuplanectl process per poll cost a third of a second of CPU, most of these tests' time."""
    seen: list[dict[str, Any]] = []

    def check() -> dict[str, Any] | None:
        job = daemon.client().get(f"/api/v1/jobs/{quote(job_id, safe='')}")["job"]
        seen[:] = [job]
        return job if until(job) else None

    try:
        return wait_for(check, timeout, interval=0.05, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {seen}\n{daemon.log()[-3000:]}") from None


def ctl_in_process(daemon: DaemonProcess, capsys: Any, *args: str) -> tuple[int, str, str]:
    """Run gpuplanectl in this process (no interpreter start-up): its exit code, stdout and stderr.

    For loops of many quick calls; the command code is the same as in ``ctl``.
    """
    from gpuplanectl.main import app

    capsys.readouterr()
    try:
        app(["--runtime-dir", str(daemon.runtime_dir), *args], prog_name="gpuplanectl")
    except SystemExit as exit:
        code = exit.code
    else:
        raise AssertionError("a click app in standalone mode always exits")
    out, err = capsys.readouterr()
    return code, out, err
