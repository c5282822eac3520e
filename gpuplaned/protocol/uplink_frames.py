"""The uplink's own frames (agent <-> server over ``/api/v1/agent/ws``), members of ``agent.FRAMES``.

A remote agent carries the node link's messages (``gpuplaned.node_link.NodeLink``) over one
WebSocket, as JSON text frames tagged by ``type``:

- **Records** (agent -> server): what the node learns and the server must store exactly once
  (a job's state change, node metric batches, node events, log tails, checkpoints found). Each
  is first appended to the agent's spool with the next ``seq`` of its ``stream``, and sent in a
  ``Records(stream, seqs, bodies)`` batch: consecutive spooled records of one stream, seqs
  increasing by one (a gap, seqs the agent spent unsent, is first announced with ``Skip``), at
  most ``MAX_BATCH_RECORDS`` of them and about ``MAX_BATCH_BYTES`` of bodies. The server
  applies a batch in order against its stored high-water mark for ``(node, stream)`` (a ``seq``
  at or below the mark changes nothing; one past the next, unannounced, is refused): node
  metrics in one transaction, each other kind one transaction a record. After the last commit
  it answers ``Ack(stream, seq)`` with the batch's last seq: every record of the stream up to
  ``seq`` is stored and may be trimmed from the spool. ``body`` is one of
  ``agent.RECORD_BODIES``. ``Record(stream, seq, body)``, one record a frame, is still read by
  the server (an older agent's), and acked the same way.
- **Requests** (either way): a question whose answer the asker waits for, matched by ``id``
  (the asker's own counter): the agent asks for stored log offsets and tailer cursors, stores a
  tailer pass (its compare-and-set on cursors makes a resend harmless, so it is not spooled),
  forwards an SDK call; the server asks for a part of a job's log file (``logs --full``).
  ``Reply(id, body)`` or ``Reply(id, error=...)``; ``body`` is one of ``agent.REQUEST_BODIES`` /
  ``agent.REPLY_BODIES``. A request asked while the link is down fails at once on the asker's side.
- **Unsequenced** (agent -> server): ``node_snapshot`` (only the latest matters), ``heartbeat``
  (every ``[uplink] heartbeat_s``; the server answers ``heartbeat_ok`` with its clock, and marks
  the node OFFLINE and its running jobs LOST after 3 missed) and ``goodbye`` (the runner stops).
- **Server -> agent**: ``dispatch``, ``cancel``, ``log_follow`` (``agent.ServerToNode``),
  ``ack``, ``reply``, ``request``, ``heartbeat_ok``, ``ping``.

Stream names: ``STREAMS``. ``seq`` starts at 1 on each stream and never repeats for a node:
the agent keeps its counters in its state file, and the server's ``HelloOk.acked`` tells a
restarted agent where each stream's stored part ends.
"""

from __future__ import annotations

import operator
from typing import Any

import attrs

from gpuplaned.protocol.converter import FieldInvalid
from gpuplaned.protocol.fields import field

__all__ = ["Ack", "FrameFault", "Goodbye", "Heartbeat", "HeartbeatOk", "LogData", "LogRead", "MAX_BATCH_BYTES",
           "MAX_BATCH_RECORDS", "MAX_SEQ_SKIP", "Record", "Records", "Reply", "Request", "STREAMS", "SessionCall",
           "SessionReply", "Skip"]

# One stream per kind of record; each has its own seq, so a burst of log tails never holds
# up a job's state change on the server's side of a replay.
STREAMS = ("status", "metrics", "events", "logs", "checkpoints")
_SEQ = {"minimum": 1, "maximum": (1 << 63) - 1}
_ID = {"minimum": 0, "maximum": (1 << 53) - 1}
# A batch's bounds: one server transaction's worth, and well under a frame (4 MiB) once framed.
MAX_BATCH_RECORDS = 10_000
MAX_BATCH_BYTES = 1 << 20


@attrs.frozen
class Record:
    """Agent -> server: one spooled node message (``body``: one of ``agent.RECORD_BODIES``, tagged)."""

    stream: str = field(enum=STREAMS)
    seq: int = field(**_SEQ)
    body: dict[str, Any] = attrs.field(factory=dict)


def _increasing(seqs: tuple[Any, ...]) -> str | None:
    # Checked a whole tuple at a time (in C): a batch holds up to 10,000 of them.
    if set(map(type, seqs)) != {int} or seqs[0] < 1 or seqs[-1] >= 1 << 63:
        return "each seq must be an integer from 1 to 2**63-1"
    if not all(map(operator.lt, seqs, seqs[1:])):
        return "seqs must increase"
    return None


@attrs.frozen
class Records:
    """Agent -> server: spooled records of one stream, in seq order (see the module docstring);
    ``bodies[i]`` (one of ``agent.RECORD_BODIES``, tagged) has ``seqs[i]``."""

    stream: str = field(enum=STREAMS)
    seqs: tuple[Any, ...] = field(min_items=1, max_items=MAX_BATCH_RECORDS, check=_increasing,
                                  documented_as=tuple[int, ...])  # integers, checked as a whole
    bodies: tuple[Any, ...] = field(min_items=1, max_items=MAX_BATCH_RECORDS)  # JSON objects, read by kind

    def __attrs_post_init__(self) -> None:
        if len(self.seqs) != len(self.bodies):
            raise FieldInvalid("bodies", f"{len(self.bodies)} bodies for {len(self.seqs)} seqs")


# The most seqs one ``Skip`` may pass over: a thousand of the agent spool's reboot gaps (2**32),
# far short of the seq's range, so that no frame can end a stream.
MAX_SEQ_SKIP = 1 << 42


@attrs.frozen
class Skip:
    """Agent -> server: the seqs of ``stream`` up to ``through`` that the server has not stored
    were spent without being sent (the spool dropped them, or jumped after a power cut), so the
    next record is ``through + 1``. The server takes a stream's seqs one after another; a seq past
    the next one that no skip announced is refused (``error``, and the connection closes)."""

    stream: str = field(enum=STREAMS)
    through: int = field(**_SEQ)
    reason: str = field(default="", max_length=200)


@attrs.frozen
class Ack:
    """Server -> agent: every record of ``stream`` up to ``seq`` is committed."""

    stream: str = field(enum=STREAMS)
    seq: int = field(minimum=0, maximum=(1 << 63) - 1)


@attrs.frozen
class Request:
    """Either way: a question, answered by the ``Reply`` with the same ``id``."""

    id: int = field(**_ID)
    body: dict[str, Any] = attrs.field(factory=dict)  # one of agent.REQUEST_BODIES, tagged


@attrs.frozen
class FrameFault:
    """Why a request could not be answered: an API error code and words naming the problem."""

    code: str
    message: str


@attrs.frozen
class Reply:
    id: int = field(**_ID)
    body: dict[str, Any] | None = None  # one of agent.REPLY_BODIES, tagged
    error: FrameFault | None = None


@attrs.frozen
class Heartbeat:
    """Agent -> server, every ``[uplink] heartbeat_s``: alive, and how far behind its spool is."""

    ts_ms: int = field(minimum=0)  # the agent's wall clock: the server computes the skew
    backlog_records: int = field(minimum=0)  # spooled and not yet acknowledged
    backlog_bytes: int = field(minimum=0)
    oldest_ms: int | None = field(default=None, minimum=0)  # when the oldest of them was spooled


@attrs.frozen
class HeartbeatOk:
    ts_ms: int = field(minimum=0)  # the server's wall clock


@attrs.frozen
class Goodbye:
    """Agent -> server: the node's runner is going away (no dispatches until its next hello)."""


@attrs.frozen
class SessionCall:
    """Request body: an SDK call the agent's local socket took (``/api/v1/sessions...``).

    ``job_id``: the job whose process made it, as the agent tells by the process's ancestors
    (``gpuplaned.launching.peers``); None for a process on the host that is no job's. The
    server holds the call to that job, which must be on the agent's node."""

    method: str = field(enum=("GET", "POST"))
    path: str = field(min_length=1, max_length=300, pattern="^/api/v1/(sessions|runs/[A-Za-z0-9_-]+/summary)")
    body: dict[str, Any] | None = None
    job_id: str | None = field(default=None, min_length=1, max_length=64, pattern="^[A-Za-z0-9_-]+$")


@attrs.frozen
class SessionReply:
    status: int = field(minimum=100, maximum=599)
    body: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class LogRead:
    """Request body, server -> agent: up to ``limit`` bytes of a job attempt's log from ``offset``."""

    job_id: str = field(min_length=1, max_length=64, pattern="^[A-Za-z0-9_-]+$")  # a folder name: no "..", no "/"
    attempt: int = field(minimum=1)
    stream: str = field(enum=("stdout", "stderr"))
    offset: int = field(minimum=0)
    limit: int = field(minimum=1, maximum=1 << 20)


@attrs.frozen
class LogData:
    """Reply body: the bytes read, and the file's size now.

    ``data`` is base64 of the bytes exactly as the file holds them: the server's offsets
    count the file's bytes, and text decoded with its undecodable bytes replaced would be
    longer than what was read (and not what the job wrote).
    """

    job_id: str
    attempt: int
    stream: str
    offset: int
    data: str
    size: int
    ended: bool  # the attempt has ended: the file will not grow
