"""The SDK as a wheel (issue 19, deliverable 4): ``gpuplane-sdk`` builds with no dependencies,
installs with ``--no-index`` into a fresh venv that has nothing else, and a training script run
there reports to a real daemon. On this interpreter, and on Python 3.8 (the oldest the SDK
declares) wherever one is installed: pyenv's, or ``python3.8`` on PATH.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from helpers import DaemonProcess, kill_processes_with_env, wait_for

SDK = Path(__file__).resolve().parents[2] / "sdk"
SCRIPT = textwrap.dedent("""
    import sys
    import gpuplane

    run = gpuplane.init(project="wheel", name="py%d.%d" % sys.version_info[:2])
    for step in range(500):
        run.log({"loss": 1.0 / (step + 1)}, step=step)
    run.finish(timeout=60)
    print(run.id)
""")


def _python38() -> str | None:
    """An installed Python 3.8 that runs (a pyenv shim on PATH may name one that is not selected)."""
    # pyenv's versions: beside this interpreter's own when it is one of them, and under ~/.pyenv.
    roots = {os.path.dirname(sys.base_prefix), os.path.join(os.environ.get("PYENV_ROOT", "/nonexistent"), "versions"),
             os.path.expanduser("~/.pyenv/versions")}
    candidates = sorted({p for root in roots for p in glob.glob(os.path.join(root, "3.8.*", "bin", "python3.8"))},
                        reverse=True)
    candidates += [found for found in (shutil.which("python3.8"),) if found]
    for python in candidates:
        check = subprocess.run([python, "-c", "import sys; assert sys.version_info[:2] == (3, 8)"],
                               capture_output=True, timeout=30)
        if check.returncode == 0:
            return python
    return None


def _base_python() -> str:
    """This interpreter outside its venv: a new venv from it starts with nothing installed."""
    return os.path.join(sys.base_prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    build = tmp_path_factory.mktemp("build")
    shutil.copytree(SDK, build / "sdk", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "--disable-pip-version-check", "-q", "-w", str(out), str(build / "sdk")], check=True, timeout=120)
    (found,) = out.glob("gpuplane_sdk-*.whl")
    return found


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    process = DaemonProcess(tmp_path_factory.mktemp("d"), "--gpus", "none")
    process.start()
    process.wait_ready()
    yield process
    process.kill()
    kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={process.runtime_dir}")


def test_the_wheel_declares_no_dependency_and_python_3_8(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        text = zf.read(metadata).decode()
    assert "Requires-Dist" not in text
    assert "Requires-Python: >=3.8" in text
    assert "gpuplane/py.typed" in names and not any("/tests/" in n for n in names)


@pytest.mark.parametrize("which", ["this", "3.8"])
def test_the_wheel_runs_a_script_in_a_bare_venv(wheel, daemon, tmp_path, which):
    python = _base_python() if which == "this" else _python38()
    if python is None:
        pytest.skip("no Python 3.8 installed here (python3.8 on PATH, or pyenv's)")
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "-q", "--no-index", str(wheel)], check=True, timeout=120)
    listed = json.loads(subprocess.run([*pip, "list", "--format=json"], check=True, capture_output=True,
                                       text=True).stdout)
    assert [(p["name"], p["version"]) for p in listed if p["name"] not in ("pip", "setuptools", "wheel")] == [
        ("gpuplane-sdk", "0.1.0")]
    env = {k: v for k, v in daemon.env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    ran = subprocess.run([str(venv / "bin" / "python"), "-c", SCRIPT], env=env, capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    run_id = ran.stdout.strip()
    client = daemon.client()
    run = wait_for(lambda: client.get(f"/api/v1/runs/{run_id}")["run"], 20, what="the run")
    assert run["name"].startswith("py")
    series = client.get(f"/api/v1/runs/{run_id}/series?name=loss&columns=step&limit=1000")
    assert series["step"] == list(range(500))
