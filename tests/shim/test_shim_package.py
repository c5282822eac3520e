"""The launcher program as the runner starts it: ``python -I -S <path>/__main__.py --serve``.

Its folder alone is all it needs, wherever it lies (the checkout, site-packages), and it
loads nothing but the standard library and its own package: never ``gpuplaned``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from gpuplaned.launching.client import SHIM_PATH

PING = json.dumps({"op": "ping", "seq": 1})


def _spawn_true(job_dir: Path) -> str:
    return json.dumps({"op": "spawn", "id": "j1", "job_dir": str(job_dir), "argv": ["/bin/true"],
                       "cwd": "/", "env": {}, "timeout_s": None, "grace_s": 1.0, "seq": 2})


def _serve(argv: list[str], *requests: str) -> tuple[list[dict], str]:
    """Run a launcher over ``requests`` until EOF; its stdout lines, decoded, and its stderr."""
    done = subprocess.run([*argv, "--serve", "--prefork", "0"], input="".join(r + "\n" for r in requests),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def _imported(importtime_stderr: str) -> set[str]:
    """The modules ``-X importtime`` reports."""
    return {line.rpartition("|")[2].strip() for line in importtime_stderr.splitlines()
            if line.startswith("import time:") and not line.rstrip().endswith("imported package")} - {""}


def test_the_launcher_needs_only_its_folder_and_the_standard_library(tmp_path):
    # A copy of the folder alone, under a gpuplaned/__init__.py that must never run.
    root = tmp_path / "elsewhere" / "gpuplaned"
    shutil.copytree(SHIM_PATH.parent, root / "shim", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "__init__.py").write_text("raise ImportError('the launcher imported gpuplaned')\n")
    argv = [sys.executable, "-I", "-S", "-X", "importtime", str(root / "shim" / "__main__.py")]

    lines, stderr = _serve(argv, PING, _spawn_true(tmp_path / "job"))

    assert lines[0] == {"ok": True, "pong": True, "seq": 1}
    assert lines[1]["ok"] is True and lines[1]["id"] == "j1"  # a shim forked, and it started the job
    assert json.loads((tmp_path / "job" / "runtime.json").read_text())["pid"] == lines[1]["pid"]
    modules = _imported(stderr)
    ours = {m for m in modules if m.split(".")[0] == "gpuplaned"}
    assert ours == {f"gpuplaned.shim.{p.stem}" for p in (root / "shim").glob("[!_]*.py")}  # its modules
    assert sorted(m for m in modules - ours if m.split(".")[0] not in sys.stdlib_module_names) == []


def test_python_m_runs_the_same_launcher():
    lines, _ = _serve([sys.executable, "-m", "gpuplaned.shim"], PING)
    assert lines == [{"ok": True, "pong": True, "seq": 1}]
