"""A job's environment is what it was submitted with, as `gpuplanectl submit --help` says:
the submitting shell's PATH and virtualenv (and the few other variables listed there), the
--env ones, and GPUPlane's own; nothing of the daemon's environment."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys

import pytest
from helpers import Jobs

from gpuplanectl.submission import INHERITED_ENV

pytestmark = pytest.mark.e2e

GPUPLANE_SET = {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTHONUNBUFFERED", "GPUPLANE_JOB_ID", "GPUPLANE_RUN_ID", "GPUPLANE_ATTEMPT",
                "GPUPLANE_ENDPOINT", "GPUPLANE_RUNTIME_DIR", "GPUPLANE_HOME", "GPUPLANE_FAKE_GPU_DIR"}


def environ_of(jobs: Jobs, job: dict) -> dict[str, str]:
    """The job's environment as its process got it (``cat /proc/self/environ`` as the job)."""
    done = jobs.wait(job["id"])
    assert done["status"] == "SUCCEEDED", done
    raw = (jobs.daemon.home / "jobs" / job["id"] / "attempt-1" / "stdout.log").read_bytes()
    return dict(entry.split("=", 1) for entry in raw.decode().split("\0") if entry)


def test_a_job_gets_the_submitting_shells_variables_and_none_of_the_daemons(daemon_factory, tmp_path):
    daemon = daemon_factory("--gpus=fake:1", env={"DAEMON_SECRET": "daemon-only", "LANG": "C.UTF-8"}).start()
    daemon.wait_ready()
    jobs = Jobs(daemon, tmp_path / "work")
    jobs.wait_node()
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    shell = {k: v for k, v in daemon.env.items() if k not in INHERITED_ENV and k != "DAEMON_SECRET"}
    shell.update(PATH=f"{venv / 'bin'}:{os.environ['PATH']}", VIRTUAL_ENV=str(venv), HOME=str(tmp_path),
                 USER="someone", SHELL_ONLY="not listed", TOKEN_FROM_SHELL="s3cret")
    done = subprocess.run([sys.executable, "-m", "gpuplanectl", "submit", "--gpu", "1", "--quiet",
                           "--dir", str(jobs.workdir), "--env", "ASKED=1", "--env", "TOKEN_FROM_SHELL",
                           "--", "cat", "/proc/self/environ"],
                          env=shell, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    env = environ_of(jobs, {"id": done.stdout.strip()})
    passed = {k for k in INHERITED_ENV if k in shell}
    assert set(env) == passed | {"ASKED", "TOKEN_FROM_SHELL"} | GPUPLANE_SET
    assert (env["PATH"], env["VIRTUAL_ENV"], env["HOME"], env["USER"]) == (shell["PATH"], str(venv), str(tmp_path),
                                                                          "someone")
    assert (env["ASKED"], env["TOKEN_FROM_SHELL"]) == ("1", "s3cret")
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["PYTHONUNBUFFERED"] == "1"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # CUDA numbers the GPUs as NVML does

    # Submitted without any (the API, the browser, MCP): a default PATH and who it runs as.
    api = jobs.submit(["/bin/cat", "/proc/self/environ"], gpu=0, env={"ONLY": "this"})
    env = environ_of(jobs, api)
    user = pwd.getpwuid(os.getuid())
    assert set(env) == {"PATH", "HOME", "USER", "ONLY"} | GPUPLANE_SET
    assert (env["PATH"], env["HOME"], env["USER"], env["CUDA_VISIBLE_DEVICES"]) == (
        "/usr/local/bin:/usr/bin:/bin", user.pw_dir, user.pw_name, "")
