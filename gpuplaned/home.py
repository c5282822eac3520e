"""The data dir (``--home``): private to its owner, whatever the umask and whoever made it.

It holds the database (job environments, token hashes) and every job's output, so:

- it is created 0700 (missing parents too, as the umask says); one that exists must be a
  directory of ours (a symlink to one is fine: data often lives on a bigger disk);
- one that others may read or enter (made by hand, or by a ``mkdir`` under umask 022) is
  tightened to 0700 with a warning, as the runtime dir is, and so is its ``jobs/`` dir:
  nothing below them can be reached by another user, whatever a file's own mode;
- one owned by another user is refused (exit 1), since we could not make it private;
- data files the daemon makes itself are born 0600 (``private_file``), and an older one
  that others could read is tightened.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("gpuplaned.home")

JOBS_DIR = "jobs"  # job dirs: ``jobs/<job-id>/attempt-<n>`` (``attempt_dir``)


def attempt_dir(home: Path, job_id: str, attempt: int) -> Path:
    """Where one attempt of a job keeps its output and records (the shim makes it, 0700)."""
    return home / JOBS_DIR / job_id / f"attempt-{attempt}"


class HomeError(Exception):
    """The data dir cannot be made private; exit 1 with this message."""


def prepare_home(home: Path) -> None:
    """Create or check ``home`` and its ``jobs/`` dir (see the module docstring).

    Raises:
        HomeError: not a directory, cannot be created, or owned by another user.
    """
    _private_dir(home, "data dir")
    _private_dir(home / JOBS_DIR, "job dir")


def _private_dir(path: Path, what: str) -> None:
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        pass  # something that is not a directory: named below
    except OSError as exc:
        raise HomeError(f"cannot create {what} {path}: {exc.strerror}") from None
    try:
        st = path.stat()  # through a symlink: its target is what must be private
    except OSError as exc:
        raise HomeError(f"cannot use {what} {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise HomeError(f"{what} {path} is not a directory")
    if st.st_uid != os.getuid():
        raise HomeError(f"{what} {path} belongs to uid {st.st_uid}, not to us ({os.getuid()}), so gpuplaned "
                        "cannot keep it private: choose another --home (or GPUPLANE_HOME)")
    _tighten(path, st.st_mode, 0o700, what)


def private_file(path: Path, *, create: bool = True) -> None:
    """Make ``path`` 0600: created empty so if absent (with ``create``), tightened if others may read it."""
    try:
        if create:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            os.close(fd)
        st = path.stat()
    except FileNotFoundError:
        return
    _tighten(path, st.st_mode, 0o600, "data file")


def _tighten(path: Path, mode: int, private: int, what: str) -> None:
    if stat.S_IMODE(mode) & 0o077:
        log.warning("%s %s was mode %o, open to other users; tightening it to %o", what, path,
                    stat.S_IMODE(mode), private)
        os.chmod(path, stat.S_IMODE(mode) & private)
