"""Projects, experiments and metric definitions as the API shows them, and which metric is primary."""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.reply_words import Ref, next_cursor_field
from gpuplaned.protocol.run_replies import PRIMARY_SOURCES

METRIC_SCOPES = ("train", "eval", "system")  # what a metric measures, as its definition says


@attrs.frozen
class Project:
    id: str = doc("prj_<ULID>")
    name: str
    description: str | None
    created_at: int = doc("ms since the epoch")
    primary_metric: str | None = doc("set on this project; null: the global one applies")
    experiments: int = doc(minimum=0)
    runs: int = doc(minimum=0)


@attrs.frozen
class Experiment:
    id: str = doc("exp_<ULID>")
    project_id: str
    project: str = doc("the project's name")
    name: str
    description: str | None
    created_at: int = doc("ms since the epoch")
    primary_metric: str | None = doc("set on this experiment; null: its project's applies")
    runs: int = doc(minimum=0)


@attrs.frozen
class MetricDefinition:
    name: str
    display_name: str | None
    direction: str | None = doc("which way is better; null: none (no best is kept)", enum=("minimize", "maximize"))
    scope: str | None = doc(enum=METRIC_SCOPES)
    unit: str | None
    is_primary: bool = doc("the global primary metric")
    created_at: int = doc("when a run first logged it (or it was first named)")


@attrs.frozen
class PrimaryMetric:
    """Which metric is primary for a scope, where that came from, and what each level sets."""

    metric: str | None = doc("the primary metric, resolved experiment -> project -> global")
    source: str | None = doc("where the primary metric was set; null: nowhere", enum=PRIMARY_SOURCES)
    project: Ref | None
    experiment: Ref | None
    settings: dict[str, str | None] = doc("each level's own setting", additionalProperties=False,
                                          properties={level: {"type": ["string", "null"]} for level in PRIMARY_SOURCES},
                                          required=list(PRIMARY_SOURCES))


@attrs.frozen(kw_only=True)
class ProjectReply:
    project: Project


@attrs.frozen(kw_only=True)
class ProjectList:
    projects: list[Project]
    next_cursor: str | None = next_cursor_field()


@attrs.frozen(kw_only=True)
class ExperimentReply:
    experiment: Experiment


@attrs.frozen(kw_only=True)
class ExperimentList:
    experiments: list[Experiment]
    next_cursor: str | None = next_cursor_field()


@attrs.frozen(kw_only=True)
class MetricDefinitionReply:
    metric_definition: MetricDefinition


@attrs.frozen(kw_only=True)
class MetricDefinitionList:
    metric_definitions: list[MetricDefinition]
    next_cursor: str | None = next_cursor_field()


@attrs.frozen(kw_only=True)
class MetricDefinitionUpdated:
    metric_definition: MetricDefinition
    runs_updated: int = doc("runs whose summary (best point) was recomputed", minimum=0)


@attrs.frozen(kw_only=True)
class PrimaryMetricReply:
    primary_metric: PrimaryMetric
