"""Routes for the semantic functions (seed 000 section 11.1, Semantics): a run's diagnosis,
runs and checkpoints compared, a job's failure explained (``gpuplaned.service.api.diagnosis``).

``/api/v1/runs/compare`` and ``/api/v1/checkpoints/compare`` sit beside ``/runs/<run_id>`` and
``/checkpoints/<checkpoint_id>``: werkzeug matches a static segment before a variable one,
whatever the order they were added in, so ``compare`` is never taken for an id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response
from quart_trio import QuartTrio

from gpuplaned.http.queries import CompareCheckpointsQuery, CompareRunsQuery
from gpuplaned.http.responses import ok
from gpuplaned.http.routes import Param, Reply, Routes
from gpuplaned.protocol.diagnosis_replies import CheckpointComparison, FailureExplanation, RunComparison, RunDiagnosis
from gpuplaned.service.api import diagnosis

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


api = Routes("runs")

DIAGNOSE = api.get("/api/v1/runs/<run_id>/diagnosis", "diagnoseRun",
                   "A run diagnosed: convergence, overfitting, instability, stalls, throughput against GPU use",
                   Reply(200, RunDiagnosis, "The findings, each with the steps, lines or samples that show it."),
                   errors=(404,), params=(Param("run_id", "the run's id"),),
                   description="Deterministic rules over every point (a million-point run is read as a thousand "
                               "buckets keeping each one's extremes, and raw points where a finding needs them).")
COMPARE_RUNS = api.get("/api/v1/runs/compare", "compareRuns",
                       "Runs compared: the divergence point, best value and step, throughput, GPU use, config",
                       Reply(200, RunComparison, "The comparison, the first run the baseline."),
                       errors=(400, 404), query=CompareRunsQuery)
COMPARE_CHECKPOINTS = api.get("/api/v1/checkpoints/compare", "compareCheckpoints",
                              "Checkpoints compared: the metric at their steps, evaluations, size, lineage",
                              Reply(200, CheckpointComparison, "The comparison, the first checkpoint the baseline."),
                              errors=(400, 404), query=CompareCheckpointsQuery)
EXPLAIN = api.get("/api/v1/jobs/<job_id>/explanation", "explainJob",
                  "Why a job's latest attempt failed, classified, with the log lines and GPU samples that show it",
                  Reply(200, FailureExplanation, "The cause (none when nothing failed) and its evidence."),
                  errors=(404,), params=(Param("job_id", "the job's id"),), tag="jobs")


def register(app: QuartTrio, shared: ServerContext) -> None:
    @DIAGNOSE.on(app)
    async def diagnose_run(run_id: str) -> Response:
        return ok(await diagnosis.diagnose(shared, run_id))

    @COMPARE_RUNS.on(app)
    async def compare_runs(query: CompareRunsQuery) -> Response:
        return ok(await diagnosis.compare(shared, query.ids or None, query.align))

    @COMPARE_CHECKPOINTS.on(app)
    async def compare_checkpoints(query: CompareCheckpointsQuery) -> Response:
        return ok(await diagnosis.compare_checkpoint_ids(shared, query.ids or None))

    @EXPLAIN.on(app)
    async def explain_job(job_id: str) -> Response:
        return ok(await diagnosis.explain(shared, job_id))
