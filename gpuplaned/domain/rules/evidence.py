"""Evidence pointers: what an event's ``context["evidence"]`` lists, each resolvable through
the API (a metric's points by step, a job's log lines by byte offset, a node's GPU samples
by timestamp, another event by id).

- ``{"kind": "metric", "run_id", "name", "steps": [first, last], "values": [...]}``:
  GET /api/v1/runs/{run_id}/metrics?names={name} over those steps.
- ``{"kind": "log", "job_id", "attempt", "stream", "offsets": [first, last]}``: the lines
  starting at those byte offsets, GET /api/v1/jobs/{job_id}/logs.
- ``{"kind": "gpu", "node_id", "gpu", "ts": [...]}``: the node's GPU series at those ms.
- ``{"kind": "event", "id"}``.

A pure rule does not know which run it judges: it leaves ``run_id`` None and the service
fills it in (``bind_run``). The metric pointer is the diagnosis's own
(``gpuplaned.domain.diagnosis.evidence``): one shape for both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuplaned.domain.diagnosis import evidence as shapes


def metric(name: str, steps: Sequence[int], values: Sequence[float], run_id: str | None = None) -> dict[str, Any]:
    return shapes.metric(run_id, name, steps, values)  # type: ignore[arg-type]


def log(job_id: str, attempt: int, stream: str, offsets: Sequence[int]) -> dict[str, Any]:
    return {"kind": "log", "job_id": job_id, "attempt": attempt, "stream": stream,
            "offsets": [min(offsets), max(offsets)]}


def gpu(node_id: str, index: int, ts: Sequence[int]) -> dict[str, Any]:
    return {"kind": "gpu", "node_id": node_id, "gpu": index, "ts": list(ts)}


def event(event_id: str) -> dict[str, Any]:
    return {"kind": "event", "id": event_id}


def bind_run(context: Mapping[str, Any], run_id: str) -> dict[str, Any]:
    """``context`` with ``run_id`` set in each metric pointer that has none."""
    return shapes.bind(context, "metric", "run_id", run_id)
