"""The agent's durable spool: every record for the server, on disk until the server acks it.

Owns ``<home>/uplink/``: append-only JSON-lines segments (``000000000001.jsonl`` ...), one
record a line ``{"stream","seq","at_ms","body"}``, and ``state.json`` (per stream: the acked
high-water mark, the "dropped up to" mark and the last seq handed out). Synchronous, stdlib
only, no trio: the uplink actor drives it from its own task.

Theory of operation:

- ``append`` gives the record the next ``seq`` of its stream (``STREAMS``) and writes its line
  with ONE ``os.write`` on an ``O_APPEND`` fd, so a crash leaves at most one torn last line,
  which the next open truncates away. A new segment starts past ``segment_bytes``.
- ``ack(stream, seq)`` moves the stream's mark up; a record is *live* while its seq is above
  both the acked and the dropped mark of its stream. A segment with no live record left is
  deleted (after ``state.json`` is written, so the seq counters it held survive it).
- Bounds: live bytes <= ``max_bytes`` and no live record older than ``max_age_s`` (checked on
  ``append`` and ``trim``). What must go goes oldest first in the order metrics, logs,
  events, checkpoints, status (a job's end matters most). Dropping does not move the acked
  mark (the server never got those records): it moves the stream's dropped mark, and
  ``take_dropped`` says what went, for the uplink's ``SPOOL_DROPPED`` node event. A segment
  half made of dropped records is rewritten with only its live lines (the drop path only),
  so the disk stays under about ``2 * max_bytes + segment_bytes`` too. A record that would
  only fit by dropping more important ones is itself dropped (its seq spent, and reported).
- ``unacked`` parses each live line; ``unacked_batches`` (the uplink's replay) reads a
  segment whole and splits its lines by ``_LINE``'s pattern, the bodies left as text: every
  line was checked once already, by the append that wrote it or by the open that read it
  (the lines the open found damaged are skipped by their number).
- Open recovers: next seq per stream = 1 + the highest of the state file's counters and marks
  and every seq on disk; the live records' index (seq, at_ms, size, segment per record, in
  compact arrays: ~32 bytes a record, so ``backlog`` is O(1)). A corrupt line (garbage in the
  middle) is named in a warning and skipped; an unreadable state file is named in a warning
  and rebuilt from the records with marks 0 (a resend is harmless: the server dedupes).
- If the machine rebooted since an unclean stop (a power cut), the last appends may be gone
  from disk after the server stored them; their seqs must not be handed out again (the
  server would drop the new records as duplicates), so every stream's counter then jumps by
  ``REBOOT_SEQ_GAP``. Gaps are harmless: the server keeps a high-water mark, not a count.
  ``set_floor`` (the server's ``HelloOk.acked``) is the second guard: marks and counters move
  up to it, never down.

Fsync policy (``[uplink] fsync``):

- ``"always"``: each ``append`` is ``fdatasync``'d before it returns. kill -9: loses nothing.
  Power cut: loses nothing that ``append`` returned (ack marks may fall back to the last
  ``state.json`` write: those records are resent and deduped).
- ``"interval"`` (default): the uplink calls ``sync()`` every ``fsync_interval_s`` (0.2 s), and
  ``close`` syncs. kill -9: loses nothing (``os.write`` returned, the page cache has it).
  Power cut: loses at most the last ``fsync_interval_s`` of appends.
- ``"never"``: the OS writes back when it likes. kill -9: loses nothing. Power cut: loses what
  the kernel had not written back (typically up to ~30 s, ``vm.dirty_expire_centisecs``).

``state.json`` is written with temp + rename, at most every ``fsync_interval_s`` from ``ack``,
and always on ``sync``/``close`` and before a segment is deleted. One ``Spool`` per directory:
it holds ``flock`` on ``lock`` (the kernel drops it when the process dies, kill -9 included).
"""

from __future__ import annotations

import bisect
import fcntl
import io
import json
import json.encoder
import logging
import os
import re
import time
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from gpuplaned.protocol.uplink_frames import STREAMS

__all__ = ["Backlog", "DROP_ORDER", "Dropped", "FSYNC_POLICIES", "REBOOT_SEQ_GAP", "Spool", "SpoolError",
           "SpooledRecord"]

log = logging.getLogger(__name__)

FSYNC_POLICIES = ("always", "interval", "never")
# Bound enforcement drops whole streams in this order, oldest first within each.
DROP_ORDER = ("metrics", "logs", "events", "checkpoints", "status")
# More records than any spool can append between two write-backs of the page cache.
REBOOT_SEQ_GAP = 1 << 32
_STATE = "state.json"
_SUFFIX = ".jsonl"
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
# Rewrite a segment (drop path only) once dropped lines make up this share of it.
_REWRITE_DEAD_SHARE = 0.5


def _not_json(o: object) -> Any:
    raise TypeError(f"a record body holds a {type(o).__name__}, which JSON cannot carry")


# The C encoder made once (json.dumps builds one a call: a third of an append's time).
# ASCII output: a lone surrogate in a string cannot break the line's encoding.
_encode_chunks = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    {}, _not_json, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True)
_LINE = '{"stream":"%s","seq":%d,"at_ms":%d,"body":%s}\n'
# One _LINE, split: the line, stream, seq, at_ms, body (anchored at a line's start; ``.``
# never crosses a line).
_STREAM_OF = {name.encode(): name for name in STREAMS}
_INDEX_LINE = re.compile(
    rb'^(\{"stream":"([a-z]+)","seq":([0-9]{1,19}),"at_ms":([0-9]{1,19}),"body":(\{.*\})\}\n)', re.MULTILINE)
assert set(DROP_ORDER) == set(STREAMS)


class SpoolError(Exception):
    """The spool cannot do what was asked; the message names the file or the argument."""


@attrs.frozen
class SpooledRecord:
    stream: str
    seq: int
    at_ms: int
    body: dict[str, Any]


@attrs.frozen
class Backlog:
    """Live (unacked, not dropped) records: how many, their line bytes, the oldest's ``at_ms``."""

    records: int
    bytes: int
    oldest_ms: int | None


@attrs.frozen
class Dropped:
    """What bound enforcement dropped: per stream, the count and the (first, last) seq range
    (drops are oldest first, so each stream's dropped seqs form one range per report)."""

    counts: dict[str, int]
    seqs: dict[str, tuple[int, int]]
    oldest_ms: int
    newest_ms: int


class _Index:
    """One stream's live records in seq order, as parallel arrays with a moving head."""

    __slots__ = ("ats", "head", "segs", "seqs", "sizes")

    def __init__(self) -> None:
        self.seqs = array("q")
        self.ats = array("q")
        self.sizes = array("q")
        self.segs = array("q")
        self.head = 0

    def __len__(self) -> int:
        return len(self.seqs) - self.head

    def add(self, seq: int, at_ms: int, size: int, seg: int) -> None:
        self.seqs.append(seq)
        self.ats.append(at_ms)
        self.sizes.append(size)
        self.segs.append(seg)

    def advance(self, n: int = 1) -> None:
        self.head += n
        # Compact now and then: amortized O(1), and memory follows the backlog down.
        if self.head >= 4096 and self.head * 2 >= len(self.seqs):
            for arr in (self.seqs, self.ats, self.sizes, self.segs):
                del arr[:self.head]
            self.head = 0


class _Segment:
    """What the spool knows of one segment file: its bytes, and its live records and their bytes."""

    __slots__ = ("live", "live_bytes", "size")

    def __init__(self) -> None:
        self.size = self.live = self.live_bytes = 0


class _DropTally:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.seqs: dict[str, tuple[int, int]] = {}
        self.oldest_ms: int | None = None
        self.newest_ms: int | None = None

    def add(self, stream: str, seq: int, at_ms: int) -> None:
        self.counts[stream] = self.counts.get(stream, 0) + 1
        first = self.seqs[stream][0] if stream in self.seqs else seq
        self.seqs[stream] = (first, seq)
        self.oldest_ms = at_ms if self.oldest_ms is None else min(self.oldest_ms, at_ms)
        self.newest_ms = at_ms if self.newest_ms is None else max(self.newest_ms, at_ms)


def _parse(raw: bytes) -> tuple[str, int, int, dict[str, Any]] | None:
    """One line -> (stream, seq, at_ms, body), or None when it is not a record we wrote."""
    try:
        obj = json.loads(raw)
    except ValueError:  # UnicodeDecodeError is one
        return None
    if not isinstance(obj, dict):
        return None
    stream, seq, at_ms, body = obj.get("stream"), obj.get("seq"), obj.get("at_ms"), obj.get("body")
    if (stream not in STREAMS or type(seq) is not int or seq < 1 or type(at_ms) is not int
            or not isinstance(body, dict)):
        return None
    return stream, seq, at_ms, body


def _split_segment(data: bytes) -> list[tuple[str, int, int, int] | None] | None:
    """``(stream, seq, at_ms, line size)`` of every line of a segment, when each is a whole
    ``_LINE`` whose body is JSON (checked in one parse of them all); else None. An open reads
    the whole spool: this is its fast way (one parse a segment, not one a line)."""
    found = _INDEX_LINE.findall(data)
    if len(found) != data.count(b"\n") or (data and not data.endswith(b"\n")):
        return None
    try:
        bodies = json.loads(b"[" + b",".join([body for _, _, _, _, body in found]) + b"]")
        if len(bodies) != len(found) or set(map(type, bodies)) - {dict}:
            return None
        return [(_STREAM_OF[name], int(seq), int(at), len(line)) for line, name, seq, at, _ in found]
    except (ValueError, KeyError):  # a body not JSON (or a comma in it); a stream not ours
        return None


def _boot_id() -> str | None:
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return None


class Spool:
    """The durable, bounded record log of one agent (see the module docstring).

    Raises:
        SpoolError: the directory or one of its files cannot be opened or read (the message names
            it), another process holds the spool, or an argument is wrong.
    """

    def __init__(self, directory: Path, *, max_bytes: int, max_age_s: float, fsync: str = "interval",
                 fsync_interval_s: float = 0.2, segment_bytes: int = 8 << 20,
                 clock: Callable[[], float] = time.time) -> None:
        if fsync not in FSYNC_POLICIES:
            raise SpoolError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
        self.directory = Path(directory)
        self._max_bytes = max_bytes
        self._max_age_ms = int(max_age_s * 1000)
        self._fsync = fsync
        self._fsync_interval_s = fsync_interval_s
        self._segment_bytes = segment_bytes
        self._clock = clock
        self._acked = dict.fromkeys(STREAMS, 0)
        self._dropped = dict.fromkeys(STREAMS, 0)
        self._last = dict.fromkeys(STREAMS, 0)
        self._index = {s: _Index() for s in STREAMS}
        self._segs: dict[int, _Segment] = {}
        self._active_seg: _Segment | None = None  # the one appends go to, while its fd is open
        self._dead: set[int] = set()
        self._bytes = 0
        self._records = 0
        self._oldest_ms: int | None = None
        self._tally = _DropTally()
        self._fd: int | None = None
        self._active = 0  # the segment appends go to (its fd may not be open yet)
        self._data_dirty = False
        self._state_dirty = False
        self._state_written_at = float("-inf")
        self._closed = False
        #: (file, line number) of every line open could not read; each was also logged.
        self.corrupt_lines: list[tuple[str, int]] = []
        self._bad_lines: dict[int, set[int]] = {}  # segment -> its corrupt_lines' numbers (skipped on reads)
        self._open_dir()
        try:
            self._recover()
        except BaseException:
            os.close(self._lock_fd)
            raise

    # -- public --------------------------------------------------------------------------

    def append(self, stream: str, body: dict[str, Any]) -> int:
        """Spool one record on ``stream``; return its seq. Drops old records first if a bound
        requires it (``take_dropped`` tells). Raises SpoolError for an unknown stream, a record
        bigger than ``max_bytes``, or a failed write (nothing of it is then kept)."""
        if stream not in self._index:
            raise SpoolError(f"unknown stream {stream!r}: expected one of {', '.join(STREAMS)}")
        at_ms = int(self._clock() * 1000)
        seq = self._last[stream] + 1
        if type(body) is not dict:
            raise SpoolError(f"a record body is a JSON object, not a {type(body).__name__}")
        try:
            line = (_LINE % (stream, seq, at_ms, "".join(_encode_chunks(body, 0)))).encode()
        except (TypeError, ValueError) as exc:  # ValueError: a circular body
            raise SpoolError(f"cannot spool a {stream} record: {exc}") from exc
        size = len(line)
        if size > self._max_bytes:
            raise SpoolError(f"a {stream} record of {size} bytes is larger than the spool's max_bytes "
                             f"({self._max_bytes})")
        if self._bytes + size > self._max_bytes or (
                self._oldest_ms is not None and self._oldest_ms < at_ms - self._max_age_ms):
            if not self._enforce_bounds(at_ms, size, stream):
                # Only more important records are left: this one goes instead of them. Its seq
                # is spent all the same (it may have been reported), and dropped like the others.
                self._last[stream] = self._dropped[stream] = seq
                self._tally.add(stream, seq, at_ms)
                self._state_dirty = True
                return seq
        fd, info = self._fd, self._active_seg
        if fd is None or info is None or (info.size + size > self._segment_bytes and info.size > 0):
            self._start_segment()
            self._reap()
            fd, info = self._fd, self._active_seg
            assert fd is not None and info is not None
        seg = self._active
        try:
            written = os.write(fd, line)
        except OSError as exc:
            raise SpoolError(f"cannot write {self._seg_path(seg)}: {exc.strerror}") from exc
        if written != size:  # a full disk: take the torn part back so the file stays whole
            os.ftruncate(fd, info.size)
            raise SpoolError(f"cannot write {self._seg_path(seg)}: short write ({written} of {size} bytes)")
        self._last[stream] = seq
        ix = self._index[stream]
        ix.seqs.append(seq)
        ix.ats.append(at_ms)
        ix.sizes.append(size)
        ix.segs.append(seg)
        info.size += size
        info.live += 1
        info.live_bytes += size
        self._bytes += size
        self._records += 1
        if self._oldest_ms is None:
            self._oldest_ms = at_ms
        if self._fsync == "always":
            os.fdatasync(fd)
        else:
            self._data_dirty = True
        return seq

    def unacked(self, after: dict[str, int] | None = None) -> Iterator[SpooledRecord]:
        """Live records in append order (across streams), only those with seq > ``after[stream]``
        when given. Streams through the segments a line at a time; marks moved while iterating
        (an ack, a drop) are honoured for the lines not yet read."""
        for stream, seq, at_ms, body in self._live_lines(after or {}):
            yield SpooledRecord(stream, seq, at_ms, body)

    def unacked_batches(self, after: dict[str, int], max_records: int, max_bytes: int
                        ) -> Iterator[tuple[str, list[int], list[bytes]]]:
        """As ``unacked`` (``after`` is read as it is when each segment is), but in batches of
        consecutive records of one stream, at most ``max_records`` and about ``max_bytes`` of
        bodies (a bigger body goes alone): ``(stream, seqs, bodies)``, each body the JSON text
        spooled (ASCII bytes), not parsed again: what a replay puts in its frames as it is.
        Every line was parsed once, by the open that found it (the ones that were no record
        are skipped by their place) or by the append that wrote it. Seqs increase per stream
        across batches (a repeated line is skipped)."""
        stream: str | None = None
        seqs: list[int] = []
        bodies: list[bytes] = []
        size = 0
        sent = dict(after)
        for seg in self._live_segments():
            for name, seq, body in self._segment_records(seg):
                mark = sent.get(name, 0)
                if seq <= mark or seq <= self._acked[name] or seq <= self._dropped[name]:
                    continue
                if seqs and (name != stream or len(seqs) >= max_records or size + len(body) > max_bytes):
                    yield stream, seqs, bodies  # type: ignore[misc]
                    seqs, bodies, size = [], [], 0
                stream = name
                seqs.append(seq)
                bodies.append(body)
                size += len(body)
                sent[name] = seq
        if seqs:
            assert stream is not None
            yield stream, seqs, bodies

    def _live_segments(self) -> Iterator[int]:
        """Segments with live records, oldest first, each looked up afresh after the one before
        (appends may have started new ones, acks may have deleted some)."""
        seg = 0
        while True:
            seg = min((s for s in self._segs if s > seg), default=None)
            if seg is None:
                return
            if seg in self._segs and self._segs[seg].live:
                yield seg

    def _segment_records(self, seg: int) -> list[tuple[str, int, bytes]]:
        """``(stream, seq, body text)`` of every record line of a segment (read whole: at most
        about ``segment_bytes``), split by ``_LINE``'s pattern; a segment with a line of
        another shape is read the slow way, each line parsed."""
        path = self._seg_path(seg)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:  # acked and deleted meanwhile
            return []
        except OSError as exc:
            raise SpoolError(f"cannot read {path}: {exc.strerror}") from exc
        bad = self._bad_lines.get(seg)
        found = _INDEX_LINE.findall(data)
        if not bad and len(found) == data.count(b"\n"):
            try:
                return [(_STREAM_OF[name], int(seq), body) for _, name, seq, _, body in found]
            except KeyError:  # a stream this spool does not know: the slow way says which line
                pass
        records = []
        for lineno, raw in enumerate(data.split(b"\n")[:-1], 1):  # a torn last part has no newline
            if bad and lineno in bad:
                continue
            rec = _parse(raw + b"\n")
            if rec is not None:
                records.append((rec[0], rec[1], "".join(_encode_chunks(rec[3], 0)).encode()))
        return records

    def _live_lines(self, after: dict[str, int]) -> Iterator[tuple[str, int, int, dict[str, Any]]]:
        """The live records above ``after``, parsed: ``(stream, seq, at_ms, body)``."""
        for seg in self._live_segments():
            try:
                f = open(self._seg_path(seg), "rb")
            except FileNotFoundError:  # acked and deleted while we were reading the one before
                continue
            except OSError as exc:
                raise SpoolError(f"cannot read {self._seg_path(seg)}: {exc.strerror}") from exc
            bad = self._bad_lines.get(seg, ())
            with f:
                for lineno, raw in enumerate(f, 1):
                    if not raw.endswith(b"\n"):
                        break
                    rec = None if lineno in bad else _parse(raw)
                    if rec is None:
                        continue
                    stream, seq = rec[0], rec[1]
                    if seq > self._acked[stream] and seq > self._dropped[stream] and seq > after.get(stream, 0):
                        yield rec

    def ack(self, stream: str, seq: int) -> None:
        """The server stored every record of ``stream`` up to ``seq``."""
        if stream not in self._index:
            raise SpoolError(f"unknown stream {stream!r}: expected one of {', '.join(STREAMS)}")
        if seq <= self._acked[stream]:
            return
        self._acked[stream] = seq
        self._last[stream] = max(self._last[stream], seq)
        self._state_dirty = True
        self._forget_through(stream, seq)
        self._reap()
        if time.monotonic() - self._state_written_at >= self._fsync_interval_s:
            self._write_state()

    def acked(self) -> dict[str, int]:
        return dict(self._acked)

    def set_floor(self, acked: dict[str, int]) -> None:
        """The server's ``HelloOk.acked``: what it has stored. Marks move up to it (never down),
        and the next seq of each stream is above it."""
        for stream, seq in acked.items():
            if stream not in self._index or type(seq) is not int:
                continue
            if seq > self._last[stream]:
                self._last[stream] = seq
                self._state_dirty = True
            if seq > self._acked[stream]:
                self._acked[stream] = seq
                self._state_dirty = True
                self._forget_through(stream, seq)
        self._reap()
        if self._state_dirty:
            self._write_state()

    def backlog(self) -> Backlog:
        return Backlog(self._records, self._bytes, self._oldest_ms)

    def trim(self) -> None:
        """Drop what has outlived ``max_age_s`` (the uplink calls this now and then, so an idle
        spool is trimmed too)."""
        self._enforce_bounds(int(self._clock() * 1000), 0)

    def take_dropped(self) -> Dropped | None:
        """What bound enforcement dropped since the last call, or None."""
        tally = self._tally
        if not tally.counts:
            return None
        self._tally = _DropTally()
        assert tally.oldest_ms is not None and tally.newest_ms is not None
        return Dropped(tally.counts, tally.seqs, tally.oldest_ms, tally.newest_ms)

    def sync(self) -> None:
        """Make what was appended and acked so far durable (policy "interval": on the uplink's
        timer)."""
        if self._data_dirty and self._fd is not None:
            if self._fsync != "never":
                os.fdatasync(self._fd)
            self._data_dirty = False
        if self._state_dirty:
            self._write_state()

    def close(self) -> None:
        if self._closed:
            return
        self.sync()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = self._active_seg = None
        self._reap()
        self._write_state(clean=True)
        os.close(self._lock_fd)
        self._closed = True

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- opening -------------------------------------------------------------------------

    def _open_dir(self) -> None:
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._lock_fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise SpoolError(f"cannot open the spool {exc.filename or self.directory}: {exc.strerror}") from exc
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._lock_fd)
            raise SpoolError(f"the spool {self.directory} is in use by another process") from exc

    def _recover(self) -> None:
        state = self._read_state()
        boot = _boot_id()
        try:
            names = sorted(p.name for p in self.directory.iterdir() if p.name.endswith(_SUFFIX))
        except OSError as exc:
            raise SpoolError(f"cannot list the spool {self.directory}: {exc.strerror}") from exc
        seen = dict.fromkeys(STREAMS, 0)
        for name in names:
            stem = name[:-len(_SUFFIX)]
            if not stem.isdigit():
                continue
            self._recover_segment(int(stem), seen)
        for stream in STREAMS:
            self._last[stream] = max(self._last[stream], seen[stream], self._acked[stream], self._dropped[stream])
        if state is not None and not state.get("clean") and state.get("boot") != boot:
            # An unclean stop across a reboot: the last appends may be lost after being stored.
            log.warning("spool %s: the machine restarted since an unclean stop; seqs jump by %d so that "
                        "none the server may hold is used again", self.directory, REBOOT_SEQ_GAP)
            for stream in STREAMS:
                self._last[stream] += REBOOT_SEQ_GAP
        self._active = max(self._segs, default=0)
        self._boot = boot
        self._reap()
        # Written now, marked unclean: a crash from here on is told apart from a clean stop.
        self._write_state()

    def _read_state(self) -> dict[str, Any] | None:
        path = self.directory / _STATE
        try:
            data = json.loads(path.read_bytes())
            for key, marks in (("acked", self._acked), ("dropped", self._dropped), ("last", self._last)):
                for stream, seq in data.get(key, {}).items():
                    if stream in marks:
                        if type(seq) is not int or seq < 0:
                            raise ValueError(f"{key}.{stream} is not a seq")
                        marks[stream] = seq
            if not isinstance(data, dict):
                raise ValueError("not an object")
            return data
        except FileNotFoundError:
            return None
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            log.warning("spool state %s is unreadable (%s); recovering from the records with acked marks 0 "
                        "(the server dedupes what is resent)", path, exc)
            for marks in (self._acked, self._dropped, self._last):
                marks.update(dict.fromkeys(STREAMS, 0))
            return None

    def _recover_segment(self, seg: int, seen: dict[str, int]) -> None:
        path = self._seg_path(seg)
        info = self._segs[seg] = _Segment()
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise SpoolError(f"cannot read {path}: {exc.strerror}") from exc
        records = _split_segment(data)
        if records is None:  # not all whole lines of ours, or a body that is not JSON: line by line
            records = []
            for lineno, raw in enumerate(io.BytesIO(data), 1):  # lines as a file gives them (on b"\n" only)
                if not raw.endswith(b"\n"):
                    log.warning("spool %s: torn last line %d (a crash mid-write) removed", path, lineno)
                    try:
                        os.truncate(path, len(data) - len(raw))
                    except OSError as exc:
                        raise SpoolError(f"cannot truncate {path}: {exc.strerror}") from exc
                    data = data[:-len(raw)]
                    break
                rec = _parse(raw)
                records.append((rec[0], rec[1], rec[2], len(raw)) if rec is not None else None)
        index, acked, dropped = self._index, self._acked, self._dropped
        for lineno, rec in enumerate(records, 1):
            if rec is None:
                log.warning("spool %s: line %d is not a record; skipped", path, lineno)
                self.corrupt_lines.append((str(path), lineno))
                self._bad_lines.setdefault(seg, set()).add(lineno)
                continue
            stream, seq, at_ms, size = rec
            if seq <= seen[stream]:
                log.warning("spool %s: line %d repeats %s seq %d; skipped", path, lineno, stream, seq)
                self.corrupt_lines.append((str(path), lineno))
                self._bad_lines.setdefault(seg, set()).add(lineno)
                continue
            seen[stream] = seq
            if seq > acked[stream] and seq > dropped[stream]:
                index[stream].add(seq, at_ms, size, seg)
                info.live += 1
                info.live_bytes += size
                self._bytes += size
                self._records += 1
                self._oldest_ms = at_ms if self._oldest_ms is None else min(self._oldest_ms, at_ms)
        info.size = len(data)
        if info.live == 0:
            self._dead.add(seg)

    # -- bookkeeping ---------------------------------------------------------------------

    def _seg_path(self, seg: int) -> Path:
        return self.directory / f"{seg:012d}{_SUFFIX}"

    def _start_segment(self) -> None:
        if self._fd is not None:
            if self._fsync != "never" and self._data_dirty:
                os.fdatasync(self._fd)
            self._data_dirty = False
            os.close(self._fd)
            self._fd = None
        seg = self._active + 1
        path = self._seg_path(seg)
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise SpoolError(f"cannot create {path}: {exc.strerror}") from exc
        self._active = seg
        self._active_seg = self._segs[seg] = _Segment()

    def _forget_head(self, stream: str) -> None:
        ix = self._index[stream]
        h = ix.head
        size, seg = ix.sizes[h], ix.segs[h]
        ix.advance()
        self._bytes -= size
        self._records -= 1
        info = self._segs[seg]
        info.live_bytes -= size
        info.live -= 1
        if info.live == 0:
            self._dead.add(seg)

    def _forget_through(self, stream: str, seq: int) -> None:
        # In bulk (an ack may cover 10,000 records): the index's seqs increase and its
        # segments never decrease, so both are cut by bisection.
        ix = self._index[stream]
        head = ix.head
        end = bisect.bisect_right(ix.seqs, seq, head)
        if end > head:
            segs, sizes = ix.segs, ix.sizes
            total = 0
            start = head
            while start < end:
                seg = segs[start]
                stop = min(end, bisect.bisect_right(segs, seg, start))
                size = sum(sizes[start:stop])
                total += size
                info = self._segs[seg]
                info.live_bytes -= size
                info.live -= stop - start
                if info.live == 0:
                    self._dead.add(seg)
                start = stop
            self._bytes -= total
            self._records -= end - head
            ix.advance(end - head)
        self._refresh_oldest()

    def _refresh_oldest(self) -> None:
        heads = [ix.ats[ix.head] for ix in self._index.values() if len(ix)]
        self._oldest_ms = min(heads) if heads else None

    def _enforce_bounds(self, now_ms: int, incoming: int, stream_in: str = "status") -> bool:
        """Drop what the bounds require before ``incoming`` bytes on ``stream_in`` are added.
        Returns False when the incoming record is the one to drop: only records of more
        important streams (later in ``DROP_ORDER``) are left to make room."""
        cutoff = now_ms - self._max_age_ms
        dropped_from: set[int] = set()
        for stream in DROP_ORDER:  # age first: what is too old goes whatever its stream
            ix = self._index[stream]
            while len(ix) and ix.ats[ix.head] < cutoff:
                dropped_from.add(self._drop_head(stream))
        for stream in DROP_ORDER[:DROP_ORDER.index(stream_in) + 1]:
            ix = self._index[stream]
            while len(ix) and self._bytes + incoming > self._max_bytes:
                dropped_from.add(self._drop_head(stream))
        if dropped_from:
            self._refresh_oldest()
            self._state_dirty = True
            self._reap()
            for seg in dropped_from - self._dead:
                if seg in self._segs and seg != self._active:
                    self._maybe_rewrite(seg)
        return self._bytes + incoming <= self._max_bytes

    def _drop_head(self, stream: str) -> int:
        ix = self._index[stream]
        seq, at_ms, seg = ix.seqs[ix.head], ix.ats[ix.head], ix.segs[ix.head]
        self._dropped[stream] = seq
        self._tally.add(stream, seq, at_ms)
        self._forget_head(stream)
        return seg

    def _maybe_rewrite(self, seg: int) -> None:
        """Keep only the live lines of a segment that drops have mostly emptied (temp + rename)."""
        info = self._segs[seg]
        if info.live_bytes > (1 - _REWRITE_DEAD_SHARE) * info.size:
            return
        # The lines about to go may hold a stream's highest seq: the state file keeps it first.
        self._write_state()
        path = self._seg_path(seg)
        tmp = path.with_suffix(".tmp")
        kept = 0
        try:
            with open(path, "rb") as src, open(tmp, "wb") as dst:
                for raw in src:
                    rec = _parse(raw) if raw.endswith(b"\n") else None
                    if rec is not None and rec[1] > self._acked[rec[0]] and rec[1] > self._dropped[rec[0]]:
                        dst.write(raw)
                        kept += len(raw)
                dst.flush()
                if self._fsync != "never":
                    os.fsync(dst.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
            self._bad_lines.pop(seg, None)  # the rewrite kept only whole records
        except OSError as exc:  # only disk space is lost: the dropped lines stay and are skipped
            log.warning("spool %s: cannot rewrite without its dropped records: %s", path, exc)
            tmp.unlink(missing_ok=True)
            return
        info.size = kept

    def _reap(self) -> None:
        """Delete the segments with no live record; the state file first, so that the seqs they
        held are never handed out again."""
        # The segment being appended to stays (deleting and recreating it at every ack of a
        # caught-up link would cost a create, an unlink and two fsyncs a round); close reaps it.
        # A segment emptied by acks while being appended to has live records again.
        self._dead = {seg for seg in self._dead if seg in self._segs and self._segs[seg].live == 0}
        doomed = sorted(seg for seg in self._dead if not (seg == self._active and self._fd is not None))
        if not doomed:
            return
        self._write_state()
        for seg in doomed:
            self._dead.discard(seg)
            try:
                self._seg_path(seg).unlink()
            except FileNotFoundError:
                pass
            self._segs.pop(seg, None)

    def _write_state(self, *, clean: bool = False) -> None:
        path = self.directory / _STATE
        tmp = self.directory / (_STATE + ".tmp")
        data = {"v": 1, "acked": self._acked, "dropped": self._dropped, "last": self._last,
                "boot": getattr(self, "_boot", None), "clean": clean}
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, json.dumps(data).encode())
                if self._fsync != "never":
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            if self._fsync != "never":
                dfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        except OSError as exc:
            raise SpoolError(f"cannot write {path}: {exc.strerror}") from exc
        self._state_dirty = False
        self._state_written_at = time.monotonic()
