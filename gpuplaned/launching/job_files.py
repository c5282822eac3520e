"""The job files as the daemon reads them: ``runtime.json``, ``exit.json`` and the logs' tails.

A shim writes them (``gpuplaned.shim.records`` has their format and names): ``runtime.json``
once the job's main process is started, ``exit.json`` once it and all its descendants are
gone. ``Runtime`` and ``ExitRecord`` are attrs classes read with the one converter
(``gpuplaned.protocol.converter.structure``: strict types, no unknown keys).
``read_runtime`` and ``read_exit`` give None while a file does not exist yet, and raise
``CorruptRecord`` (a ``ValueError``) for one that is not what a shim writes, or (given the
attempt it should be) one of another attempt. ``exit_record`` reads the same record from the
launcher's exit event, raising ``InvalidField``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs

from gpuplaned.domain.failures import ExitReason
from gpuplaned.protocol.converter import FieldInvalid, structure
from gpuplaned.protocol.errors import ApiError
from gpuplaned.shim.records import EXIT_FILE, RUNTIME_FILE

TAIL_BYTES = 64 * 1024
T = TypeVar("T")


class CorruptRecord(ValueError):
    """A job file (``runtime.json``, ``exit.json``) exists but is not what a shim writes."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class InvalidField(ValueError):
    """A field of a shim's record, or of the launcher's reply, is missing or of the wrong type."""


def _finite(_: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise FieldInvalid(attribute.name, f"must be a finite number, got {value!r}")


class _OfAnAttempt:
    """A record's ``job_id`` and ``attempt``: None in one whose spawn named none (tests, older shims)."""

    __slots__ = ()
    job_id: str | None
    attempt: int | None

    def belongs_to(self, job_id: str, attempt: int) -> bool:
        """Whether this record may be the one of ``job_id`` attempt ``attempt``."""
        return self.job_id in (None, job_id) and self.attempt in (None, attempt)


@attrs.frozen
class Runtime(_OfAnAttempt):
    """``runtime.json``: written by the shim once the command has been exec'd."""

    id: str | None
    shim_pid: int
    shim_start_time: int | None
    pid: int
    pgid: int
    start_time: int | None
    argv: tuple[str, ...]
    cwd: str
    env_keys: tuple[str, ...]
    started_at: float = attrs.field(validator=_finite)  # wall clock, epoch seconds (data only)
    timeout_s: float | None = attrs.field(validator=_finite)
    grace_s: float = attrs.field(validator=_finite)
    job_id: str | None = None
    attempt: int | None = None
    # Where a one-shot shim ran (a Slurm batch job); None in a local shim's record.
    host: str | None = None
    slurm_job_id: str | None = None


@attrs.frozen
class ExitRecord(_OfAnAttempt):
    """``exit.json``: written by the shim after the job and all its descendants are gone.

    ``reason`` says how it ended (``ExitReason``). ``exit_code`` is set when the main
    process exited (127/126 for a spawn failure), ``signal`` when a signal killed it.
    ``forwarded`` names the signals a one-shot shim sent on to the job (Slurm's warning).
    """

    exit_code: int | None
    signal: int | None
    signal_name: str | None
    reason: ExitReason
    ended_at: float = attrs.field(validator=_finite)  # wall clock, epoch seconds (data only)
    pid: int | None
    error: str | None = None
    job_id: str | None = None
    attempt: int | None = None
    forwarded: tuple[str, ...] = ()  # signals a one-shot shim passed on to the job (SIGUSR2)

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0 and self.signal is None and self.reason == ExitReason.EXITED


def parse(data: Any, cls: type[T], what: str) -> T:
    """``data`` (what a shim or the launcher wrote) as a ``cls``.

    Raises:
        InvalidField: it is not a JSON object, or a field is missing, unknown or of the wrong type.
    """
    try:
        return structure(data, cls, what=what)
    except ApiError as exc:
        raise InvalidField(exc.message) from None


R = TypeVar("R", "Runtime", "ExitRecord")


def _read(path: Path, cls: type[R], owner: tuple[str, int] | None) -> R | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise CorruptRecord(path, f"not JSON ({exc})") from None
    try:
        record = parse(data, cls, path.name)
    except InvalidField as exc:
        raise CorruptRecord(path, str(exc)) from None
    if owner is not None and not record.belongs_to(*owner):
        raise CorruptRecord(path, f"the record of job {record.job_id} attempt {record.attempt}, "
                                  f"not of job {owner[0]} attempt {owner[1]}")
    return record


def read_runtime(job_dir: str | os.PathLike[str], owner: tuple[str, int] | None = None) -> Runtime | None:
    """``job_dir/runtime.json``; None while it does not exist.

    Raises:
        CorruptRecord: the file is not valid JSON, lacks a field, or (``owner``: the job id
            and attempt it should be of) names another attempt.
    """
    return _read(Path(job_dir) / RUNTIME_FILE, Runtime, owner)


def read_exit(job_dir: str | os.PathLike[str], owner: tuple[str, int] | None = None) -> ExitRecord | None:
    """``job_dir/exit.json``; None while the job (or its clean-up) is still running.

    Raises:
        CorruptRecord: the file is not valid JSON, lacks a field, has an unknown reason, or
            (``owner``: the job id and attempt it should be of) is another attempt's exit.
    """
    return _read(Path(job_dir) / EXIT_FILE, ExitRecord, owner)


def exit_record(data: Mapping[str, Any]) -> ExitRecord:
    """An ``ExitRecord`` from what a shim writes (``exit.json``, or its exit line).

    Raises:
        InvalidField: a field is missing or of the wrong type, or the reason is unknown.
    """
    return parse(data, ExitRecord, "the exit record")


def tail_text(path: str | os.PathLike[str], max_bytes: int = TAIL_BYTES) -> str:
    """The last ``max_bytes`` of a log as text ("" if it does not exist).

    A cut-off first line is dropped when the tail holds a newline; undecodable bytes are
    replaced.
    """
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes)
            f.seek(start)
            data = f.read(max_bytes)
    except FileNotFoundError:
        return ""
    if start > 0:
        nl = data.find(b"\n")
        if 0 <= nl < len(data) - 1:
            data = data[nl + 1:]
    return data.decode("utf-8", errors="replace")
