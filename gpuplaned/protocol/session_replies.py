"""SDK sessions as the API shows them, and the replies to a session's writes: a batch of metrics and
records, the environment snapshot."""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.job_states import FINISH_STATES


@attrs.frozen
class Session:
    """One SDK process (a rank) reporting to a run."""

    id: str = doc("a UUIDv7")
    run_id: str
    rank: int | None
    host: str | None
    pid: int | None
    status: str = doc(enum=("OPEN", *FINISH_STATES))
    last_seq: int | None
    points: int
    created_at: int = doc("ms since the epoch")
    finished_at: int | None = doc("ms since the epoch")


@attrs.frozen(kw_only=True)
class SessionCreated:
    session_id: str
    run_id: str
    session: Session


@attrs.frozen(kw_only=True)
class SessionReply:
    session: Session


@attrs.frozen(kw_only=True)
class SessionList:
    sessions: list[Session]


@attrs.frozen(kw_only=True)
class BatchReply:
    seq: int
    duplicate: bool
    points: int = doc(minimum=0)


@attrs.frozen(kw_only=True)
class SessionEnvReply:
    stored: bool = doc("false: the run already had one (the first wins)")
