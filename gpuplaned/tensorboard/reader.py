"""Reading one event file incrementally, from an (inode, offset) cursor. Synchronous file
I/O and no trio: the tailer runs each pass in a worker thread, the bench and the tests call
it directly.

Each ``read`` reads what was appended since the last one, in reads of at most 1 MiB, and
returns the scalars of the complete records. The cursor is always a record boundary:

- a half-written record at the end is kept in memory and completed by the next read (its
  bytes are not read twice); after a restart it is read again from the cursor;
- a record that fails its CRC stops the read there: a writer that maps the file, or a
  network filesystem, can show bytes before they are final. It is read again from disk on
  each pass; once it has failed for ``grace`` seconds it is reported (``Problem``) and
  skipped: by its length when the length is sound, else by looking for the next sound
  record. The rest of the file is then read as usual.

A cursor whose inode is not the file's, or whose offset is past the file's end, is for
another file (the path was written anew): reading starts at 0, with a ``Problem``.
"""

from __future__ import annotations

import os

import attrs

from gpuplaned.tensorboard.events import Columns, EventDecoder
from gpuplaned.tensorboard.records import HEADER, find_header, scan

__all__ = ["CHUNK", "Cursor", "EventFileReader", "Problem", "ReadResult"]

CHUNK = 1 << 20


@attrs.frozen
class Cursor:
    """Where the records read so far end in the file: its inode and an offset."""

    inode: int
    offset: int


@attrs.frozen
class Problem:
    """Something the reader skipped or restarted, for the job's events."""

    path: str
    offset: int
    what: str  # "bad length crc", "bad data crc", "file replaced"


@attrs.frozen
class ReadResult:
    scalars: dict[str, Columns]  # tag -> points read this time
    cursor: Cursor  # where the next read starts; store it with the points
    problems: list[Problem]
    records: int  # complete records read this time (scalar or not)


class EventFileReader:
    """Reads one event file from ``cursor`` on (None: the start).

    Args:
        path: the event file.
        cursor: where a previous reader stopped (its points already stored), or None.
        grace: how long, in seconds of the clock given to ``read``, a record failing its
            CRC is retried before it is skipped.
        chunk: the largest single read.
    """

    def __init__(self, path: str | os.PathLike, cursor: Cursor | None = None, *, grace: float = 30.0,
                 chunk: int = CHUNK) -> None:
        self.path = os.fspath(path)
        self.grace = grace
        self.chunk = chunk
        self.cursor = cursor
        self.bytes_read = 0  # every byte read from the file, for the stats and the tests
        self._fd: int | None = None
        self._pending = b""  # bytes after the cursor already read: a half-written record
        self._bad_at: int | None = None  # file offset of the record failing its CRC
        self._bad_since = 0.0
        self._resync = False  # a corrupt length was skipped: look for the next record
        self._decoder = EventDecoder()
        self._known: dict[bytes, int] = {}

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self, problems: list[Problem]) -> int | None:
        """The open file, reopened if the path now names another file; None if it is gone."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.close()
            return None
        if self._fd is not None and os.fstat(self._fd).st_ino != st.st_ino:
            self.close()
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            st = os.fstat(self._fd)
        if self.cursor is None:
            self.cursor = Cursor(st.st_ino, 0)
        elif self.cursor.inode != st.st_ino or self.cursor.offset > st.st_size:
            problems.append(Problem(self.path, self.cursor.offset, "file replaced"))
            self.cursor = Cursor(st.st_ino, 0)
            self._pending = b""
            self._decoder = EventDecoder()
        return self._fd

    def read(self, now: float) -> ReadResult:
        """Read what was appended since the last read. ``now`` is the caller's clock (for
        the grace period only)."""
        problems: list[Problem] = []
        parts: dict[str, list[Columns]] = {}
        records = 0
        fd = self._open(problems)
        if fd is None:
            return ReadResult({}, self.cursor or Cursor(0, 0), problems, 0)
        inode = self.cursor.inode
        offset = self.cursor.offset
        while True:
            data = os.pread(fd, self.chunk, offset + len(self._pending))
            self.bytes_read += len(data)
            buf = self._pending + data if self._pending else data
            if not buf:
                break
            start = 0
            if self._resync:
                found = find_header(buf, 0)
                if found is None:
                    keep = max(0, len(buf) - HEADER + 1)
                    offset += keep
                    self._pending = buf[keep:]
                    if len(data) < self.chunk:
                        break
                    continue
                self._resync = False
                start = found
            frames = scan(buf, start, self._known)
            for tag, columns in self._decoder.decode(buf, frames.starts, frames.lengths).items():
                parts.setdefault(tag, []).append(columns)
            records += len(frames.starts)
            offset += start + frames.consumed
            self._pending = buf[start + frames.consumed:]
            if frames.bad is not None:
                self._pending = b""  # re-read from disk: the bytes may not be final yet
                bad_offset = offset
                if self._bad_at != bad_offset:
                    self._bad_at, self._bad_since = bad_offset, now
                if now - self._bad_since < self.grace:
                    break
                self._bad_at = None
                if frames.bad.kind == "data":
                    problems.append(Problem(self.path, bad_offset, "bad data crc"))
                    offset += frames.bad.size
                else:
                    problems.append(Problem(self.path, bad_offset, "bad length crc"))
                    offset += 1
                    self._resync = True
                continue
            if self._bad_at is not None and self._bad_at < offset:
                self._bad_at = None  # it healed
            if len(data) < self.chunk:
                break
        self.cursor = Cursor(inode, offset)
        scalars = {tag: Columns.concat(cols) for tag, cols in parts.items()}
        return ReadResult(scalars, self.cursor, problems, records)
