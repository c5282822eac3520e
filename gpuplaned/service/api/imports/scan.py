"""Reading a finished run's dir for ``import-run``: its TensorBoard points, its checkpoints and
its stdout logs. Synchronous and read-only, no trio and no store: ``service.import_run`` runs
it in a worker thread, so a large dir never blocks the daemon's event loop.

- **Event files**: ``gpuplaned.tensorboard.discovery`` under the dir (any age, any host), each
  read whole by an ``EventFileReader`` with no grace period: the run is finished, so a record
  failing its CRC is reported and skipped at once and the rest of the file is still read, and
  a file ending in a half-written record is reported. Series are named as the tailer names
  them (``add_scalars`` folders prefix their tags) and rewinds across files are resolved by
  TensorBoard's rule (``rewind.merge``): the points a series ends with.
- **Checkpoints**: ``gpuplaned.checkpoints.recognize`` under the dir, each with its size,
  mtime and fingerprint (``checkpoints.files``), as the node's watcher registers them.
- **Logs**: files named ``*.log``, ``*.out``, ``*.err`` or ``stdout*``/``stderr*`` (``.txt``
  or no suffix), at most ``MAX_LOG_FILES``, registered with their size and line count.

**Runs**: ``runs_in`` says which folders of the dir are runs, as ``tensorboard --logdir``
shows them: a folder holding event files is a run, with the folders below it (its
``add_scalars`` subfolders); one below another run is that run's. A dir that is one run (or
holds one) is imported whole; one holding several (a sweep's, Lightning's ``version_*``)
gives a run per folder, and what lies outside them all is told, not imported.

``survey`` refuses what cannot be imported before anything is written (``ImportRefused``):
no such dir, not a dir, nothing to import, a file that cannot be read. Its ``signature``
(over every file it found: path, size, mtime) tells a dir that changed since an import.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import attrs

from gpuplaned.checkpoints.complete import incomplete
from gpuplaned.checkpoints.files import fingerprint, observe
from gpuplaned.checkpoints.recognize import Candidate, find_candidates, resolve
from gpuplaned.protocol.agent import FoundCheckpoint
from gpuplaned.tensorboard.discovery import EventFile, find_event_files
from gpuplaned.tensorboard.events import Columns
from gpuplaned.tensorboard.reader import EventFileReader
from gpuplaned.tensorboard.rewind import merge
from gpuplaned.tsdb.series import MAX_NAME

LOG_SUFFIXES = (".log", ".out", ".err")
LOG_PREFIXES = ("stdout", "stderr")
MAX_LOG_FILES = 100
MAX_LOG_DEPTH = 3
MAX_ENTRIES = 200_000  # files and folders under the dir: a run's dir, never a home or "/"
MAX_DEPTH = 6  # the deepest the checkpoint and event-file walks look
_COUNT_CHUNK = 1 << 20


class ImportRefused(Exception):
    """The dir cannot be imported; the message names why (and the file, when one is at fault)."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


@attrs.frozen
class LogFile:
    path: str
    stream: str  # stdout | stderr (a name that says neither: stdout)
    size_bytes: int
    lines: int


@attrs.frozen
class Survey:
    root: str  # the dir's realpath: the import's key
    events: list[EventFile]
    checkpoints: list[FoundCheckpoint]
    logs: list[LogFile]
    signature: str  # sha1 over each file found: its path, size and mtime
    problems: list[Problem] = attrs.Factory(list)  # checkpoints cut short: not imported


@attrs.frozen
class Problem:
    """Something of the dir skipped, told in the import's reply."""

    path: str
    offset: int
    what: str


@attrs.frozen
class Runs:
    root: str  # the dir's realpath
    dirs: list[str]  # the runs' folders (realpaths), in name order; [root] for a dir that is one run
    outside: list[str]  # checkpoints and logs in none of them (several runs only): not imported


@attrs.frozen
class Points:
    series: dict[str, Columns]  # name -> the points it ends with, rewinds resolved
    problems: list[Problem]
    records: int


def _checked(path: str) -> str:
    """The realpath of the dir ``path``, once it is one that may be imported.

    Raises:
        ImportRefused: no such dir, not a dir, unreadable, the filesystem's root, too large.
    """
    if not os.path.isabs(path):
        raise ImportRefused(f"{path} is not an absolute path", path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ImportRefused(f"no such directory: {path}", path) from None
    except OSError as exc:
        raise ImportRefused(f"{path} cannot be read: {exc.strerror or exc}", path) from None
    if not stat.S_ISDIR(st.st_mode):
        raise ImportRefused(f"{path} is not a directory", path)
    root = os.path.realpath(path)
    if not os.access(root, os.R_OK | os.X_OK):
        raise ImportRefused(f"{root} cannot be read (permission denied)", root)
    if os.path.dirname(root) == root:
        raise ImportRefused(f"{root} is the filesystem's root, not a run's dir", root)
    if _too_many(root):
        raise ImportRefused(f"{root} holds more than {MAX_ENTRIES} files and folders: give the run's own dir", root)
    return root


def runs_in(path: str) -> Runs:
    """The runs the dir ``path`` (absolute) holds: itself, or each of its folders that is one.

    Raises:
        ImportRefused: no such dir, not a dir, unreadable, too large.
    """
    root = _checked(path)
    folders = {os.fspath(f.path.parent) for f in find_event_files([Path(root)], since=0)}
    tops = sorted(f for f in folders if not any(_below(f, other) for other in folders if other != f))
    if len(tops) <= 1 or root in tops:
        return Runs(root, [root], [])
    held = [c.path for c in find_candidates(root)] + _log_paths(root)
    return Runs(root, tops, sorted(p for p in held if not any(p == d or _below(p, d) for d in tops)))


def _below(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip(os.sep) + os.sep)


def survey(path: str) -> Survey:
    """What the dir ``path`` (absolute) holds to import.

    Raises:
        ImportRefused: no such dir, not a dir, unreadable, or holding no event files and no checkpoints.
    """
    root = _checked(path)
    events = find_event_files([Path(root)], since=0)
    for found in events:
        _readable(os.fspath(found.path))
    checkpoints, problems = [], []
    for candidate in find_candidates(root):
        not_whole = _incomplete(candidate.path)
        if not_whole is None:
            checkpoints.append(_checkpoint(candidate))
        else:  # a save its job never finished (killed mid-save): no checkpoint to resume from
            problems.append(Problem(candidate.path, 0, f"checkpoint not imported: {not_whole}"))
    checkpoints.sort(key=lambda c: (c.step is None, c.step, c.path))
    if not events and not checkpoints:
        raise ImportRefused(f"{root} holds no TensorBoard event files (events.out.tfevents.*) and no checkpoints",
                            root)
    logs = [_log(p) for p in _log_paths(root)]
    return Survey(root, events, checkpoints, logs, _signature(root, events, checkpoints, logs), problems)


def _too_many(root: str) -> bool:
    """Whether the dir holds more than MAX_ENTRIES entries within MAX_DEPTH levels (links not followed)."""
    seen = 0
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    seen += 1
                    if seen > MAX_ENTRIES:
                        return True
                    if depth < MAX_DEPTH and entry.is_dir(follow_symlinks=False):
                        stack.append((entry.path, depth + 1))
        except OSError:
            continue
    return False


def _readable(path: str) -> None:
    try:
        os.close(os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
    except OSError as exc:
        raise ImportRefused(f"{path} cannot be read: {exc.strerror or exc}", path) from None


def _incomplete(path: str) -> str | None:
    try:
        return incomplete(path)
    except OSError as exc:
        raise ImportRefused(f"checkpoint {path} cannot be read: {exc.strerror or exc}", path) from None


def _checkpoint(candidate: Candidate) -> FoundCheckpoint:
    try:
        seen = observe(candidate.path)
        print_ = fingerprint(candidate.path)
    except OSError as exc:
        raise ImportRefused(f"checkpoint {candidate.path} cannot be read: {exc.strerror or exc}",
                            candidate.path) from None
    told = resolve(candidate)
    return FoundCheckpoint(candidate.path, candidate.kind, seen.size, seen.mtime_ns // 1_000_000, print_,
                           told.step, told.epoch)


def is_log(name: str) -> bool:
    """Whether a file of this name is a run's stdout or stderr log."""
    lower = name.lower()
    if lower.startswith("events.out.tfevents."):
        return False
    if lower.endswith(LOG_SUFFIXES):
        return True
    return lower.startswith(LOG_PREFIXES) and (lower.endswith(".txt") or "." not in lower)


def _log_paths(root: str) -> list[str]:
    found: list[str] = []
    for directory, dirs, names in os.walk(root):
        depth = len(Path(directory).relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if depth < MAX_LOG_DEPTH else []
        for name in sorted(names):
            full = os.path.join(directory, name)
            if is_log(name) and os.path.isfile(full) and not os.path.islink(full):
                found.append(full)
                if len(found) >= MAX_LOG_FILES:
                    return found
    return found


def _log(path: str) -> LogFile:
    lines, size, last = 0, 0, b"\n"
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_COUNT_CHUNK):
                lines += chunk.count(b"\n")
                size += len(chunk)
                last = chunk[-1:]
    except OSError as exc:
        raise ImportRefused(f"log {path} cannot be read: {exc.strerror or exc}", path) from None
    lines += last != b"\n"  # a last line without its newline
    stream = "stderr" if os.path.basename(path).lower().startswith("stderr") or path.endswith(".err") else "stdout"
    return LogFile(path, stream, size, lines)


def _signature(root: str, events: list[EventFile], checkpoints: list[FoundCheckpoint], logs: list[LogFile]) -> str:
    digest = hashlib.sha1(usedforsecurity=False)
    for found in sorted(events, key=lambda e: os.fspath(e.path)):
        try:
            st = os.stat(found.path)
        except OSError:
            continue
        digest.update(f"e\0{os.path.relpath(found.path, root)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    for ck in checkpoints:
        digest.update(f"c\0{os.path.relpath(ck.path, root)}\0{ck.fingerprint}\0".encode())
    for log in logs:
        digest.update(f"l\0{os.path.relpath(log.path, root)}\0{log.size_bytes}\0".encode())
    return "sha1:" + digest.hexdigest()


def read_points(events: list[EventFile]) -> Points:
    """Every scalar of ``events`` (in TensorBoard's file order), rewinds resolved per series.

    A record failing its CRC is skipped (no grace: nothing writes the files any more) and
    reported; so is a file ending in a half-written record."""
    batches = []
    problems: list[Problem] = []
    records = 0
    for found in events:
        reader = EventFileReader(found.path, grace=0.0)
        try:
            result = reader.read(0.0)
        finally:
            reader.close()
        try:
            size = os.stat(found.path).st_size
        except OSError:
            size = result.cursor.offset
        records += result.records
        problems += [Problem(p.path, p.offset, p.what) for p in result.problems]
        if result.cursor.offset < size:
            problems.append(Problem(os.fspath(found.path), result.cursor.offset,
                                    f"ends in a half-written record ({size - result.cursor.offset} bytes skipped)"))
        batches += [(found.series(tag), found.order, columns) for tag, columns in sorted(result.scalars.items())]
    merged = merge(batches)
    for name in [n for n in merged if not 0 < len(n) <= MAX_NAME]:  # a tag the store cannot name
        problems.append(Problem(name[:100], 0, f"series name of {len(name)} characters (at most {MAX_NAME}): skipped"))
        del merged[name]
    return Points(merged, problems, records)
