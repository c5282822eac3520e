"""Routes for job groups and queue control (issue 31 item 2): groups with their parallel limit
and pause, the queue's pause, a queued job's priority, removing a job and cleaning ended ones."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from quart import Response, g
from quart_trio import QuartTrio

from gpuplaned.http.jobs_routes import one_job
from gpuplaned.http.responses import ok
from gpuplaned.http.routes import Param, Reply, Routes
from gpuplaned.protocol.group_wire import (
    CleanBody,
    GroupBody,
    GroupList,
    GroupReply,
    PriorityBody,
    QueueState,
    Removed,
)
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.job_replies import JobReply
from gpuplaned.service.api import groups

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

api = Routes("jobs")
_GROUP = Param("name", "the group's name")
_JOB = Param("job_id", "the job's id (job_<ULID>)")
_PAUSE = ("pause", "resume")

GROUPS = api.get("/api/v1/groups", "listGroups", "Job groups, with their limit, pause and jobs counted",
                 Reply(200, GroupList, "Every group, by name, and whether the whole queue is paused."))
GROUP = api.get("/api/v1/groups/<name>", "getGroup", "One job group", Reply(200, GroupReply, "The group."),
                errors=(400, 404), params=(_GROUP,))
SET_GROUP = api.put("/api/v1/groups/<name>", "setGroup", "Make a job group, or change its parallel limit",
                    Reply(200, GroupReply, "The group."), errors=(400, 403), params=(_GROUP,), body=GroupBody,
                    description="At most `parallel` of the group's jobs run at once (null: no limit); the queued "
                                "ones wait with the reason \"group NAME: K of K running\". A job submitted with "
                                "`group` makes its group too, with no limit.")
PAUSE_GROUP = api.post("/api/v1/groups/<name>/<verb>", "pauseGroup", "Pause or resume a job group",
                       Reply(200, GroupReply, "The group."), errors=(400, 403, 404),
                       params=(_GROUP, Param("verb", "pause: none of its queued jobs starts (they wait with the "
                                                     "reason \"group NAME paused\"); its running jobs go on. resume: "
                                                     "they may start again",
                                             {"type": "string", "enum": list(_PAUSE)})))
QUEUE = api.get("/api/v1/queue", "getQueue", "Whether the whole queue is paused", Reply(200, QueueState, "It."))
PAUSE_QUEUE = api.post("/api/v1/queue/<verb>", "pauseQueue", "Pause or resume the whole queue",
                       Reply(200, QueueState, "The queue."), errors=(403, 404),
                       params=(Param("verb", "pause: no queued job starts (they wait with the reason \"queue "
                                             "paused\"); running jobs go on. The pause survives a daemon restart",
                                     {"type": "string", "enum": list(_PAUSE)}),))
PRIORITY = api.post("/api/v1/jobs/<job_id>/priority", "setJobPriority", "Change a queued job's priority",
                    Reply(200, JobReply, "The job, in its new place in the queue."), errors=(400, 403, 404, 409),
                    params=(_JOB,), body=PriorityBody,
                    description="409 for a job that is not QUEUED, naming its state.")
REMOVE = api.post("/api/v1/jobs/<job_id>/remove", "removeJob", "Remove a queued or ended job",
                    Reply(200, Removed, "What was removed."), errors=(403, 404, 409), params=(_JOB,),
                    description="Removes the job's row, its output in the store and its own folder in the daemon's "
                                "home (jobs/<id>/: its attempts' logs); its runs (metrics, checkpoints) stay, no "
                                "longer naming a job, and no file outside that folder is touched. 409 for a job on a "
                                "node (cancel it first) or one that jobs still waiting depend on (naming them).")
CLEAN = api.post("/api/v1/jobs:clean", "cleanJobs", "Remove ended jobs", Reply(200, Removed, "What was removed."),
                 errors=(400, 403), body=CleanBody, body_required=False,
                 description="Removes every ended job (of `group`; that ended `older_than_s` ago or more) as "
                             "POST /api/v1/jobs/{job_id}/remove does; one that jobs still waiting depend on is kept "
                             "(listed in `kept`).")


def register(app: QuartTrio, shared: ServerContext) -> None:
    @GROUPS.on(app)
    async def list_groups() -> Response:
        return ok(await groups.list_groups(shared))

    @GROUP.on(app)
    async def get_group(name: str) -> Response:
        return ok(GroupReply(group=await groups.get_group(shared, name)))

    @SET_GROUP.on(app)
    async def set_group(name: str, body: GroupBody) -> Response:
        return ok(GroupReply(group=await groups.set_group(shared, name, body.parallel, caller=_caller())))

    @PAUSE_GROUP.on(app)
    async def pause_group(name: str, verb: str) -> Response:
        return ok(GroupReply(group=await groups.pause_group(shared, name, _pausing(verb), caller=_caller())))

    @QUEUE.on(app)
    async def get_queue() -> Response:
        return ok(await groups.queue_state(shared))

    @PAUSE_QUEUE.on(app)
    async def pause_queue(verb: str) -> Response:
        return ok(await groups.pause_queue(shared, _pausing(verb), caller=_caller()))

    @PRIORITY.on(app)
    async def set_priority(job_id: str, body: PriorityBody) -> Response:
        return ok(one_job(await groups.set_priority(shared, job_id, body.priority, caller=_caller())))

    @REMOVE.on(app)
    async def remove_job(job_id: str) -> Response:
        return ok(await groups.remove(shared, job_id, caller=_caller()))

    @CLEAN.on(app)
    async def clean_jobs(body: CleanBody) -> Response:
        return ok(await groups.clean(shared, body, caller=_caller()))


def _caller() -> Any:
    return getattr(g, "caller", None)


def _pausing(verb: str) -> bool:
    if verb not in _PAUSE:
        raise ApiError(ErrorCode.NOT_FOUND, f"no such command {verb!r}: pause or resume", {"verb": verb})
    return verb == "pause"
