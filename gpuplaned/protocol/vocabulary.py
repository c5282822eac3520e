"""The closed word lists of the API besides a job's states (``gpuplaned.protocol.job_states``):
an event's severity, a job's placement and the verbs of an actor command. Each is defined here
once; the store, the services, the routes, the CLI and the OpenAPI document import it.

Imports nothing but ``enum``: ``gpuplanectl`` imports it.
"""

from __future__ import annotations

import enum


class Severity(enum.StrEnum):
    """An event's severity, from the least to the most urgent."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


SEVERITIES = tuple(s.value for s in Severity)  # least urgent first
SEVERITY_RANK = {s.value: rank for rank, s in enumerate(Severity)}  # info 0 .. critical 2


class PlacementMode(enum.StrEnum):
    """How the scheduler picks a job's GPUs (``gpuplaned.domain.queue`` says what each does)."""

    PACK = "pack"
    SPREAD = "spread"


PLACEMENTS = tuple(p.value for p in PlacementMode)


class ActorVerb(enum.StrEnum):
    """What ``POST /api/v1/actors/{name}/{verb}`` (and ``gpuplanectl actor start|stop|restart``) asks."""

    START = "start"
    STOP = "stop"
    RESTART = "restart"


ACTOR_VERBS = tuple(v.value for v in ActorVerb)
