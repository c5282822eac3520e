"""What the training process ran with, gathered on the sender thread (never in ``init``).

Python and platform, argv and cwd, host and pid, the CUDA/rank variables, the git commit of
the script's directory and whether it had uncommitted changes, and the versions of the
packages that usually matter. Every part is best effort: what cannot be read is left out.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from typing import Any, Dict, Optional

PACKAGES = ("torch", "numpy", "jax", "tensorflow", "transformers", "accelerate", "deepspeed", "lightning",
            "pytorch-lightning", "datasets", "tokenizers", "flash-attn", "triton")
ENV_KEYS = ("CUDA_VISIBLE_DEVICES", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "GPUPLANE_JOB_ID")
GIT_TIMEOUT = 2.0


def snapshot() -> Dict[str, Any]:
    out: Dict[str, Any] = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "argv": list(sys.argv),
        "cwd": os.getcwd(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "env": {key: os.environ[key] for key in ENV_KEYS if key in os.environ},
        "packages": _packages(),
    }
    git = _git(_script_dir())
    if git:
        out["git"] = git
    return out


def _script_dir() -> str:
    main = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-m") else ""
    return os.path.dirname(os.path.abspath(main)) if main else os.getcwd()


def _git(where: str) -> Optional[Dict[str, Any]]:
    def run(*args: str) -> Optional[str]:
        try:
            done = subprocess.run(("git",) + args, cwd=where, capture_output=True, text=True, timeout=GIT_TIMEOUT)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = run("rev-parse", "HEAD")
    if not commit:
        return None
    status = run("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def _packages() -> Dict[str, str]:
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - 3.8 has it
        return {}
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except Exception:  # not installed, or broken metadata: leave it out
            continue
    return found
