"""A remote agent's job logs, for the server: read through the agent, and the live follower's reader.

The files of a job that runs on a remote agent's node stay there (issue 18). The server has
two copies of parts of them: the stored tail (``job_logs``, the last ``log_tail_lines`` lines of
each stream, kept from the agent's ``log_lines`` records), and whatever the agent can be asked
for while it is attached (``log_read`` requests, answered from the files).

- ``RemoteTail`` reads a file through the agent as ``logtail.FileTail`` reads a local one:
  complete lines from an offset, ``LOG_READ_BYTES`` a request.
- ``RemoteReader`` is what a live follower (``gpuplaned.service.api.logs``) reads when the feed
  cannot be trusted to hold everything next: at the start, after a lag, after a batch that
  starts past what it has sent, and at the attempt's end. The lines themselves come on the feed:
  the server publishes each ``log_lines`` record of the agent after its commit, the live ones
  and those replayed after a link outage alike (``gpuplaned.service.link.nodes``). The reader asks
  the agent while it is attached (it has every line); while it is not, it takes the stored tail,
  but only where that tail joins up with what was sent. A follower that has fallen behind the
  stored tail with the agent away sends nothing more (it would skip lines) and tries again
  every ``STUCK_RETRY`` until the agent is back; only at the attempt's end does it send what
  the stored tail has, and end.
"""

from __future__ import annotations

import base64
import logging
from typing import TYPE_CHECKING, Any

from gpuplaned.logtail import DEFAULT_MAX_LINE, Line, LineSplitter
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.uplink_frames import LogData, LogRead
from gpuplaned.service.link.registry import NodeUnavailable
from gpuplaned.store import log_rows, uplink_rows

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext
    from gpuplaned.service.link.log_feeds import Key, LogFeeds

log = logging.getLogger("gpuplaned.logs")

__all__ = ["LOG_READ_BYTES", "RemoteReader", "RemoteTail", "end_at_least", "read_remote_lines"]

LOG_READ_BYTES = 1 << 20  # what one log_read asks the agent for
LOG_READ_TIMEOUT_S = 30.0
STORED_PAGE = 10_000  # stored lines a follower reads at a time
QUIET_READ = 5.0  # a follower that heard nothing this long asks the agent anyway (a safety net)
STUCK_RETRY = 0.5  # behind the stored tail with the agent away: how often to look again


class RemoteTail:
    """Complete lines of one remote log file from ``offset`` on, read through the node's agent.

    Raises (``read_new``):
        NodeUnavailable: the agent is not attached, or its connection closed under the read.
        ApiError: the agent's error (``not_found``: no such file there yet), or ``unavailable``
            when it did not answer in time.
    """

    def __init__(self, shared: ServerContext, node_id: str, job_id: str, attempt: int, stream: str,
                 offset: int) -> None:
        self._shared = shared
        self._request = (node_id, job_id, attempt, stream)
        self._splitter = LineSplitter(offset=offset)
        self.size: int | None = None  # the file's size at the last read
        self.ended = False  # the agent said the attempt has ended: the file will not grow

    @property
    def offset(self) -> int:
        """Just after the last complete line returned: the resume point."""
        return self._splitter.offset

    @property
    def backlog(self) -> int:
        return 0 if self.size is None else max(0, self.size - self._splitter.position)

    async def read_new(self, max_bytes: int = LOG_READ_BYTES) -> list[Line]:
        node_id, job_id, attempt, stream = self._request
        asked = LogRead(job_id, attempt, stream, self._splitter.position, min(max_bytes, LOG_READ_BYTES))
        data = await self._shared.nodes.request(node_id, asked, LOG_READ_TIMEOUT_S)
        if not isinstance(data, LogData):
            raise ApiError(ErrorCode.INTERNAL, f"node {node_id} answered log_read with {type(data).__name__}")
        try:
            chunk = base64.b64decode(data.data, validate=True)
        except ValueError:
            raise ApiError(ErrorCode.INTERNAL, f"node {node_id} answered log_read with data that is not base64") from None
        # Nothing read is the end, whatever the size says: a caller draining the backlog stops.
        self.size = data.size if chunk else self._splitter.position
        self.ended = data.ended
        return self._splitter.feed_lines(chunk)

    def flush(self) -> list[Line]:
        """The unfinished last line (only once the attempt has ended)."""
        return self._splitter.flush_lines()


async def read_remote_lines(shared: ServerContext, node_id: str, job_id: str, attempt: int, stream: str,
                            offset: int, limit: int, *, stored_lines: int) -> tuple[list[Line], int]:
    """Up to ``limit`` lines of the attempt's log from the line at ``offset``, and the next page's
    offset, as ``logtail.read_page`` reads a local file, in ``log_read`` requests of
    ``LOG_READ_BYTES`` to the node's agent.

    Raises:
        ApiError: ``unavailable`` naming the node when no agent of it is attached (only the
            ``stored_lines`` lines of the stored tail can be read then), or the agent's error.
    """
    if shared.nodes.session(node_id) is None:
        name = await shared.readers.run(lambda conn: uplink_rows.by_id(conn, node_id))
        label = name[0] if name else node_id
        raise ApiError(ErrorCode.UNAVAILABLE,
                       f"the log of job {job_id} is on node {label!r}, whose agent is not connected: only its "
                       f"stored tail ({stored_lines} lines) is available; read it without offset=, or retry "
                       "when the agent is back", {"node": label, "node_id": node_id, "stored_lines": stored_lines})
    tail = RemoteTail(shared, node_id, job_id, attempt, stream, offset)
    lines: list[Line] = []
    while len(lines) <= limit:  # one line more than the page: where it starts is the next page's offset
        try:
            found = await tail.read_new()
        except NodeUnavailable as exc:
            raise ApiError(ErrorCode.UNAVAILABLE, f"the log of job {job_id}: {exc}", {"node_id": node_id}) from None
        lines.extend(found)
        if not tail.backlog:
            if tail.ended:
                lines.extend(tail.flush())
            break  # the end of what is written so far; an unfinished last line waits
    if len(lines) > limit:
        return lines[:limit], lines[limit][0]
    return lines, tail.offset


def _stored_after(conn: Any, job_id: str, attempt: int, stream: str, position: int,
                  limit: int) -> tuple[int | None, list[Line]]:
    """The stored tail's first offset, and up to ``limit`` of its lines after ``position``."""
    first = log_rows.first_offset(conn, job_id, attempt, stream)
    rows = log_rows.lines_after(conn, job_id, attempt, stream, position, limit)
    return first, [(offset, line) for offset, line in rows]


def end_at_least(line: Line) -> int:
    """Where the line after ``line`` starts, or a little before (never after: the follower would
    take a line it has not sent for sent): the stored tail keeps no ends. A replaced undecodable
    byte was at least 1 byte, not 3; a ``\r`` before the newline is not counted; a piece of a
    longer line (``logtail.LineSplitter``) has no newline after it."""
    offset, text = line
    size = len(text.encode()) - 2 * text.count("\ufffd")
    return offset + size + (1 if size < DEFAULT_MAX_LINE - 3 else 0)


class RemoteReader:
    """A live follower's reads of a remote attempt's streams (see the module's docstring).

    Shares the follower's ``positions`` (per stream, the offset of the last line sent, -1 for
    none) and ``after`` (every line starting before it has been sent) and moves both on.
    """

    def __init__(self, shared: ServerContext, node_id: str, key: Key, names: tuple[str, ...],
                 positions: list[int], after: list[int]) -> None:
        self._shared = shared
        self._node_id = node_id
        self._key = key
        self._names = names
        self._positions = positions
        self._after = after
        self._tails: list[RemoteTail | None] = [None] * len(names)
        self.stuck = False  # behind the stored tail, with the agent away

    def quiet_for(self, feeds: LogFeeds, key: Key) -> float:
        """How long the follower waits on a quiet feed before reading here anyway."""
        return STUCK_RETRY if self.stuck else QUIET_READ

    async def read(self, final: bool) -> tuple[list[tuple[int, int, str]], bool]:
        """New lines as ``(stream index, offset, text)``, and whether there is more to read now."""
        out: list[tuple[int, int, str]] = []
        more = False
        self.stuck = False
        for i in range(len(self._names)):
            if self._shared.nodes.session(self._node_id) is not None:
                try:
                    more |= await self._from_agent(i, final, out)
                    continue
                except (NodeUnavailable, ApiError) as exc:  # gone, timed out, or broken: the store has a part
                    log.info("log of job %s attempt %d on node %s: %s; reading its stored tail", *self._key,
                             self._node_id, exc)
            self._tails[i] = None
            more |= await self._from_store(i, final, out)
        return out, more

    async def _from_agent(self, i: int, final: bool, out: list[tuple[int, int, str]]) -> bool:
        tail = self._tails[i]
        if tail is None or tail.offset != self._after[i]:
            # The feed or the stored tail took this stream further: read again from the last line
            # sent, the one offset known to start a line (``after`` may be an estimate).
            job_id, attempt = self._key
            tail = self._tails[i] = RemoteTail(self._shared, self._node_id, job_id, attempt, self._names[i],
                                               max(self._positions[i], 0))
        try:
            found = await tail.read_new()
        except ApiError as exc:
            if exc.code is not ErrorCode.NOT_FOUND:  # not there yet: nothing written
                raise
            found = []
        if final and tail.ended and not tail.backlog:
            found += tail.flush()
        position = self._positions[i]
        out.extend((i, offset, text) for offset, text in found if offset > position)
        self._after[i] = tail.offset
        return bool(tail.backlog)

    async def _from_store(self, i: int, final: bool, out: list[tuple[int, int, str]]) -> bool:
        job_id, attempt = self._key
        position, name = self._positions[i], self._names[i]
        first, lines = await self._shared.readers.run(
            lambda conn: _stored_after(conn, job_id, attempt, name, position, STORED_PAGE))
        if not lines:
            return False
        if first is not None and first > self._after[i] and not final:
            self.stuck = True  # lines between what was sent and the stored tail: only the agent has them
            return False
        out.extend((i, offset, text) for offset, text in lines)
        self._after[i] = max(self._after[i], end_at_least(lines[-1]))
        return len(lines) == STORED_PAGE
