"""The events of ``GET /api/v1/runs/{id}/metrics/stream`` and ``GET /api/v1/runs/metrics/stream``
(``gpuplaned.service.link.metric_feeds`` writes them, the HTTP routes document them): ``points``,
``ready`` and ``reset``."""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.protocol.fields import doc


@attrs.frozen(kw_only=True)
class StreamedPoints:
    seq: int = doc("the daemon's batch sequence (the id's second part)", minimum=1)
    series: dict[str, Any] = doc("name -> {step: [int], ts: [ms], value: [number | null], nonfinite: "
                                 "{NaN: [index], Infinity: [index], -Infinity: [index]}}")


@attrs.frozen(kw_only=True)
class RunStreamedPoints:
    """``points`` of the several-run stream: one committed batch of one run."""

    run_id: str = doc("the run whose batch it is")
    seq: int = doc("the daemon's batch sequence (the id's second part)", minimum=1)
    series: dict[str, Any] = doc("name -> {step: [int], ts: [ms], value: [number | null], nonfinite: "
                                 "{NaN: [index], Infinity: [index], -Infinity: [index]}}")


@attrs.frozen(kw_only=True)
class StreamReset:
    reason: str


@attrs.frozen(kw_only=True)
class StreamReady:
    pass
