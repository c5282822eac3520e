"""The TensorBoard tailer's frames (node <-> server), members of ``agent.FRAMES``.

``TbPoints`` carries one pass of ``actors/tbtail.py`` over one job attempt's event files:
per file, the points read since the cursor the server has stored (``after``), the cuts the
rewind rule asks for, the new cursor and rewind state, and the records skipped. The server
stores a file's part only if its stored cursor is still ``after`` (compare and set), all of
it in one transaction: a resent or stale part adds nothing, and ``TbStored`` names it so
the node reads that file again from what is stored. ``TbCursors`` asks for (and answers
with) the stored cursors of an attempt: a restarted tailer starts from them.

Point columns are the packed base64 columns of ``gpuplaned.protocol.columns`` (int64 step
and ts in ms, float64 value): NaN and infinities travel exactly, and a million points cost
one string each way, not a million numbers.
"""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import field

__all__ = ["TB_PROBLEMS", "TbCursor", "TbCursors", "TbFile", "TbFileState", "TbPoints", "TbProblem",
           "TbRewind", "TbSeries", "TbStored"]

TB_PROBLEMS = ("bad length crc", "bad data crc", "file replaced")  # as gpuplaned.tensorboard.reader says them
_PATH = {"min_length": 2, "max_length": 4096, "pattern": "^/[^\\x00]*$"}
_SERIES = {"min_length": 1, "max_length": 200}


@attrs.frozen
class TbCursor:
    """Where the records read of a file end: its inode and a byte offset."""

    inode: int = field(minimum=0)
    offset: int = field(minimum=0)


@attrs.frozen
class TbRewind:
    """The rewind rule's state for one series: the newest file seen (its TensorBoard order:
    file name, folder) and that file's first step."""

    series: str = field(**_SERIES)
    file: str = field(max_length=4096)
    folder: str = field(max_length=4096)
    first_step: int


@attrs.frozen
class TbSeries:
    """One series' new points from one file (base64 columns)."""

    name: str = field(**_SERIES)
    step: str
    ts: str
    value: str


@attrs.frozen
class TbProblem:
    """A record the reader skipped (or a file read again from its start)."""

    offset: int = field(minimum=0)
    what: str = field(enum=TB_PROBLEMS)


@attrs.frozen
class TbFile:
    """One file's part of a pass."""

    path: str = field(**_PATH)
    after: TbCursor | None  # the stored cursor it continues from; None: nothing stored yet
    cursor: TbCursor  # where its read ended
    series: tuple[TbSeries, ...] = ()
    cuts: tuple[tuple[str, int], ...] = ()  # (series, step): drop its stored points from the step on, first
    rewinds: tuple[TbRewind, ...] = ()
    problems: tuple[TbProblem, ...] = ()


@attrs.frozen
class TbPoints:
    """Node to server: one tailer pass over one job attempt's event files, in TensorBoard's
    file order."""

    job_id: str
    attempt: int = field(minimum=1)
    run_id: str
    files: tuple[TbFile, ...]


@attrs.frozen
class TbStored:
    """Server to node, the answer to ``TbPoints``: the files whose part was not stored
    because the stored cursor was not its ``after`` (read them again from ``TbCursors``)."""

    job_id: str
    attempt: int
    stale: tuple[str, ...] = ()


@attrs.frozen
class TbFileState:
    path: str = field(**_PATH)
    cursor: TbCursor
    rewinds: tuple[TbRewind, ...] = ()


@attrs.frozen
class TbCursors:
    """The stored cursors of one job attempt's event files: asked with ``files`` empty,
    answered with them."""

    job_id: str
    attempt: int = field(minimum=1)
    files: tuple[TbFileState, ...] = ()
