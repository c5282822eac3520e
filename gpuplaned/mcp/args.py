"""The tools' arguments: attrs classes checked by the one converter, so a bad argument gets
the error a REST client would get, and documented by the same generator (``schemas``).

Lists are JSON arrays here (an agent writes arrays more reliably than comma-separated text);
ids are checked for their prefix, so a run id passed for a job id is named as such.
"""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.domain.event_types import EVENT_TYPES
from gpuplaned.protocol.fields import field
from gpuplaned.protocol.group_wire import GROUP_MESSAGE, GROUP_PATTERN, MAX_PARALLEL, MAX_PRIORITY
from gpuplaned.protocol.vocabulary import SEVERITIES
from gpuplaned.service.api.jobs import JOB_STATES, STREAMS

MAX_POINTS = 2000  # query_metrics: more than this is a chart, not something to read
DEFAULT_POINTS = 200
MAX_LINES = 500
MAX_WAIT_S = 50.0  # under Cursor's 60 s call timeout, with room for the reply


def _id(prefix: str, what: str) -> Any:
    return field(pattern=f"^{prefix}_[0-9A-Za-z]{{1,64}}$", description=f"the {what}'s id ({prefix}_...)",
                 message=f"a {what} id ({prefix}_...), got {{value!r}}")


def _limit(default: int, most: int) -> Any:
    return field(default=default, minimum=1, maximum=most, description="at most this many")


def _optional_id(prefix: str, what: str) -> Any:
    return field(default=None, pattern=f"^{prefix}_[0-9A-Za-z]{{1,64}}$", description=f"only this {what}'s",
                 message=f"a {what} id ({prefix}_...), got {{value!r}}")


@attrs.frozen(kw_only=True)
class NoArgs:
    """Nothing to pass."""


@attrs.frozen(kw_only=True)
class NodeArgs:
    node: str = field(min_length=1, max_length=200, description="the node's id or name")


@attrs.frozen(kw_only=True)
class ListJobsArgs:
    status: list[str] = field(factory=list, items={"enum": JOB_STATES}, description="only jobs in these states")
    group: str | None = field(default=None, pattern=GROUP_PATTERN, message=GROUP_MESSAGE,
                              description="only this group's jobs (submit_job's group)")
    sweep: str | None = _optional_id("swp", "sweep")
    limit: int = _limit(20, 100)
    cursor: str | None = field(default=None, description="next_cursor of the previous page")


@attrs.frozen(kw_only=True)
class JobArgs:
    job_id: str = _id("job", "job")


@attrs.frozen(kw_only=True)
class RunArgs:
    run_id: str = _id("run", "run")


@attrs.frozen(kw_only=True)
class QueryMetricsArgs:
    run_id: str = _id("run", "run")
    names: list[str] = field(factory=list, max_items=20, items={"min_length": 1, "pattern": r"^[A-Za-z0-9_.*?\[\]/-]{1,200}$"},
                             description="metric names or shell patterns (train/*); empty: every series")
    x: str = field(default="step", enum=("step", "ts"), description="the x axis")
    start: int | None = field(default=None, minimum=0, description="first x; null: the first point")
    end: int | None = field(default=None, minimum=0, description="last x; null: the last point")
    max_points: int = field(default=DEFAULT_POINTS, minimum=1, maximum=MAX_POINTS,
                            description="at most this many buckets per series (each keeps its min and max)")


@attrs.frozen(kw_only=True)
class TailLogsArgs:
    job_id: str = _id("job", "job")
    stream: str = field(default="stdout", enum=STREAMS)
    max_lines: int = field(default=50, minimum=1, maximum=MAX_LINES, description="the line budget: at most this "
                                                                                 "many lines, the last ones")
    grep: str | None = field(default=None, min_length=1, max_length=200,
                             description="a regular expression (RE2: Python's syntax without backreferences "
                             "or lookarounds): only lines it matches")
    attempt: int | None = field(default=None, minimum=1, description="null: the latest attempt")


@attrs.frozen(kw_only=True)
class EventFilterArgs:
    types: list[str] = field(factory=list, items={"enum": EVENT_TYPES},
                             description="only these event types (JOB_FAILED: every failed attempt, OOM and "
                             "JOB_TIMEOUT included)")
    severity: list[str] = field(factory=list, items={"enum": SEVERITIES}, description="only these severities")
    job_id: str | None = _optional_id("job", "job")
    run_id: str | None = _optional_id("run", "run")
    node_id: str | None = field(default=None, min_length=1, description="only this node's")


@attrs.frozen(kw_only=True)
class ListEventsArgs(EventFilterArgs):
    limit: int = _limit(50, 200)
    cursor: str | None = field(default=None, description="next_cursor of the previous page (older events)")


@attrs.frozen(kw_only=True)
class WaitArgs(EventFilterArgs):
    cursor: str | None = field(default=None, min_length=1, max_length=100,
                               description="the cursor list_events or wait_for_events returned: only events after "
                                           "it; 0: from the first event; null: only events from now on")
    timeout_s: float = field(default=30.0, minimum=0, maximum=MAX_WAIT_S, description="give up after this long")
    limit: int = _limit(50, 200)


@attrs.frozen(kw_only=True)
class CheckpointsArgs:
    run_id: str = _id("run", "run")
    metric: str | None = field(default=None, min_length=1, description="rank by this metric; null: the primary")


@attrs.frozen(kw_only=True)
class EvaluationsArgs:
    checkpoint_id: str | None = field(default=None, pattern=r"^ck_[0-9A-Za-z]{1,64}$",
                                      description="one checkpoint's evaluations")
    experiment_id: str | None = field(default=None, min_length=1,
                                      description="an experiment's (its id, or its name with project)")
    project: str | None = field(default=None, min_length=1)
    limit: int = _limit(50, 200)

    __schema__ = {"anyOf": [{"required": ["checkpoint_id"]}, {"required": ["experiment_id"]}]}


@attrs.frozen(kw_only=True)
class CancelArgs:
    job_id: str = _id("job", "job")


@attrs.frozen(kw_only=True)
class RetryArgs:
    job_id: str = _id("job", "job")
    resume_from: str | None = field(default=None, pattern=r"^(best|last|ck_[0-9A-Za-z]{1,64})$",
                                    description="best, last or a checkpoint id: resume from it; null: start afresh")
    with_dependants: bool = field(default=False, description="also queue again, behind it, its dependants (and "
                                                             "theirs) cancelled with DEPENDENCY_FAILED")


def _group() -> Any:
    return field(pattern=GROUP_PATTERN, message=GROUP_MESSAGE, description="the group's name (submit_job's group)")


@attrs.frozen(kw_only=True)
class GroupLimitArgs:
    group: str = _group()
    parallel: int | None = field(minimum=1, maximum=MAX_PARALLEL,
                                 description="at most this many of its jobs run at once; null: no limit")


@attrs.frozen(kw_only=True)
class GroupPauseArgs:
    group: str = _group()
    paused: bool = field(default=True, description="true: pause (no new job of it starts; running ones go on); "
                                                   "false: resume")


@attrs.frozen(kw_only=True)
class QueuePauseArgs:
    paused: bool = field(default=True, description="true: pause (no queued job starts; running ones go on); "
                                                   "false: resume")


@attrs.frozen(kw_only=True)
class PriorityArgs:
    job_id: str = _id("job", "job")
    priority: int = field(minimum=-MAX_PRIORITY, maximum=MAX_PRIORITY, description="higher runs first")


@attrs.frozen(kw_only=True)
class SweepArgs:
    sweep_id: str = _id("swp", "sweep")


@attrs.frozen(kw_only=True)
class SweepLimitArgs:
    sweep_id: str = _id("swp", "sweep")
    max_parallel: int | None = field(minimum=1, maximum=MAX_PARALLEL,
                                     description="at most this many of its trials run at once; null: no limit")


@attrs.frozen(kw_only=True)
class GetSweepArgs:
    sweep_id: str = _id("swp", "sweep")
    status: list[str] = field(factory=list, items={"enum": JOB_STATES}, description="only trials in these states")
    limit: int = field(default=20, minimum=1, maximum=500, description="at most this many trials, by number")


@attrs.frozen(kw_only=True)
class CheckpointArgs:
    checkpoint_id: str = _id("ck", "checkpoint")


@attrs.frozen(kw_only=True)
class CompareRunsArgs:
    run_ids: list[str] = field(min_items=2, max_items=10, items={"pattern": r"^run_[0-9A-Za-z]{1,64}$"},
                               description="2 to 10 run ids; the first is the baseline")
    align: str = field(default="step", enum=("step", "time"))


@attrs.frozen(kw_only=True)
class CompareCheckpointsArgs:
    checkpoint_ids: list[str] = field(min_items=2, max_items=10, items={"pattern": r"^ck_[0-9A-Za-z]{1,64}$"},
                                      description="2 to 10 checkpoint ids; the first is the baseline")


@attrs.frozen(kw_only=True)
class BestCheckpointArgs:
    experiment_id: str = field(min_length=1, description="the experiment's id (exp_...), or its name with project")
    project: str | None = field(default=None, min_length=1)
    metric: str | None = field(default=None, min_length=1, description="rank by this; null: the primary metric")
