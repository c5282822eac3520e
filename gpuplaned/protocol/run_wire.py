"""A run as the API shows it: one attempt of a job, a run a training script opened, or an imported one."""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.job_states import RUN_STATES


@attrs.frozen
class Run:
    """One attempt of a job, or a run a training script opened with the SDK."""

    id: str = doc("run_<ULID>")
    job_id: str | None
    attempt: int | None = doc("which attempt of its job this run is")
    node_id: str | None
    name: str | None
    source: str = doc(enum=("job", "sdk", "import"))  # "job": started by the runner; "import": import-run
    status: str = doc(enum=RUN_STATES)
    created_at: int = doc("ms since the epoch")
    started_at: int | None = doc("ms since the epoch")
    finished_at: int | None = doc("ms since the epoch")
    exit_code: int | None
    failure_reason: str | None
    env_snapshot: dict[str, Any] | None = None  # what the SDK reported of the training process
    project: str | None = doc("the project's name", default=None)  # GET /runs/{id} has the ids too
    experiment: str | None = doc("the experiment's name", default=None)
    config: dict[str, Any] | None = doc("what the script passed to gpuplane.init(config=...)", default=None)
    tags: list[str] = attrs.field(factory=list)
    metric_sources: list[str] = doc("what fed the run's metrics: sdk (gpuplane.init), tensorboard (event files the "
                                    "node read, or import-run); empty: none yet", factory=list)
    resumed_from: str | None = doc("the checkpoint this attempt resumed from (job retry --resume-from)", default=None)
    resume_step: int | None = doc("that checkpoint's step", default=None)
