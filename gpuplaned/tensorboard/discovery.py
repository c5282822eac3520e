"""Finding a job's TensorBoard event files, and naming its series. Reads directories only.

Where: under the job's working directory, ``runs/`` (PyTorch's and Hugging Face's default),
``logs/``, ``outputs/``, ``lightning_logs/``, the job's ``$TB_LOG_DIR`` and the dirs the job
declares, with their subfolders (``add_scalars`` writes one folder per tag; Lightning one
per version), at most ``MAX_DEPTH`` levels down.

Which: ``events.out.tfevents.<time>.<host>[...]`` files (TensorBoard's writer, PyTorch and
tensorboardX append ``.<pid>.<n>``) whose ``<time>`` (the writer's clock, whole seconds) is no
earlier than the attempt's start less ``SLACK`` seconds, so the files of earlier attempts and
runs in the same dirs are not even looked at; when a host name is given, written by that host.
That only narrows the search: a file is the job's only when ``claim`` says so, on evidence
(the ``<pid>``, ``EventFile.pid``, was one of the job's processes: ``gpuplaned.job_processes``).
``.profile-empty`` (the profiler's marker) and ``.sagemaker-uploaded`` files are no event files.

Order: TensorBoard reads a run's files in file-name order (``<time>`` first, so in the
order they were opened); ``EventFile.order`` is that key, compared by ``rewind.order_key``
(numbers in the name as numbers, so ``.<pid>.10`` follows ``.<pid>.9``).

Series names follow TensorBoard's run/tag naming, relative to the job's *base run*: the
shallowest folder under a root that holds event files is the base, and its tags keep their
names (``train/loss``); a file in a folder below it is another TensorBoard run, and its tags
are named ``<folder relative to the base>/<tag>``. Several shallowest folders (two Lightning
versions) are all bases. ``add_scalars("val", {"loss": ...})`` from a writer on ``runs/exp``
writes tag ``val`` into ``runs/exp/val_loss/`` (the main tag, its ``/`` as ``_``, ``_``, the
key); TensorBoard shows it on the ``val`` chart as the line ``loss``, and its series is
``val/loss`` (so a loss-like key or tag gets its direction as any other name does).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import attrs

from gpuplaned.tensorboard.rewind import order_key

__all__ = ["LOG_DIRS", "MAX_DEPTH", "SLACK", "Claim", "EventFile", "Listing", "find_event_files", "log_roots",
           "parse_name", "writer_pid"]

LOG_DIRS = ("runs", "logs", "outputs", "lightning_logs")
MAX_DEPTH = 5
SLACK = 10  # seconds: the writer's name has whole seconds, and clocks drift a little
_NAME = re.compile(r"events\.out\.tfevents\.(\d+)\.(.+)\Z")
_NOT_EVENTS = (".profile-empty", ".sagemaker-uploaded")
_MAX_ENTRIES = 20000  # directory entries looked at per root and pass: outputs/ can be huge


@attrs.frozen
class EventFile:
    path: Path
    run: str  # the folder relative to its base run, "" for the base itself
    order: tuple[str, str]  # (file name, folder): TensorBoard's order within a run

    def series(self, tag: str) -> str:
        if not self.run:
            return tag
        parent, _, folder = self.run.rpartition("/")
        grouped = tag.replace("/", "_") + "_"
        if folder.startswith(grouped) and len(folder) > len(grouped):  # add_scalars: the chart, then the line
            return f"{parent}/{tag}/{folder[len(grouped):]}" if parent else f"{tag}/{folder[len(grouped):]}"
        return f"{self.run}/{tag}"


Claim = Callable[[Path, int, "int | None"], bool]  # (file, its name's time, its writer's pid) -> the job's?


def parse_name(name: str) -> tuple[int, str] | None:
    """(time, the rest after it) of an event file name, or None for any other file."""
    if name.endswith(_NOT_EVENTS):
        return None
    match = _NAME.match(name)
    return (int(match.group(1)), match.group(2)) if match else None


def log_roots(cwd: str | os.PathLike, env: Mapping[str, str] | None = None,
              extra: Iterable[str | os.PathLike] = (), *,
              resolve: Callable[[str], str] = os.path.realpath) -> list[str]:
    """The folders to look in for a job started in ``cwd`` with environment ``env``; two names
    of one folder count once, as ``resolve`` (``Listing.realpath`` in a pass) resolves them.
    Strings, not Paths: a tail's every poll walks them (``find_event_files``), for every job."""
    base = os.fspath(cwd)
    declared = [os.fspath(d) for d in extra]
    if env and env.get("TB_LOG_DIR"):
        declared.append(env["TB_LOG_DIR"])
    seen: set[str] = set()
    unique = []
    for name in (*LOG_DIRS, *declared):
        root = os.path.join(base, name)  # an absolute name stays as it is
        key = resolve(root)
        if key not in seen:
            seen.add(key)
            unique.append(root)
    return unique


def _from_host(rest: str, host: str | None) -> bool:
    return host is None or rest == host or rest.startswith(host + ".")


def writer_pid(rest: str, host: str) -> int | None:
    """The pid after ``<host>.`` in the rest of an event file's name (None: the name has none,
    as TensorFlow 1's writer names them)."""
    if not rest.startswith(host + "."):
        return None
    first = rest[len(host) + 1:].split(".", 1)[0]
    return int(first) if first.isdigit() else None


class Listing:
    """One pass's look at the folders, shared by the jobs it reads: each root walked and each
    path resolved once, however many jobs share them (a queue's or a sweep's jobs mostly run
    in one folder; at hundreds of short jobs a second, walking it again for each was most of
    the TensorBoard tailer's CPU). Good for one pass only: folders change between passes."""

    def __init__(self) -> None:
        # Keyed by strings: every poll of every job looks its roots up, and making and hashing
        # a Path for each was most of a poll's cost once the walk itself was cached.
        self.event_files: Callable[[str], list[Path]] = functools.cache(lambda root: list(_walk(root)))
        self.realpath: Callable[[str], str] = functools.cache(os.path.realpath)


def find_event_files(roots: Iterable[str | os.PathLike], *, since: float, host: str | None = None,
                     claim: Claim | None = None, listing: Listing | None = None) -> list[EventFile]:
    """The event files under ``roots`` written since ``since`` (seconds since the epoch),
    in TensorBoard's order; with ``claim`` (and ``host``), only those it takes. Roots that do
    not exist are skipped; roots nested in one another give each file once. ``listing``: the
    pass's, when several jobs are looked at in a row."""
    listing = listing or Listing()
    found: dict[str, tuple[Path, str]] = {}  # realpath -> (file, the root it was found under)
    for root in roots:
        key = os.fspath(root)
        for path in listing.event_files(key):
            parsed = parse_name(path.name)
            if parsed is None or parsed[0] < since - SLACK or not _from_host(parsed[1], host):
                continue
            if claim is not None and not claim(path, parsed[0], writer_pid(parsed[1], host) if host else None):
                continue
            found.setdefault(listing.realpath(os.fspath(path)), (path, key))
    by_root: dict[str, list[Path]] = {}
    for path, key in found.values():
        by_root.setdefault(key, []).append(path)
    files = []
    for key, paths in by_root.items():
        root = Path(key)
        depth = min(len(p.parent.relative_to(root).parts) for p in paths)
        bases = {p.parent for p in paths if len(p.parent.relative_to(root).parts) == depth}
        for path in paths:
            base = next((b for b in bases if path.parent == b or b in path.parent.parents), None)
            run = "" if base is None or base == path.parent else path.parent.relative_to(base).as_posix()
            if base is None:  # beside a base, not below one: named from the root
                run = path.parent.relative_to(root).as_posix()
            files.append(EventFile(path, run, (path.name, path.parent.as_posix())))
    files.sort(key=lambda f: order_key(f.order))
    return files


def _walk(root: str):
    """Event files under ``root``, at most MAX_DEPTH folders down, hidden folders skipped."""
    seen = 0
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            seen += 1
            if seen > _MAX_ENTRIES:
                return
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth < MAX_DEPTH and not entry.name.startswith("."):
                        stack.append((entry.path, depth + 1))
                elif entry.name.startswith("events.out.tfevents.") and entry.is_file():
                    yield Path(entry.path)
            except OSError:
                continue
