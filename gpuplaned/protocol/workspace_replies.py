"""The Experiments workspace's runs as the API shows them (``POST /api/v1/workspace/runs``): each
run's flattened config and per-metric summary (count, last, min, max, best), so a table of up to
a thousand runs needs one request and no point reads."""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.protocol.fields import doc

CONFIG_TYPES = ("number", "string", "bool", "null", "list", "object")
DIRECTIONS = ("min", "max")  # the workspace's words for minimize and maximize
_VALUE = {"anyOf": [{"type": "number"}, {"type": "string", "enum": ["NaN", "Infinity", "-Infinity"]}]}


@attrs.frozen
class SummaryPoint:
    step: int
    value: float = doc("finite")


@attrs.frozen
class LastPoint:
    step: int
    value: float | str = doc("a number, or NaN, Infinity or -Infinity as a string", documented_as=Any, **_VALUE)


@attrs.frozen
class MetricCell:
    """One metric of one run, summarised as its points arrived (never by a read of them)."""

    count: int = doc("how many points", minimum=0)
    last: LastPoint | None = doc("the point with the greatest step (then time); null: none")
    min: SummaryPoint | None = doc("the lowest finite point (on a tie, the lowest step); null: none is finite")
    max: SummaryPoint | None = doc("the highest finite point (on a tie, the lowest step); null: none is finite")
    best: SummaryPoint | None = doc("min or max by the metric's direction; null: it has none")


@attrs.frozen
class WorkspaceRun:
    id: str
    name: str | None
    status: str
    job_id: str | None
    project: str | None = doc("the project's name (an experiment's project when the run names none)")
    experiment: str | None = doc("the experiment's name")
    experiment_id: str | None
    sweep_id: str | None = doc("the sweep whose trial the run's job is")
    sweep_trial: int | None = doc("the trial's number within its sweep (0, 1, 2 ...)")
    tags: list[str]
    created_at: int = doc("ms since the epoch")
    ended_at: int | None = doc("ms since the epoch; null while it runs")
    config: dict[str, Any] = doc("what the script passed to init(config=...), nested keys joined with '.', "
                                 "each value as its JSON type (a NaN or infinite number as the string NaN, "
                                 "Infinity or -Infinity; a sweep trial's values fill the keys the config lacks)")
    metrics: dict[str, MetricCell] = doc("name -> summary")


@attrs.frozen
class WorkspaceMetric:
    name: str
    direction: str | None = doc("which way is better; null: none", enum=DIRECTIONS)
    primary: bool = doc("the primary metric (listed first)")


@attrs.frozen
class ConfigKey:
    key: str
    types: list[str] = doc("the JSON types its values take across the runs", items={"enum": list(CONFIG_TYPES)})


@attrs.frozen(kw_only=True)
class WorkspaceRuns:
    runs: list[WorkspaceRun] = doc("newest first")
    metrics: list[WorkspaceMetric] = doc("every metric the runs logged: the primary first, then by name")
    config_keys: list[ConfigKey] = doc("every config key of the runs, by name")
    primary_metric: str | None = doc("the sweep's metric, else resolved for the one experiment or project named, "
                                     "else the global one; null: none is set")
    truncated: bool = doc("more runs matched than the limit")
