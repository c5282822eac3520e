"""Reading job log files: a sans-io line splitter and the file readers around it.

Owns: turning the bytes of ``<job_dir>/stdout.log`` and ``stderr.log`` into lines with a
stable identity. It does not own the files (the runner's shim writes them, append-only,
straight from the job's file descriptors) nor what happens to the lines (the ``logs``
actor keeps a tail in SQLite and publishes them through a ``Broadcast``).

Line identity is the byte offset at which the line starts. Offsets survive a daemon
restart, so a follower that saw the line at offset ``k`` resumes with
``read_from(path, k, limit, after=True)`` (or reads from ``k`` and drops offsets ``<= k``)
and gets neither a lost nor a repeated line. A page (``read_page``, ``tail_page``) also says
where the line after it starts, which a reader cannot work out from the decoded text. A line longer than ``max_line`` bytes is delivered in pieces, each with
its own offset; memory stays bounded even for a job that prints a gigabyte without a
newline, and the pieces are the same whether the file is read in one go or in chunks,
from the start or from a piece's offset.

Layers, as in h11: ``LineSplitter`` is pure (bytes in, lines out; no I/O, no trio);
``FileTail``, ``read_tail`` and ``read_from`` are small synchronous readers built on it;
``follow`` is the only trio code, a polling loop.

Why ``follow`` polls instead of using inotify: job directories are often on NFS or other
network and FUSE filesystems, where inotify never fires for writes made by the job and
silently reports nothing; polling works on every filesystem. Its cost is bounded and
known: one ``stat`` per file per interval, a read only when the size changed, and an
interval that grows while the file is quiet. The log files are append-only and written
by a process on this node, so size is an exact change signal. Each check's I/O runs in a
worker thread, so a hung network mount stalls that follower, never the daemon's event
loop.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import AsyncGenerator

import trio

__all__ = [
    "DEFAULT_MAX_LINE",
    "FileTail",
    "LineSplitter",
    "follow",
    "read_from",
    "read_page",
    "read_tail",
    "tail_page",
]

DEFAULT_MAX_LINE = 64 * 1024
_READ_CHUNK = 1 << 20

# Log polling gets its own threads, so that followers stuck on a hung mount cannot use up
# trio's default thread limiter, which the store and other actors share.
_IO_LIMITER = trio.CapacityLimiter(8)

Line = tuple[int, str]


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _char_boundary(buf: bytes, cut: int) -> int:
    """Move ``cut`` back (at most 3 bytes) so it does not fall inside a UTF-8 sequence."""
    for back in range(4):
        if buf[cut - back] & 0xC0 != 0x80:  # not a continuation byte: a character starts here
            return cut - back
    return cut  # not UTF-8 anyway; any cut is as good as another


class LineSplitter:
    """Split a byte stream into lines. Pure: no I/O, no trio.

    Lines end at ``\\n``; one ``\\r`` before it is dropped too. Bytes are decoded as UTF-8
    with ``errors="replace"`` per complete line (or piece), so a multi-byte character cut
    by a chunk boundary is decoded whole once the rest arrives. A line longer than
    ``max_line`` bytes is emitted in pieces of at most ``max_line`` bytes, cut between
    characters, so the buffer never holds more than ``max_line + 1`` bytes between calls.

    Args:
        max_line: the longest line (in bytes, without the line ending) emitted whole.
        offset: the stream position of the first byte that will be fed, so that
            ``feed_lines`` reports file offsets when reading starts mid-file.
    """

    __slots__ = ("_buf", "_start", "max_line")

    def __init__(self, *, max_line: int = DEFAULT_MAX_LINE, offset: int = 0) -> None:
        if max_line < 4:
            raise ValueError("max_line must be at least 4 bytes (one UTF-8 character)")
        if offset < 0:
            raise ValueError("offset must not be negative")
        self.max_line = max_line
        self._buf = b""  # the unfinished line
        self._start = offset  # stream offset of _buf[0]

    @property
    def offset(self) -> int:
        """Offset just after the last line emitted: where the unfinished line starts."""
        return self._start

    @property
    def position(self) -> int:
        """Offset just after the last byte fed."""
        return self._start + len(self._buf)

    def feed(self, data: bytes) -> list[str]:
        """Feed bytes; return the lines they complete."""
        return [line for _, line in self.feed_lines(data)]

    def flush(self) -> list[str]:
        """Return the unfinished last line, if any, as a line (the writer has finished)."""
        return [line for _, line in self.flush_lines()]

    def feed_lines(self, data: bytes) -> list[Line]:
        """Like ``feed``, with each line's start offset: ``[(offset, line), ...]``."""
        if not data:
            return []
        buf = self._buf + data if self._buf else bytes(data)
        out: list[Line] = []
        append = out.append
        max_line = self.max_line
        parts = buf.split(b"\n")
        rest = parts.pop()
        offset = self._start
        for part in parts:
            size = len(part)
            content = part[:-1] if part[-1:] == b"\r" else part
            if len(content) > max_line:
                self._pieces(content, offset, out, final=True)
            else:
                append((offset, content.decode("utf-8", "replace")))
            offset += size + 1
        # The unfinished line: a trailing "\r" may be half of "\r\n", so it does not count
        # towards max_line. That keeps the pieces identical however the input is chunked.
        content_len = len(rest) - 1 if rest[-1:] == b"\r" else len(rest)
        if content_len > max_line:
            used = self._pieces(rest[:content_len], offset, out, final=False)
            rest = rest[used:]
            offset += used
        self._buf = rest
        self._start = offset
        return out

    def flush_lines(self) -> list[Line]:
        """Like ``flush``, with the line's start offset."""
        if not self._buf:
            return []
        buf = self._buf
        content = buf[:-1] if buf[-1:] == b"\r" else buf
        line = (self._start, _decode(content))
        self._start += len(buf)
        self._buf = b""
        return [line]

    def _pieces(self, content: bytes, offset: int, out: list[Line], *, final: bool) -> int:
        """Emit ``max_line``-sized pieces of ``content``; return how many bytes were emitted.

        With ``final`` the short remainder is emitted as the last piece; without it, it stays
        behind as the start of the unfinished line.
        """
        max_line = self.max_line
        start = 0
        while len(content) - start > max_line:
            cut = _char_boundary(content, start + max_line)
            out.append((offset + start, _decode(content[start:cut])))
            start = cut
        if final:
            out.append((offset + start, _decode(content[start:])))
            start = len(content)
        return start


class FileTail:
    """Incrementally read the complete lines appended to one file. Synchronous.

    Tracks how far it has read. A file that does not exist yet reads as empty. A file that
    became smaller than what was read, or was replaced by another file at the same path,
    is read again from offset 0; ``truncations`` counts those restarts, and the offsets
    going back tell a consumer the same.

    A truncation that is followed by writes past the old size before the next read cannot
    be seen by size alone; the shim only appends, so this does not happen to job logs.

    Args:
        path: the file.
        offset: where to start: 0, or an offset returned earlier (a line's start, or
            ``FileTail.offset``) to resume without losing or repeating a line.
        max_line: see ``LineSplitter``.

    Attributes:
        truncations: times reading restarted from 0.
        size: the file's size at the last read, or None when it did not exist.
    """

    def __init__(self, path: str | os.PathLike[str], offset: int = 0, *, max_line: int = DEFAULT_MAX_LINE) -> None:
        self.path = os.fspath(path)
        self.max_line = max_line
        self._splitter = LineSplitter(max_line=max_line, offset=offset)
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file being read
        self._seen: tuple[int, int, int] | None = None  # (dev, ino, size) at the last read
        self.truncations = 0
        self.size: int | None = None

    @property
    def offset(self) -> int:
        """Offset just after the last complete line returned: the resume point."""
        return self._splitter.offset

    @property
    def position(self) -> int:
        """Offset just after the last byte read (past ``offset`` by the unfinished line)."""
        return self._splitter.position

    @property
    def backlog(self) -> int:
        """Bytes known to be in the file and not yet read (as of the last read)."""
        if self.size is None:
            return 0
        return max(0, self.size - self.position)

    def changed(self) -> bool:
        """One ``stat``: has the file appeared, grown, shrunk or been replaced since the last read?"""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        return (st.st_dev, st.st_ino, st.st_size) != self._seen

    def read_new(self, max_bytes: int = _READ_CHUNK) -> list[Line]:
        """Read up to ``max_bytes`` new bytes; return the lines they complete as ``(offset, line)``.

        Call again while ``backlog`` is non-zero to drain a file that grew by more.
        """
        # A bare descriptor, no file object: most reads of a job's logs find nothing new, and
        # the buffered reader's making was most of their cost (the logs actor reads every
        # followed job's two files each pass).
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            self.size = None
            return []
        try:
            st = os.fstat(fd)
            identity = (st.st_dev, st.st_ino)
            replaced = self._identity is not None and identity != self._identity
            if replaced or st.st_size < self.position:
                self._splitter = LineSplitter(max_line=self.max_line)
                self.truncations += 1
            self._identity = identity
            self._seen = (st.st_dev, st.st_ino, st.st_size)
            self.size = st.st_size
            want = min(max_bytes, st.st_size - self.position)
            if want <= 0:
                return []
            data = os.pread(fd, want, self.position)
        finally:
            os.close(fd)
        return self._splitter.feed_lines(data)

    def flush(self) -> list[Line]:
        """Return the unfinished last line as a line; use once the writer has exited."""
        return self._splitter.flush_lines()


def read_tail(
    path: str | os.PathLike[str],
    n: int,
    *,
    max_line: int = DEFAULT_MAX_LINE,
    block: int = 64 * 1024,
    partial: bool = False,
) -> list[Line]:
    """The last ``n`` complete lines of a file, with their offsets, oldest first.

    Reads backwards in ``block``-sized reads only until it has found the start of the
    ``n``-th line from the end, then reads forward from there, keeping at most ``n`` lines;
    the cost is proportional to the size of those lines, not of the file. An unfinished
    last line (no newline yet) is not included, unless ``partial`` (the writer has
    finished: it is the last line). A missing file has no lines.

    The offsets and pieces are those ``FileTail`` gives when reading from 0.
    """
    return tail_page(path, n, max_line=max_line, block=block, partial=partial)[0]


def tail_page(
    path: str | os.PathLike[str],
    n: int,
    *,
    max_line: int = DEFAULT_MAX_LINE,
    block: int = 64 * 1024,
    partial: bool = False,
) -> tuple[list[Line], int | None]:
    """``read_tail``'s lines, and where the line after the last of them starts (None when
    there are none): the offset a reader passes to ``read_page`` to go on from there."""
    if n <= 0:
        return [], None
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return [], None
    with f:
        size = os.fstat(f.fileno()).st_size
        end: int | None = None  # just after the last newline
        start = 0
        found = 0  # newlines seen; the (n+1)-th from the end precedes the first wanted line
        pos = size
        if partial and size:
            f.seek(size - 1)
            if f.read(1) != b"\n":  # the unfinished last line counts as if a newline ended the file
                end, found = size, 1
        while pos > 0 and found <= n:
            lo = max(0, pos - block)
            f.seek(lo)
            chunk = f.read(pos - lo)
            i = len(chunk)
            while found <= n:
                j = chunk.rfind(b"\n", 0, i)
                if j < 0:
                    break
                found += 1
                if end is None:
                    end = lo + j + 1
                elif found == n + 1:
                    start = lo + j + 1
                i = j
            pos = lo
        if end is None:
            return [], None
        lines: deque[Line] = deque(maxlen=n)
        splitter = LineSplitter(max_line=max_line, offset=start)
        f.seek(start)
        remaining = end - start
        while remaining > 0:
            data = f.read(min(block, remaining))
            if not data:  # shrank under us
                break
            remaining -= len(data)
            lines.extend(splitter.feed_lines(data))
        if partial:
            lines.extend(splitter.flush_lines())
    return list(lines), splitter.offset if lines else None


def read_from(
    path: str | os.PathLike[str],
    offset: int,
    limit: int,
    *,
    after: bool = False,
    partial: bool = False,
    max_line: int = DEFAULT_MAX_LINE,
) -> list[Line]:
    """Up to ``limit`` lines starting at ``offset``, a line's offset from earlier: resume.

    Args:
        offset: the offset of a line (or piece) returned earlier, or 0.
        limit: the most lines returned; reads only as much as they need.
        after: skip the line at ``offset`` itself. A follower passes the offset of the
            last line it saw (an SSE ``Last-Event-ID``) and gets the lines after it;
            it cannot compute the next offset itself, since decoding is lossy.
        partial: include an unfinished last line (use it once the job has ended).

    A missing file, or an offset at or past its end, has no lines.
    """
    if limit <= 0:
        return []
    if after:
        lines = read_from(path, offset, limit + 1, partial=partial, max_line=max_line)
        if lines and lines[0][0] == offset:
            del lines[0]
        return lines[:limit]
    return _read_forward(path, offset, limit, partial, max_line)[0]


def read_page(
    path: str | os.PathLike[str],
    offset: int,
    limit: int,
    *,
    partial: bool = False,
    max_line: int = DEFAULT_MAX_LINE,
) -> tuple[list[Line], int]:
    """Up to ``limit`` lines from the line (or piece) that starts at ``offset``, that line
    included, and the offset of the next page: where the line after the last one starts (at
    the end of what is written, the unfinished line's start; with ``partial``, the file's
    end). A page from that offset goes on with the next line, so following the offsets reads
    every line once. Without lines (a missing file, an offset at or past the end) the next
    page's offset is ``offset`` itself."""
    if limit <= 0:
        return [], offset
    lines, end = _read_forward(path, offset, limit + 1, partial, max_line)
    if len(lines) > limit:
        return lines[:limit], lines[limit][0]
    return lines, end


def _read_forward(path: str | os.PathLike[str], offset: int, limit: int, partial: bool,
                  max_line: int) -> tuple[list[Line], int]:
    """Up to ``limit`` lines from ``offset``, and where the splitter stopped: just after the
    last line it completed (the lines past ``limit`` it read in the same chunk included)."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return [], offset
    out: list[Line] = []
    splitter = LineSplitter(max_line=max_line, offset=offset)
    with f:
        if offset >= os.fstat(f.fileno()).st_size:
            return [], offset  # past the end (beyond what seek even allows, for a huge offset)
        f.seek(offset)
        while len(out) < limit:
            # Small reads first: a resume usually wants a page of lines, not the file.
            data = f.read(min(_READ_CHUNK, max(4096, limit * 256)))
            if not data:
                if partial:
                    out.extend(splitter.flush_lines())
                break
            out.extend(splitter.feed_lines(data))
    return out[:limit], splitter.offset


async def follow(
    path: str | os.PathLike[str],
    *,
    offset: int = 0,
    poll: float = 0.05,
    max_poll: float = 0.5,
    until: trio.Event | None = None,
    max_line: int = DEFAULT_MAX_LINE,
) -> AsyncGenerator[Line, None]:
    """Yield ``(offset, line)`` for every complete line of the file, as it grows.

    Polls: one ``stat`` per check, a read only when the file changed, no sleep while a
    backlog remains. Checks come every ``poll`` seconds while the file is growing; while
    it is quiet the interval doubles up to ``max_poll``, because each check costs about
    0.1 ms of CPU (the worker-thread hop, measured) and most job logs are quiet most of
    the time. Stops once ``until`` is set *and* everything written before that is read,
    yielding an unfinished last line as a final line. Without ``until`` it runs until
    cancelled. A file that does not exist yet is waited for.

    Args:
        path: the file, usually ``<job_dir>/stdout.log`` or ``stderr.log``.
        offset: where to start (see ``FileTail``).
        poll: seconds between checks while the file grows.
        max_poll: the longest interval between checks while it is quiet (the worst extra
            latency of the first line after a pause); ``max_poll=poll`` polls evenly.
        until: set by the owner when the writer has exited (the job ended); wakes the
            follower at once for the final read.
        max_line: see ``LineSplitter``.

    Truncation or replacement restarts from offset 0; the yielded offsets go back.

    Raises:
        OSError: reading failed for a reason other than the file not existing yet
            (permissions, a stale NFS handle); the owner decides whether to retry.

    Cancellation: stat and read run in a worker thread that is abandoned on cancellation
    (a hung mount must not make a follower uncancellable). Use it under
    ``contextlib.aclosing`` and do not yield from inside a nursery or cancel scope while
    iterating it.
    """
    tail = FileTail(path, offset, max_line=max_line)

    def step(final: bool) -> list[Line]:
        # On the last pass read unconditionally: opening the file revalidates cached
        # attributes on network filesystems, where a bare stat may be stale.
        if final or tail.backlog or tail.changed():
            return tail.read_new()
        return []

    delay = poll
    while True:
        # Look at ``until`` before reading: whatever was written before it was set is
        # then seen by this read or the ones that drain the backlog after it.
        final = until is not None and until.is_set()
        before = (tail.position, tail.truncations)
        lines = await trio.to_thread.run_sync(step, final, abandon_on_cancel=True, limiter=_IO_LIMITER)
        for line in lines:
            yield line
        if tail.backlog:
            continue
        if final:
            for line in tail.flush():
                yield line
            return
        delay = poll if (tail.position, tail.truncations) != before else min(delay * 2, max(poll, max_poll))
        if until is None:
            await trio.sleep(delay)
        else:
            with trio.move_on_after(delay):
                await until.wait()  # the job's end needs no waiting for the next check
