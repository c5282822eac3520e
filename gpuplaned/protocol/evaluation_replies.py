"""Evaluations as the API shows them: one evaluation of a checkpoint, one queued with its job, and lists."""

from __future__ import annotations

import attrs

from gpuplaned.protocol.evaluation_wire import EVALUATION_STATES
from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.job_wire import Job
from gpuplaned.protocol.reply_words import MS


@attrs.frozen(kw_only=True)
class Evaluation:
    id: str = doc("eval_<ULID>")
    checkpoint_id: str
    checkpoint_run_id: str = doc("the run that saved the checkpoint")
    checkpoint_step: int | None
    checkpoint_path: str
    job_id: str | None = doc("the EVALUATE job")
    run_id: str | None = doc("the evaluation job's run (its latest attempt)")
    name: str | None
    suite: str | None
    dataset: str | None
    dataset_version: str | None
    status: str = doc(enum=EVALUATION_STATES)
    metrics: dict[str, float] = doc("name -> value, from $GPUPLANE_EVAL_RESULT or run.log_evaluation")
    error: str | None = doc("why it failed, in words")
    runtime_s: float | None = doc("how long the evaluation job ran")
    created_at: int = doc(MS)
    started_at: int | None = doc(MS)
    finished_at: int | None = doc(MS)


@attrs.frozen(kw_only=True)
class EvaluationQueued:
    evaluation: Evaluation
    job: Job = doc("the EVALUATE job (its env's names only)")


@attrs.frozen(kw_only=True)
class EvaluationList:
    evaluations: list[Evaluation]


@attrs.frozen(kw_only=True)
class ExperimentEvaluations:
    evaluations: list[Evaluation] = doc("newest first")
    experiment_id: str
