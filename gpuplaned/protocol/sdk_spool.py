"""The SDK's spool files, read back: where they are, who may take one, and what to replay.

A training process that cannot reach the daemon writes what the daemon has not acknowledged
to ``$GPUPLANE_HOME/spool/sdk-<session id>.jsonl`` (``gpuplane._spool`` writes it; this is the
reading side, kept in step with it by a contract test). One JSON object a line::

    {"type": "session", "v": 1, "session_id": "<uuid7>", "open": {<the POST /sessions body>}}
    {"type": "env", "env": {...}}                        # the process's environment snapshot
    {"type": "batch", "seq": 7, "metrics": {...}}         # the POST .../batches body (with
                                                          # "events", "checkpoints" and "evaluations" when any)
    {"type": "finish", "status": "SUCCEEDED"}

Who may take a file: its writer holds ``flock(LOCK_EX)`` on it from before the file has its
name (made under a temporary name, locked, then renamed) until it closes it or dies (the
kernel drops the lock, ``kill -9`` included). A replayer (the daemon at start,
``gpuplanectl sync``) takes the lock with ``LOCK_NB`` and skips a file it cannot lock, so it
never races a live writer, which replays its own spool when the daemon comes back. After
locking it checks that the name still leads to the file it locked: another replayer may have
finished and removed it in between.

Replay is exactly once because the daemon stores each (session, seq) once: a batch that the
SDK already delivered, or that an interrupted replay sent, is answered ``duplicate`` and
stores nothing; re-opening a session by its id returns the same session and run. A file
replayed to its end is removed; one with lines that could not be read is kept, renamed
``*.jsonl.corrupt``, and every such line is named in a warning.

``Replay`` is the pure part (lines in, steps out, answers in, a report out); the daemon
(``gpuplaned.service.passes.spool_replay``) and ``gpuplanectl sync`` each drive it with their own
way of sending a step. Stdlib only; no trio.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from gpuplaned.protocol import bounded_json
from gpuplaned.protocol.job_states import FINISH_STATES

SPOOL_VERSION = 1
PREFIX = "sdk-"
SUFFIX = ".jsonl"
CORRUPT_SUFFIX = ".corrupt"
BATCH_RECORDS = ("events", "checkpoints", "evaluations")  # what a batch carries beside its metrics
READ_CHUNK = 4 * 1024 * 1024
SESSION_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
_FILE_NAME = re.compile(r"^sdk-([0-9a-f-]{36})\.jsonl$")


def default_spool_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$GPUPLANE_HOME/spool``, else ``~/.local/share/gpuplane/spool``: what the SDK uses."""
    env = os.environ if env is None else env
    home = env.get("GPUPLANE_HOME")
    base = Path(home).expanduser().absolute() if home else Path("~/.local/share/gpuplane").expanduser()
    return base / "spool"


def session_of(path: Path) -> str | None:
    """The session id a spool file's name carries, or None for a name that is not a spool file's."""
    found = _FILE_NAME.match(path.name)
    return found.group(1) if found and SESSION_ID.match(found.group(1)) else None


def spool_files(directory: Path) -> list[Path]:
    """The spool files in ``directory``, oldest session first (UUIDv7 ids sort by time)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(directory / name for name in names if session_of(Path(name)) is not None)


class SpoolBusy(Exception):
    """A live process (its writer, or another replay) holds the file's lock."""


class SpoolClaim:
    """One spool file taken for replay: locked until ``close`` or ``done``.

    Resource handling: the lock goes with the file descriptor; use it as a context manager.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        self._offset = 0
        self._line = 0
        self._rest = b""

    @classmethod
    def take(cls, path: Path) -> SpoolClaim:
        """Lock ``path`` for replay.

        Raises:
            SpoolBusy: a live process holds it.
            FileNotFoundError: it is gone (replayed and removed by someone else).
        """
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise SpoolBusy(str(path)) from None
                raise
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                raise FileNotFoundError(errno.ENOENT, "replayed and removed meanwhile", str(path))
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    def read(self, max_bytes: int = READ_CHUNK) -> list[tuple[int, bytes]]:
        """The next complete lines as ``(line number, bytes)``, about ``max_bytes`` at a time;
        [] at the end. A last line without its newline (a writer killed mid-write) comes
        last, as it is, for the caller to report."""
        out: list[tuple[int, bytes]] = []
        while not out:
            chunk = os.pread(self._fd, max_bytes, self._offset)
            if not chunk:
                if self._rest:
                    self._line += 1
                    out.append((self._line, self._rest))
                    self._rest = b""
                return out
            self._offset += len(chunk)
            lines = (self._rest + chunk).split(b"\n")
            self._rest = lines.pop()
            for raw in lines:
                self._line += 1
                out.append((self._line, raw))
        return out

    def done(self, *, keep: bool) -> Path | None:
        """The file was replayed to its end: remove it, or (``keep``) rename it ``*.corrupt``.

        Returns the kept file's new path, else None.
        """
        try:
            if keep:
                kept = self.path.with_name(self.path.name + CORRUPT_SUFFIX)
                os.rename(self.path, kept)
                return kept
            os.unlink(self.path)
            return None
        finally:
            self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> SpoolClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@attrs.frozen
class Step:
    """One request to make for a spool file: ``open``, ``env``, ``batch`` or ``finish``."""

    kind: str
    path: str  # the API path that does it
    body: dict[str, Any]
    line: int


@attrs.define
class FileReport:
    """What replaying one spool file did."""

    file: str
    session_id: str | None
    run_id: str | None = None
    status: str = "pending"  # replayed, busy, gone, interrupted, failed
    batches: int = 0  # batches stored by this replay
    duplicates: int = 0  # batches the daemon had already (the SDK or an earlier replay sent them)
    points: int = 0  # points stored by this replay
    rejected: int = 0  # batches the daemon refused for good (bad data)
    finished: str | None = None  # the status the session was finished with
    corrupt_lines: list[int] = attrs.field(factory=list)
    warnings: list[str] = attrs.field(factory=list)
    error: str | None = None
    kept: str | None = None  # where a file with corrupt lines was kept

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def retryable(status: int) -> bool:
    """Whether an HTTP status means "later" (the daemon is busy, starting or stopping) rather than "never"."""
    return status in (408, 425, 429) or status >= 500


class Replay:
    """Pure: a spool file's lines in, the steps to replay them out, the answers in, a report out.

    Theory of operation: the session must be open before anything else, so the first step is
    always ``open`` (from the file's header, or from its name when the header line is
    unreadable: the points then land in a new run without a name rather than nowhere).
    Unreadable lines are skipped with a warning naming the file and line. An answer that
    says "later" (5xx, 429) or a refused ``open`` stops the file, which is kept as it is for
    the next replay; a batch refused for good (a 4xx: bad data) is counted and skipped.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.report = FileReport(str(path), session_of(path))
        self._opened = False

    def feed(self, lines: list[tuple[int, bytes]]) -> list[Step]:
        steps: list[Step] = []
        for line, raw in lines:
            if not raw.strip():
                continue
            try:
                record = bounded_json.loads(raw)
            except ValueError as exc:  # bounded_json.TooDeep too: one such line never stops the file
                self._corrupt(line, f"not valid JSON ({exc})")
                continue
            kind = record.get("type") if isinstance(record, dict) else None
            if kind == "session":
                self._header(line, record, steps)
                continue
            if kind == "batch":
                seq, metrics = record.get("seq"), record.get("metrics")
                if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0 or not isinstance(metrics, dict):
                    self._corrupt(line, "a batch record needs a non-negative seq and a metrics object")
                    continue
                body = {"seq": seq, "metrics": metrics}
                body.update((key, record[key]) for key in BATCH_RECORDS if key in record)
                step = Step("batch", self._session_path("batches"), body, line)
            elif kind == "env" and isinstance(record.get("env"), dict):
                step = Step("env", self._session_path("env"), record["env"], line)
            elif kind == "finish" and record.get("status") in FINISH_STATES:
                step = Step("finish", self._session_path("finish"), {"status": record["status"]}, line)
            else:
                self._corrupt(line, f"not a spool record ({str(kind)[:40]!r})")
                continue
            if not self._opened:
                self._open(line, {}, steps)
            steps.append(step)
        return steps

    def answered(self, step: Step, reply: Any) -> None:
        reply = reply if isinstance(reply, Mapping) else {}
        if step.kind == "open":
            self.report.run_id = reply.get("run_id") if isinstance(reply.get("run_id"), str) else None
        elif step.kind == "batch":
            if reply.get("duplicate"):
                self.report.duplicates += 1
            else:
                self.report.batches += 1
                points = reply.get("points")
                self.report.points += points if isinstance(points, int) else 0
        elif step.kind == "finish":
            self.report.finished = step.body["status"]

    def refused(self, step: Step, status: int, message: str) -> bool:
        """The daemon answered ``status``; True: go on with the file, False: stop here."""
        where = f"{self.path} line {step.line}"
        if retryable(status) or step.kind == "open" or status == 404:
            self.stopped(f"{where}: {message}", failed=not retryable(status))
            return False
        if step.kind == "batch":
            self.report.rejected += 1
        self.report.warnings.append(f"{where}: the daemon refused the {step.kind} record: {message}")
        return True

    def stopped(self, error: str, *, failed: bool = False) -> None:
        """The replay of this file ended early (the daemon went away, or refused the session)."""
        self.report.status = "failed" if failed else "interrupted"
        self.report.error = error

    def ended(self) -> bool:
        """Every line was replayed. Returns whether to keep the file (it had unreadable lines)."""
        self.report.status = "replayed"
        return bool(self.report.corrupt_lines)

    def _session_path(self, what: str) -> str:
        return f"/api/v1/sessions/{self.report.session_id}/{what}"

    def _header(self, line: int, record: dict[str, Any], steps: list[Step]) -> None:
        if self._opened:
            self._corrupt(line, "a second session header")
            return
        version, session_id, body = record.get("v"), record.get("session_id"), record.get("open")
        if version != SPOOL_VERSION:
            self._corrupt(line, f"spool version {version!r} (this reader knows {SPOOL_VERSION})")
        elif not isinstance(session_id, str) or not SESSION_ID.match(session_id) or not isinstance(body, dict):
            self._corrupt(line, "a session header needs a UUIDv7 session_id and an open object")
        else:
            if session_id != self.report.session_id:
                self.report.warnings.append(f"{self.path} line {line}: the header's session {session_id} "
                                            f"differs from the file name's; using the header's")
                self.report.session_id = session_id
            self._open(line, body, steps)
            return
        self._open(line, {}, steps)

    def _open(self, line: int, body: dict[str, Any], steps: list[Step]) -> None:
        if not body:
            self.report.warnings.append(f"{self.path}: no readable session header; its points go to "
                                        f"session {self.report.session_id} without a run name or project")
        self._opened = True
        session_id = self.report.session_id or ""
        opened = {**body, "session_id": self.report.session_id}
        if "started_at" not in opened and SESSION_ID.match(session_id):
            # An SDK that did not say when its run began (older, or no header): its UUIDv7 id
            # was made at init(), and its first 48 bits are that time in ms.
            opened["started_at"] = int(session_id.replace("-", "")[:12], 16)
        steps.append(Step("open", "/api/v1/sessions", opened, line))

    def _corrupt(self, line: int, why: str) -> None:
        self.report.corrupt_lines.append(line)
        self.report.warnings.append(f"{self.path} line {line}: {why}; skipped")


class Refused(Exception):
    """The daemon answered a step with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def take_claim(replay: Replay) -> SpoolClaim | None:
    """The replay's file, claimed; None when a live writer holds it (``busy``) or another
    replayer finished it first (``gone``), which its report then says."""
    try:
        return SpoolClaim.take(replay.path)
    except SpoolBusy:
        replay.report.status = "busy"
    except FileNotFoundError:
        replay.report.status = "gone"
    return None


def replay_file(path: Path, send: Callable[[Step], Any]) -> FileReport:
    """Replay one spool file through ``send`` (synchronously; ``gpuplanectl sync``).

    ``send(step)`` returns the daemon's answer, raises ``Refused`` for an error answer, or
    raises ``OSError`` when the daemon cannot be reached (the file is then left as it is).
    """
    replay = Replay(path)
    claim = take_claim(replay)
    if claim is None:
        return replay.report
    with claim:
        while lines := claim.read():
            for step in replay.feed(lines):
                try:
                    reply = send(step)
                except Refused as exc:
                    if not replay.refused(step, exc.status, exc.message):
                        return replay.report
                    continue
                except OSError as exc:
                    replay.stopped(f"{path} line {step.line}: the daemon went away ({exc})")
                    return replay.report
                replay.answered(step, reply)
        kept = claim.done(keep=replay.ended())
        replay.report.kept = str(kept) if kept else None
    return replay.report
