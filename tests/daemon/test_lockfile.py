"""The lock files: they match pyproject.toml today, and a change to a dependency is caught with
the command that fixes it, before anything is installed (packaging/lockfile.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LOCKS = ["requirements.lock", "requirements-runtime.lock", "packaging/requirements-tools.lock"]


def copy_of_the_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    for name in [*LOCKS, "pyproject.toml", "packaging/lockfile.py", "packaging/requirements-tools.in"]:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, tree / name)
    return tree


def check(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(tree / "packaging" / "lockfile.py"), "check"], capture_output=True,
                          text=True, timeout=60)


def test_the_locks_match_their_inputs(tmp_path):
    done = check(copy_of_the_tree(tmp_path))
    assert (done.returncode, done.stderr) == (0, "")


def test_every_pin_has_a_hash_and_every_direct_dependency_is_locked_at_its_version():
    text = (REPO / "requirements.lock").read_text()
    entries = re.findall(r"^([A-Za-z0-9][\w.-]*)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", text, re.M)
    pinned = {name.lower(): version for name, version, _ in entries}
    assert len(entries) == len(re.findall(r"^\S+==", text, re.M)) > 50  # each pin carries its hashes
    project = (REPO / "pyproject.toml").read_text()
    for name, version in re.findall(r'^\s*"([A-Za-z0-9][\w.-]*)==([^"]+)"', project, re.M):
        assert pinned[name.lower()].split("+")[0] == version, name


@pytest.mark.parametrize(("file", "edit"), [
    ("pyproject.toml", lambda text: text.replace('"psutil==7.2.2"', '"psutil==7.2.1"')),
    ("pyproject.toml", lambda text: text.replace('"typer==0.29.2",', '"typer==0.29.2",\n    "rich",')),
    ("packaging/requirements-tools.in", lambda text: text + "wheel\n"),
    ("requirements-runtime.lock", lambda text: text.replace("psutil==7.2.2", "psutil==7.2.1")),
])
def test_a_dependency_changed_without_its_lock_fails_and_names_the_fix(tmp_path, file, edit):
    tree = copy_of_the_tree(tmp_path)
    before = (tree / file).read_text()
    (tree / file).write_text(edit(before))
    assert (tree / file).read_text() != before
    done = check(tree)
    assert done.returncode == 1
    assert "run `make lock` and commit the lock files it rewrites" in done.stderr, done.stderr


def test_a_change_that_does_not_touch_dependencies_needs_no_new_lock(tmp_path):
    tree = copy_of_the_tree(tmp_path)
    pyproject = tree / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("faulthandler_timeout = 120", "faulthandler_timeout = 60"))
    assert check(tree).returncode == 0
