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


def test_make_installs_the_sdk_into_its_venv(tmp_path):
    """`make run`'s venv has the SDK (editable, from ./sdk): a user's `python train.py` reports
    without `pip install ./sdk`."""
    venv = tmp_path / "venv"
    dry = subprocess.run(["make", "-n", "-B", f"{venv}/.installed", f"VENV={venv}"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    [pip] = [line for line in dry.stdout.splitlines() if " install " in line]
    assert pip.startswith(f"{venv}/bin/pip install ") and pip.split()[-2:] == ["-e", "./sdk"], pip


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
