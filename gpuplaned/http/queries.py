"""Query parameters as attrs classes: each route's ``query=`` (``gpuplaned.http.routes``).

``gpuplaned.http.bodies.query_args`` reads the request's text into them and the converter
checks the bounds declared here, which the document states as they are. A parameter that
a service reads in any case (``status=succeeded``, ``severity=INFO``) is a ``str`` here,
documented as the list it is, and checked by that service (``parse_statuses``,
``events.parse_filter``). An optional parameter without a default is ``UNSET`` (falsy) when absent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from gpuplaned.domain.event_types import EVENT_TYPES
from gpuplaned.protocol.fields import UNSET, field
from gpuplaned.protocol.group_wire import GROUP_MESSAGE, GROUP_PATTERN
from gpuplaned.protocol.vocabulary import SEVERITIES
from gpuplaned.service.api.jobs import JOB_STATES, STREAMS
from gpuplaned.service.api.logs import MAX_PAGE
from gpuplaned.service.api.projects import METRIC_PATTERN
from gpuplaned.service.api.run_logs import DEFAULT_TAIL, MAX_LINES
from gpuplaned.service.api.runs import RUN_STATES



def _any_case(values: Iterable[str], description: str) -> Any:
    """A comma-separated list its service reads in any case."""
    return field(default=UNSET, description=description,
                 schema={"type": "array", "items": {"type": "string", "enum": list(values)}, "minItems": 1})


def _text(description: str, **more: Any) -> Any:
    return field(default=UNSET, description=description, **more)


def _limit() -> Any:
    return field(default=100, minimum=1, maximum=10_000, description="at most this many, newest first")


def _cursor() -> Any:
    return _text("next_cursor of the previous page (opaque)")


@attrs.frozen(kw_only=True)
class Page:
    limit: int = _limit()
    cursor: str = _cursor()


@attrs.frozen(kw_only=True)
class JobsQuery:
    status: str = _any_case(JOB_STATES, "comma-separated states (any case)")
    group: str = _text("only this group's jobs (submit --group)", pattern=GROUP_PATTERN, message=GROUP_MESSAGE)
    sweep: str = _text("only this sweep's trials (swp_...)", pattern="^swp_[0-9A-Za-z]{1,64}$",
                       message="must be a sweep id (swp_...), got {value!r}")
    limit: int = _limit()
    cursor: str = _cursor()


@attrs.frozen(kw_only=True)
class RunsQuery:
    job_id: str = _text("only this job's runs")
    status: str = _any_case(RUN_STATES, "comma-separated states (any case)")
    limit: int = _limit()
    cursor: str = _cursor()


_ATTEMPT = {"default": 0, "minimum": 0, "maximum": 1_000_000,
            "description": "which attempt (1-based); 0 or absent: the latest"}


@attrs.frozen(kw_only=True)
class LogsQuery:
    stream: str = field(default="stdout", enum=STREAMS, description="which file")
    attempt: int = field(**_ATTEMPT)
    tail: int = field(default=UNSET, minimum=0, maximum=MAX_PAGE, description="the last N lines")
    offset: int = field(default=UNSET, minimum=0, maximum=1 << 62,
                        description="the page starts with the line at this byte offset: 0, a line's own "
                                    "(an evidence pointer's), or next_offset of the page before")
    limit: int = field(default=10_000, minimum=1, maximum=MAX_PAGE, description="at most this many lines")


@attrs.frozen(kw_only=True)
class LogStreamQuery:
    stream: str = field(default="all", enum=(*STREAMS, "all"), description="which files")
    attempt: int = field(**_ATTEMPT)
    position: str = _text("resume position: an event id from an earlier stream",
                                 pattern="^-?[0-9]+(,-?[0-9]+)?$")


@attrs.frozen(kw_only=True)
class RunLogsQuery:
    path: str = _text("only this file (a path of logs[]); absent: every file", min_length=1, max_length=4096)
    stream: str = field(default="all", enum=(*STREAMS, "all"), description="only this stream's files")
    tail: int = field(default=DEFAULT_TAIL, minimum=0, maximum=MAX_LINES, description="the last N lines of each file")
    offset: int = field(default=UNSET, minimum=0, maximum=1 << 62,
                        description="page one file instead (path=, or the one file selected): from next_offset of "
                                    "a previous page (0: its start)")
    limit: int = field(default=1000, minimum=1, maximum=MAX_LINES, description="with offset: at most this many lines")


@attrs.frozen(kw_only=True)
class EventFilterArgs:
    severity: str = _any_case(SEVERITIES, "comma-separated severities (any case)")
    type: str = _any_case(EVENT_TYPES, "comma-separated event types (any case); another is a 400 that "
                                              "lists them")
    node_id: str = _text("only this node's events")
    job_id: str = _text("only this job's events")
    run_id: str = _text("only this run's events")


@attrs.frozen(kw_only=True)
class EventsQuery(EventFilterArgs):
    limit: int = _limit()
    cursor: str = _cursor()


@attrs.frozen(kw_only=True)
class EventStreamQuery(EventFilterArgs):
    after: str = _text("resume after this event id (0: from the first event); absent: new events only")


@attrs.frozen(kw_only=True)
class ScopeQuery:
    project: str = _text("a project's id or name", min_length=1)
    experiment: str = _text("an experiment's id (or its name, with project)", min_length=1)


@attrs.frozen(kw_only=True)
class DefinitionsQuery(ScopeQuery):
    limit: int = _limit()
    cursor: str = _cursor()


@attrs.frozen(kw_only=True)
class CheckpointsQuery:
    metric: str = _text("rank by this metric; absent: the run's primary metric", pattern=METRIC_PATTERN)


@attrs.frozen(kw_only=True)
class BestCheckpointQuery:
    metric: str = _text("rank by this metric; absent: the experiment's primary metric", pattern=METRIC_PATTERN)
    project: str = _text("a project's id or name: then the experiment may be named by its name in it", min_length=1)


@attrs.frozen(kw_only=True)
class CompareRunsQuery:
    ids: str = _text("2 to 10 run ids, comma-separated; the first is the baseline")
    align: str = field(default="step", enum=("step", "time"), description="align by step, or by time since each "
                                                                          "run's first point")


@attrs.frozen(kw_only=True)
class CompareCheckpointsQuery:
    ids: str = _text("2 to 10 checkpoint ids (ck_...), comma-separated; the first is the baseline")
