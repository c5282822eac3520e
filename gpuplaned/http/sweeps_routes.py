"""Routes for sweeps (issue 31 item 3): make one (its trials are jobs), list, show, change its
max-parallel, and cancel, pause, resume or retry its failed trials."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
from quart import Response, g
from quart_trio import QuartTrio

from gpuplaned.http.responses import ok
from gpuplaned.http.routes import Param, Reply, Routes
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.fields import UNSET, field
from gpuplaned.protocol.sweep_wire import (
    SWEEP_STATES,
    SweepList,
    SweepPatch,
    SweepReply,
    SweepShown,
    SweepSubmit,
    SweepSubmitted,
)
from gpuplaned.service.api import sweeps

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

VERBS = ("cancel", "pause", "resume", "retry-failed")


@attrs.frozen(kw_only=True)
class SweepsQuery:
    status: str = field(default=UNSET, enum=SWEEP_STATES, description="only the sweeps in this state")


api = Routes("jobs")
_SWEEP = Param("sweep_id", "the sweep's id (swp_<ULID>)")

SUBMIT = api.post("/api/v1/sweeps", "submitSweep", "Make a sweep: a job run over a grid, random draws or a list "
                                                   "of parameter values",
                  Reply(201, SweepSubmitted, "The sweep, with the trials made and those that existed already."),
                  errors=(400, 403, 409, 413), body=SweepSubmit,
                  also=(Reply(200, SweepSubmitted, "dry_run: the trials it would make and its worst-case GPU-hours; "
                                                   "nothing was written."),),
                  description="Each trial is a job: {NAME} in its arguments becomes the trial's value, and it gets "
                              "GPUPLANE_SWEEP_<NAME>, GPUPLANE_SWEEP_ID and GPUPLANE_SWEEP_TRIAL. All trials are "
                              "queued in one transaction, each admitted as POST /api/v1/jobs:batch admits an entry "
                              "(a token's limits, its budget for the trials together), or none. Trials are unique "
                              "by their values: the name of a sweep not cancelled, with the same job, adds only the "
                              "new values' trials (created, existing); another job under that name is 409. With "
                              "Idempotency-Key a repeat gets the first reply.")
LIST = api.get("/api/v1/sweeps", "listSweeps", "Sweeps, newest first", Reply(200, SweepList, "The sweeps."),
               errors=(400,), query=SweepsQuery,
               description="A token with limits sees only the sweeps it submitted.")
SHOW = api.get("/api/v1/sweeps/<sweep_id>", "getSweep", "One sweep with its trials and their best",
               Reply(200, SweepShown, "The sweep, its trials by number and the best combination so far."),
               errors=(403, 404), params=(_SWEEP,))
UPDATE = api.patch("/api/v1/sweeps/<sweep_id>", "updateSweep", "Change a sweep's max-parallel while it runs",
                   Reply(200, SweepReply, "The sweep."), errors=(400, 403, 404, 409), params=(_SWEEP,),
                   body=SweepPatch,
                   description="Its queued trials follow the new limit from the next scheduling pass. A Slurm node "
                               "holding its trials applies it to the sweep's array jobs (scontrol update JobId=A "
                               "ArrayTaskThrottle=K). A token with limits may change only the sweeps it submitted "
                               "(403). 409: the sweep is cancelled.")
ACT = api.post("/api/v1/sweeps/<sweep_id>/<verb>", "changeSweep", "Cancel, pause, resume or retry a sweep",
               Reply(200, SweepReply, "The sweep."), errors=(403, 404, 409),
               params=(_SWEEP, Param("verb", "cancel: its queued trials are cancelled and its running ones stopped "
                                             "(SIGTERM, then SIGKILL after their grace). pause: none of its trials "
                                             "starts (they wait with \"sweep NAME paused\"); running ones go on. "
                                             "resume: they may start again. retry-failed: its FAILED trials are "
                                             "queued again", {"type": "string", "enum": list(VERBS)})),
               description="A token with limits may act only on the sweeps it submitted (403). 409: the sweep is "
                           "cancelled (for pause, resume and retry-failed).")


def register(app: QuartTrio, shared: ServerContext) -> None:
    @SUBMIT.on(app)
    async def submit_sweep(body: SweepSubmit) -> Response:
        reply = await sweeps.submit(shared, body, caller=_caller())
        return ok(reply, 200 if reply.dry_run else 201)

    @LIST.on(app)
    async def list_sweeps(query: SweepsQuery) -> Response:
        return ok(SweepList(sweeps=await sweeps.list_sweeps(shared, caller=_caller(), status=query.status or None)))

    @SHOW.on(app)
    async def get_sweep(sweep_id: str) -> Response:
        return ok(SweepShown(sweep=await sweeps.get_sweep(shared, sweep_id, caller=_caller())))

    @UPDATE.on(app)
    async def update_sweep(sweep_id: str, body: SweepPatch) -> Response:
        return ok(SweepReply(sweep=await sweeps.set_max_parallel(shared, sweep_id, body.max_parallel,
                                                                 caller=_caller())))

    @ACT.on(app)
    async def change_sweep(sweep_id: str, verb: str) -> Response:
        caller = _caller()
        if verb == "cancel":
            sweep = await sweeps.cancel(shared, sweep_id, caller=caller)
        elif verb == "pause":
            sweep = await sweeps.pause(shared, sweep_id, caller=caller)
        elif verb == "resume":
            sweep = await sweeps.resume(shared, sweep_id, caller=caller)
        elif verb == "retry-failed":
            sweep = await sweeps.retry_failed(shared, sweep_id, caller=caller)
        else:
            raise ApiError(ErrorCode.NOT_FOUND, f"no such command {verb!r}: {', '.join(VERBS)}", {"verb": verb})
        return ok(SweepReply(sweep=sweep))


def _caller() -> Any:
    return getattr(g, "caller", None)
