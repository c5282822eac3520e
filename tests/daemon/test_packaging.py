"""What a non-editable install (the .deb/.rpm packaging) ships: every package of the tree."""

from __future__ import annotations

import tomllib
from pathlib import Path

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
