"""The local spool: a run's batches on disk while no daemon takes them, for a later replay.

File ``$GPUPLANE_HOME/spool/sdk-<session id>.jsonl`` (default home
``~/.local/share/gpuplane``, as the daemon resolves it), one JSON record a line, each line
written with one ``write()`` on an ``O_APPEND`` descriptor::

    {"type": "session", "v": 1, "session_id": "<uuid7>", "open": {<the POST /sessions body>}}
    {"type": "env", "env": {...}}
    {"type": "batch", "seq": 7, "metrics": {...}}
    {"type": "finish", "status": "SUCCEEDED"}

(``gpuplaned.protocol.sdk_spool`` reads it back; a contract test keeps the two in step.)

Locking: the file is made under a temporary name, locked with ``flock(LOCK_EX)`` and only
then renamed into place, and the lock is held for as long as this process keeps the file
open. The kernel drops it when the process ends, however it ends. The daemon (at start) and
``gpuplanectl sync`` replay only files whose lock they can take, so a live run's spool is
replayed by the run itself, when the daemon comes back, and never by two at once.

Size: at most ``GPUPLANE_SPOOL_MAX_BYTES`` (default 256 MiB; 0 turns the spool off). A
record that would pass it is not written (``append`` says so) and the caller keeps its points
in memory, where the oldest are dropped and counted. The finishing records (the dropped
total, the finish status) are written whatever the cap: a few hundred bytes.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Mapping, Optional, Tuple

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock, so no spool (points wait in memory only)
    fcntl = None  # type: ignore[assignment]

SPOOL_VERSION = 1
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
READ_CHUNK = 1024 * 1024


def spool_dir(env: Mapping[str, str]) -> str:
    """``$GPUPLANE_HOME/spool``, else ``~/.local/share/gpuplane/spool`` (the daemon's home)."""
    home = env.get("GPUPLANE_HOME")
    base = os.path.abspath(os.path.expanduser(home)) if home else os.path.expanduser("~/.local/share/gpuplane")
    return os.path.join(base, "spool")


def max_bytes(env: Mapping[str, str]) -> Tuple[int, Optional[str]]:
    """The cap from ``GPUPLANE_SPOOL_MAX_BYTES`` and a complaint when the value was unusable."""
    raw = env.get("GPUPLANE_SPOOL_MAX_BYTES", "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES, None
    try:
        value = int(raw)
        if value < 0:
            raise ValueError(raw)
    except ValueError:
        return DEFAULT_MAX_BYTES, ("gpuplane: GPUPLANE_SPOOL_MAX_BYTES=%r is not a byte count; using %d"
                                   % (raw, DEFAULT_MAX_BYTES))
    return value, None


def available() -> bool:
    return fcntl is not None


def _line(record: Mapping[str, Any]) -> bytes:
    return (json.dumps(record, separators=(",", ":"), allow_nan=True) + "\n").encode("utf-8")


class Spool:
    """This process's spool file for one session, locked while open. Used by the sender thread only."""

    def __init__(self, path: str, fd: int, size: int, limit: int) -> None:
        self.path = path
        self._fd = fd
        self.size = size  # bytes in the file
        self.header_end = size  # where the records after the session header start
        self.limit = limit

    @classmethod
    def create(cls, directory: str, session_id: str, open_body: Mapping[str, Any], limit: int) -> Spool:
        """Make, lock and name the file, with its session header.

        Raises:
            OSError: the directory or file cannot be made or written.
        """
        assert fcntl is not None
        os.makedirs(directory, mode=0o700, exist_ok=True)
        path = os.path.join(directory, "sdk-%s.jsonl" % session_id)
        temp = os.path.join(directory, ".sdk-%s.%d.tmp" % (session_id, os.getpid()))
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else has it
            header = _line({"type": "session", "v": SPOOL_VERSION, "session_id": session_id, "open": open_body})
            _write_all(fd, header)
            os.rename(temp, path)  # visible to replayers only now, already locked
        except BaseException:
            os.close(fd)
            try:
                os.unlink(temp)
            except OSError:
                pass
            raise
        return cls(path, fd, len(header), limit)

    def append(self, record: Mapping[str, Any]) -> bool:
        """Write one record; False (and nothing written) when it would pass the cap.

        Raises:
            OSError: the write failed (a full disk...).
        """
        line = _line(record)
        if self.size + len(line) > self.limit:
            return False
        self._write(line)
        return True

    def append_always(self, record: Mapping[str, Any]) -> None:
        """Write one small record whatever the cap (the dropped total, the finish status)."""
        self._write(_line(record))

    def _write(self, line: bytes) -> None:
        _write_all(self._fd, line)
        self.size += len(line)

    def read_at(self, offset: int) -> Tuple[Optional[Dict[str, Any]], int]:
        """The record starting at ``offset`` and where the next one starts; (None, offset) at the end."""
        data = b""
        at = offset
        while True:
            chunk = os.pread(self._fd, READ_CHUNK, at)
            if not chunk:
                return None, offset  # no complete line left (we write whole lines, so: the end)
            cut = chunk.find(b"\n")
            if cut >= 0:
                data += chunk[:cut]
                end = at + cut + 1
                try:
                    record = json.loads(data.decode("utf-8"))
                except (ValueError, RecursionError):  # not ours, or torn: skipped like a bad line
                    record = {}
                return (record if isinstance(record, dict) else {}), end
            data += chunk
            at += len(chunk)

    def rewind(self) -> None:
        """Everything after the header was delivered: cut it off (the header stays for a later outage)."""
        os.ftruncate(self._fd, self.header_end)
        self.size = self.header_end

    def remove(self) -> None:
        """Everything was delivered: remove the file (while still holding its lock), then close it."""
        try:
            os.unlink(self.path)
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        """Release the lock and keep the file, for the daemon or ``gpuplanectl sync`` to replay."""
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = -1

    @property
    def closed(self) -> bool:
        return self._fd < 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
