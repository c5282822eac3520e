"""RUN_STALLED (warning): a running job wrote no metric point and no log line for
``after_ms`` while its process lives.

Pure: the detector feeds, per running job and tick, what the job has produced so far as a
fingerprint (its log streams' last offsets, its run's point count) and the time. A changed
fingerprint is activity; an unchanged one for ``after_ms`` opens the episode and raises once;
the next activity closes it. The state is JSON: ``{"fingerprint": [...], "since": ms,
"open": bool}``; the event's context keeps the fingerprint, so a restarted detector that
finds its last RUN_STALLED for the same fingerprint knows the episode is still open.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

RUN_STALLED = "RUN_STALLED"


@attrs.frozen
class StallPolicy:
    after_ms: int = 20 * 60 * 1000
    enabled: bool = True


def update(state: Mapping[str, Any] | None, now_ms: int, fingerprint: Sequence[Any],
           policy: StallPolicy = StallPolicy()) -> tuple[dict[str, Any], int | None]:
    """The new state and, when the stall episode opens now, how long the job has been
    silent (ms); None otherwise."""
    fingerprint = list(fingerprint)
    if state is None or list(state.get("fingerprint") or []) != fingerprint:
        return {"fingerprint": fingerprint, "since": now_ms, "open": False}, None
    out = dict(state)
    silent = now_ms - int(out["since"])
    if out.get("open") or silent < policy.after_ms or not policy.enabled:
        return out, None
    out["open"] = True
    return out, silent
