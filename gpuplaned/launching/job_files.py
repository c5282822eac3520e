"""The job files as the daemon reads them: ``runtime.json``, ``exit.json`` and the logs' tails.

A shim writes them (``gpuplaned.shim.records`` has their format and names): ``runtime.json``
once the job's main process is started, ``exit.json`` once it and all its descendants are
gone. ``read_runtime`` and ``read_exit`` give None while a file does not exist yet, and
raise ``CorruptRecord`` (a ``ValueError``) for one that is not what a shim writes.
``exit_record`` reads the same record from the launcher's exit event. The field checks
(``int_field`` and the others, raising ``InvalidField``) serve the launcher's replies too.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from gpuplaned.shim.records import EXIT_FILE, RUNTIME_FILE

TAIL_BYTES = 64 * 1024


class CorruptRecord(ValueError):
    """A job file (``runtime.json``, ``exit.json``) exists but is not what a shim writes."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@attrs.frozen
class Runtime:
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
    started_at: float  # wall clock, epoch seconds (data only)
    timeout_s: float | None
    grace_s: float


@attrs.frozen
class ExitRecord:
    """``exit.json``: written by the shim after the job and all its descendants are gone.

    ``reason`` is one of ``exited``, ``signaled``, ``cancelled``, ``timeout``,
    ``spawn_failed``. ``exit_code`` is set when the main process exited (127/126 for a
    spawn failure), ``signal`` when a signal killed it.
    """

    exit_code: int | None
    signal: int | None
    signal_name: str | None
    reason: str
    ended_at: float  # wall clock, epoch seconds (data only)
    pid: int | None
    error: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0 and self.signal is None and self.reason == "exited"


REASONS = frozenset({"exited", "signaled", "cancelled", "timeout", "spawn_failed"})


class InvalidField(ValueError):
    """A field of a shim's record, or of the launcher's reply, is missing or of the wrong type."""


def _field(data: Mapping[str, Any], key: str) -> Any:
    if key not in data:
        raise InvalidField(f"missing {key!r}")
    return data[key]


def int_field(data: Mapping[str, Any], key: str, *, optional: bool = False) -> Any:
    value = _field(data, key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidField(f"{key!r} must be an integer, got {value!r}")
    return value


def float_field(data: Mapping[str, Any], key: str, *, optional: bool = False) -> Any:
    value = _field(data, key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidField(f"{key!r} must be a number, got {value!r}")
    return float(value)


def str_field(data: Mapping[str, Any], key: str, *, optional: bool = False) -> Any:
    value = _field(data, key) if not optional else data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidField(f"{key!r} must be a string, got {value!r}")
    return value


def strs_field(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = _field(data, key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidField(f"{key!r} must be a list of strings, got {value!r}")
    return tuple(value)


def _load(path: Path) -> dict[str, Any] | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise CorruptRecord(path, f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CorruptRecord(path, "not a JSON object")
    return data


def read_runtime(job_dir: str | os.PathLike[str]) -> Runtime | None:
    """``job_dir/runtime.json``; None while it does not exist.

    Raises:
        CorruptRecord: the file is not valid JSON or lacks a field.
    """
    path = Path(job_dir) / RUNTIME_FILE
    data = _load(path)
    if data is None:
        return None
    try:
        return Runtime(
            id=str_field(data, "id", optional=True),
            shim_pid=int_field(data, "shim_pid"),
            shim_start_time=int_field(data, "shim_start_time", optional=True),
            pid=int_field(data, "pid"),
            pgid=int_field(data, "pgid"),
            start_time=int_field(data, "start_time", optional=True),
            argv=strs_field(data, "argv"),
            cwd=str_field(data, "cwd"),
            env_keys=strs_field(data, "env_keys"),
            started_at=float_field(data, "started_at"),
            timeout_s=float_field(data, "timeout_s", optional=True),
            grace_s=float_field(data, "grace_s"),
        )
    except InvalidField as exc:
        raise CorruptRecord(path, str(exc)) from None


def read_exit(job_dir: str | os.PathLike[str]) -> ExitRecord | None:
    """``job_dir/exit.json``; None while the job (or its clean-up) is still running.

    Raises:
        CorruptRecord: the file is not valid JSON, lacks a field or has an unknown reason.
    """
    path = Path(job_dir) / EXIT_FILE
    data = _load(path)
    if data is None:
        return None
    try:
        return exit_record(data)
    except InvalidField as exc:
        raise CorruptRecord(path, str(exc)) from None


def exit_record(data: Mapping[str, Any]) -> ExitRecord:
    """An ``ExitRecord`` from what a shim writes (``exit.json``, or its exit line).

    Raises:
        ValueError: a field is missing or of the wrong type, or the reason is unknown.
    """
    reason = str_field(data, "reason")
    if reason not in REASONS:
        raise InvalidField(f"unknown reason {reason!r}")
    return ExitRecord(
        exit_code=int_field(data, "exit_code", optional=True),
        signal=int_field(data, "signal", optional=True),
        signal_name=str_field(data, "signal_name", optional=True),
        reason=reason,
        ended_at=float_field(data, "ended_at"),
        pid=int_field(data, "pid", optional=True),
        error=str_field(data, "error", optional=True),
    )


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
