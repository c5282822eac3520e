"""What a non-editable install (the .deb/.rpm packaging) ships: every package of the tree; and
what `make` installs into the checkout's venv: the SDK too."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_listed_in_pyproject():
    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    folders = {name: REPO / path for name, path in setup["package-dir"].items()}
    found = set()
    for top, root in folders.items():
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root)
            found.add(".".join((top, *rel.parts)) if rel.parts else top)
    assert sorted(found - listed) == [], "packages missing from [tool.setuptools] packages in pyproject.toml"


def test_make_installs_the_lock_then_the_sdk_into_its_venv(tmp_path):
    """`make run`'s venv is what requirements.lock pins, hash-checked, after the lock is checked
    against pyproject.toml; then gpuplane and the SDK (editable, from ./sdk) with nothing more
    resolved: a user's `python train.py` reports without `pip install ./sdk`."""
    venv = tmp_path / "venv"
    dry = subprocess.run(["make", "-n", "-B", f"{venv}/.installed", f"VENV={venv}"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    check = next(i for i, line in enumerate(lines) if line.endswith("packaging/lockfile.py check"))
    locked, own = [(i, line.split()) for i, line in enumerate(lines) if " install " in line]
    assert check < locked[0] < own[0]
    assert locked[1][0] == own[1][0] == f"{venv}/bin/pip"
    assert locked[1][-3:] == ["--require-hashes", "-r", "requirements.lock"], locked
    assert "--no-deps" in own[1] and "--no-build-isolation" in own[1] and own[1][-4:] == ["-e", ".", "-e", "./sdk"]


def test_the_checkouts_venv_imports_the_sdk_from_the_checkout(tmp_path):
    venv = REPO / ".venv"
    stamp = venv / ".installed"
    if not stamp.exists() or stamp.stat().st_mtime < (REPO / "Makefile").stat().st_mtime:
        pytest.skip("no .venv made by this Makefile's rule (make run or make test makes one)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = subprocess.run([str(venv / "bin" / "python"), "-c", "import gpuplane; print(gpuplane.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()) == REPO / "sdk" / "gpuplane" / "__init__.py"


@pytest.mark.parametrize(("target", "starts"), [("run", "/bin/gpuplaned"), ("test", " -m pytest ")])
def test_make_run_and_test_byte_compile_every_package_folder_first(target, starts):
    """Where PYTHONDONTWRITEBYTECODE is set no process writes a .pyc, and each daemon start
    compiled its modules from source: `make run` and `make test` compile every package folder of
    the tree and the SDK's before the daemon or pytest starts."""
    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    sdk = tomllib.loads((REPO / "sdk" / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = set(setup["package-dir"].values()) | {f"sdk/{name}" for name in sdk["packages"]}
    dry = subprocess.run(["make", "-n", target, "GPUPLANE_SKIP_UI_TESTS=1"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    compiled = [i for i, line in enumerate(lines) if " -m compileall " in line]
    started = [i for i, line in enumerate(lines) if starts in line]
    assert len(compiled) == 1 and started and compiled[0] < started[0], dry.stdout
    named = set(lines[compiled[0]].split(" -m compileall ", 1)[1].split())
    assert folders <= named, f"not compiled: {sorted(folders - named)}"
