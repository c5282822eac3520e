"""Routes for checkpoints (seed 000 section 11.1, Checkpoints): a run's, their pruning
(``gpuplaned.service.passes.retention``), one, its verify, and an experiment's best
(``gpuplaned.service.api.checkpoints.best``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response, g
from quart_trio import QuartTrio

from gpuplaned.http.queries import BestCheckpointQuery, CheckpointsQuery
from gpuplaned.http.responses import ok
from gpuplaned.http.routes import Param, Reply, Routes
from gpuplaned.protocol.checkpoint_replies import (
    BestCheckpoint,
    CheckpointList,
    CheckpointReply,
    CheckpointVerify,
    PruneResult,
)
from gpuplaned.service.api import run_records
from gpuplaned.service.api.checkpoints import best as best_checkpoint, verify as checkpoint_verify
from gpuplaned.service.passes import retention
from gpuplaned.service.passes.retention import PruneRequest

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


api = Routes("runs")

RUN_CHECKPOINTS = api.get("/api/v1/runs/<run_id>/checkpoints", "listRunCheckpoints",
                          "A run's checkpoints, oldest step first, the best marked",
                          Reply(200, CheckpointList, "The checkpoints."), errors=(400, 404),
                          params=(Param("run_id", "the run's id"),), query=CheckpointsQuery)
PRUNE = api.post("/api/v1/runs/<run_id>/checkpoints/prune", "pruneRunCheckpoints",
                 "Delete a run's checkpoints but the best K and the last K (a dry run by default)",
                 Reply(200, PruneResult, "What was kept and why, deleted (or would be) and refused."),
                 errors=(400, 403, 404, 413), params=(Param("run_id", "the run's id"),), body=PruneRequest,
                 body_required=False,
                 description="Only files GPUPlane registered, each only while it is what was registered (its "
                             "fingerprint, else its size); the best checkpoint and any an unfinished evaluation or "
                             "resume uses are never deleted. A row is marked deleted, with a CHECKPOINT_DELETED "
                             "event, only once its file is gone.")
CHECKPOINT = api.get("/api/v1/checkpoints/<checkpoint_id>", "getCheckpoint", "One checkpoint",
                     Reply(200, CheckpointReply, "The checkpoint."), errors=(404,),
                     params=(Param("checkpoint_id", "the checkpoint's id (ck_<ULID>)"),))
VERIFY = api.post("/api/v1/checkpoints/<checkpoint_id>/verify", "verifyCheckpoint",
                  "Hash a checkpoint's file now and say whether it changed since it was registered",
                  Reply(200, CheckpointVerify, "The checkpoint and its file as it is now (the first verify that "
                                               "finds it unchanged keeps its full hash)."), errors=(404,),
                  params=(Param("checkpoint_id", "the checkpoint's id (ck_<ULID>)"),))
BEST = api.get("/api/v1/experiments/<experiment_id>/best-checkpoint", "getBestCheckpoint",
               "The best checkpoint over an experiment's runs, its file verified present",
               Reply(200, BestCheckpoint, "The best checkpoint whose file is still what was registered."),
               errors=(400, 404, 409),
               params=(Param("experiment_id", "the experiment's id (exp_<ULID>), or its name with project="),),
               query=BestCheckpointQuery)


def register(app: QuartTrio, shared: ServerContext) -> None:
    @RUN_CHECKPOINTS.on(app)
    async def list_run_checkpoints(run_id: str, query: CheckpointsQuery) -> Response:
        return ok(await run_records.list_checkpoints(shared, run_id, query.metric or None))

    @PRUNE.on(app)
    async def prune_run_checkpoints(run_id: str, body: PruneRequest) -> Response:
        return ok(await retention.prune(shared, run_id, body.keep_best, body.keep_last, body.dry_run,
                                     body.metric or None, caller=getattr(g, "caller", None)))

    @CHECKPOINT.on(app)
    async def get_checkpoint(checkpoint_id: str) -> Response:
        return ok(await run_records.get_checkpoint(shared, checkpoint_id))

    @VERIFY.on(app)
    async def verify_checkpoint(checkpoint_id: str) -> Response:
        return ok(await checkpoint_verify.verify(shared, checkpoint_id))

    @BEST.on(app)
    async def best_experiment_checkpoint(experiment_id: str, query: BestCheckpointQuery) -> Response:
        return ok(await best_checkpoint.best_for_experiment(shared, experiment_id, query.project or None,
                                                            query.metric or None))
