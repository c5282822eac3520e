"""Routes for evaluations (seed 000 section 11.1, Evaluations; ``gpuplaned.service.api.evaluations``):
queue one of a checkpoint, list a checkpoint's, list an experiment's."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
from quart import Response, g
from quart_trio import QuartTrio

from gpuplaned.http.responses import ok
from gpuplaned.http.routes import Param, Reply, Routes
from gpuplaned.protocol.evaluation_replies import EvaluationList, EvaluationQueued, ExperimentEvaluations
from gpuplaned.protocol.evaluation_wire import EvaluationCreate
from gpuplaned.protocol.fields import UNSET, field
from gpuplaned.service.api import evaluations, jobs

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


@attrs.frozen(kw_only=True)
class ExperimentEvaluationsQuery:
    project: str = field(default=UNSET, min_length=1,
                         description="a project's id or name: then the experiment may be named by its name in it")
    limit: int = field(default=100, minimum=1, maximum=evaluations.MAX_LIST, description="at most this many")


api = Routes("checkpoints")
_CHECKPOINT = Param("checkpoint_id", "the checkpoint's id (ck_<ULID>)")

CREATE = api.post("/api/v1/checkpoints/<checkpoint_id>/evaluations", "createEvaluation",
                  "Evaluate a checkpoint: queue an EVALUATE job",
                  Reply(201, EvaluationQueued, "The evaluation (QUEUED) and its job."), errors=(400, 403, 404, 409, 413),
                  params=(_CHECKPOINT,), body=EvaluationCreate,
                  description="{checkpoint} in the command is replaced by the checkpoint's path; the job gets "
                              "GPUPLANE_CHECKPOINT (the path) and GPUPLANE_EVAL_RESULT (a file it writes a JSON object "
                              "of metric names to numbers to), or reports with the SDK's run.log_evaluation. 404: an "
                              "unknown or deleted checkpoint; 409: its file is gone.")
LIST = api.get("/api/v1/checkpoints/<checkpoint_id>/evaluations", "listCheckpointEvaluations",
               "A checkpoint's evaluations, oldest first", Reply(200, EvaluationList, "The evaluations."),
               errors=(404,), params=(_CHECKPOINT,))
EXPERIMENT = api.get("/api/v1/experiments/<experiment_id>/evaluations", "listExperimentEvaluations",
                     "The evaluations of an experiment's checkpoints, newest first",
                     Reply(200, ExperimentEvaluations, "The evaluations."), errors=(400, 404),
                     params=(Param("experiment_id", "the experiment's id (exp_<ULID>), or its name with project="),),
                     query=ExperimentEvaluationsQuery)


def register(app: QuartTrio, shared: ServerContext) -> None:
    @CREATE.on(app)
    async def create_evaluation(checkpoint_id: str, body: EvaluationCreate) -> Response:
        queued = await evaluations.create(shared, checkpoint_id, body, caller=getattr(g, "caller", None))
        return ok(attrs.evolve(queued, job=jobs.env_view(queued.job, values=False)), 201)

    @LIST.on(app)
    async def checkpoint_evaluations(checkpoint_id: str) -> Response:
        return ok(await evaluations.list_for_checkpoint(shared, checkpoint_id))

    @EXPERIMENT.on(app)
    async def experiment_evaluations(experiment_id: str, query: ExperimentEvaluationsQuery) -> Response:
        return ok(await evaluations.list_for_experiment(shared, experiment_id, query.project or None, query.limit))
