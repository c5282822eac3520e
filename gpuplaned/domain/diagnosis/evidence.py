"""Findings, their evidence pointers and the report shape every semantic function answers.

A pointer names what the API serves, so a client (the UI, an agent) can fetch it back:

- ``metric``: ``GET /runs/{run_id}/series?name=&start=a&end=b`` (steps, both included; a
  pointer with ``ts`` instead of ``steps`` is in ms, ``x=ts``);
- ``log``: ``GET /jobs/{job_id}/logs?attempt=&stream=&offset=`` (byte offsets of the lines);
- ``gpu``: ``GET /nodes/{node_id}/metrics?names=gpu<i>.*&start=a&end=b`` (ms);
- ``event``: ``GET /events`` (its id); ``checkpoint``: ``GET /checkpoints/{id}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from gpuplaned.protocol.vocabulary import SEVERITIES, SEVERITY_RANK

_RANK = SEVERITY_RANK


def number(value: float | None) -> float | str | None:
    """A JSON-safe value: NaN and infinities as the strings the series export names them."""
    if value is None or math.isfinite(value):
        return value
    return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")


def metric(run_id: str, name: str, steps: Sequence[int], values: Sequence[float]) -> dict[str, Any]:
    return {"kind": "metric", "run_id": run_id, "name": name, "steps": [min(steps), max(steps)],
            "values": [number(v) for v in values]}


def metric_time(run_id: str, name: str, start_ms: int, end_ms: int) -> dict[str, Any]:
    """A metric's stretch of time (``GET /runs/{id}/series?x=ts&start=&end=``): a gap has no values."""
    return {"kind": "metric", "run_id": run_id, "name": name, "ts": [start_ms, end_ms], "values": []}


def log(job_id: str, attempt: int, stream: str, lines: Sequence[tuple[int, str]]) -> dict[str, Any]:
    offsets = [o for o, _ in lines]
    return {"kind": "log", "job_id": job_id, "attempt": attempt, "stream": stream,
            "offsets": [min(offsets), max(offsets)], "lines": [text for _, text in lines]}


def gpu(node_id: str | None, index: int, name: str, ts: Sequence[int], values: Sequence[float | None]) -> dict[str, Any]:
    return {"kind": "gpu", "node_id": node_id, "gpu": index, "name": name, "ts": [min(ts), max(ts)],
            "values": [number(v) for v in values]}


def bind(context: Mapping[str, Any], kind: str, key: str, value: str) -> dict[str, Any]:
    """``context`` with ``key`` set to ``value`` in each ``kind`` pointer of its evidence that has
    none: a pure rule does not know which run it judges, nor a node's rule the id the server
    gave the node."""
    pointers = context.get("evidence")
    if not pointers:
        return dict(context)
    bound = [{**p, key: value} if p.get("kind") == kind and p.get(key) is None else p for p in pointers]
    return {**context, "evidence": bound}


def bind_node(context: Mapping[str, Any], node_id: str) -> dict[str, Any]:
    return bind(context, "gpu", "node_id", node_id)


def event(event_id: str, type_: str) -> dict[str, Any]:
    return {"kind": "event", "id": event_id, "type": type_}


def checkpoint(checkpoint_id: str) -> dict[str, Any]:
    return {"kind": "checkpoint", "id": checkpoint_id}


def finding(kind: str, severity: str, claim: str, *evidence: dict[str, Any], **facts: Any) -> dict[str, Any]:
    """A claim, the pointers that show it, and its numbers (``facts``: per kind, for programs)."""
    assert severity in SEVERITIES, severity
    return {"kind": kind, "severity": severity, "claim": claim, "evidence": list(evidence), "facts": facts}


def report(findings: list[dict[str, Any]], summary: str, next_actions: list[str]) -> dict[str, Any]:
    """Worst first (stable within a severity), the actions without repeats."""
    ordered = sorted(findings, key=lambda f: -_RANK[f["severity"]])
    return {"summary": summary, "findings": ordered, "next_actions": list(dict.fromkeys(next_actions))}


def worst(findings: Sequence[dict[str, Any]]) -> str:
    return max((f["severity"] for f in findings), key=_RANK.__getitem__, default="info")
