"""The replies to an SDK session's writes: a batch of metrics and records, the environment snapshot."""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import doc


@attrs.frozen(kw_only=True)
class BatchReply:
    seq: int
    duplicate: bool
    points: int = doc(minimum=0)


@attrs.frozen(kw_only=True)
class SessionEnvReply:
    stored: bool = doc("false: the run already had one (the first wins)")
