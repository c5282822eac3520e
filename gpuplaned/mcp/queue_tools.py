"""The queue tools (issue 31 item 2, pueue-style): groups with their limit and pause, the whole
queue's pause, a queued job's priority, removing a job and cleaning ended ones. Each calls the
service function its REST route calls (``gpuplaned.service.api.groups``), with the caller, so a
token with limits meets the same refusals; with ``dry_run`` each says what would happen and
changes nothing."""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.mcp import args as a
from gpuplaned.mcp.table import Call, Result, Tool, next_action
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.group_wire import CleanBody, GroupList, GroupView
from gpuplaned.protocol.job_states import ENDED, OPEN, JobState
from gpuplaned.protocol.job_wire import Job
from gpuplaned.service.api import groups, jobs


DRY_RUN = {"dry_run": {"type": "boolean", "default": False, "description": "say what would happen and change nothing"}}


@attrs.frozen(kw_only=True)
class GroupOutcome:
    dry_run: bool = doc("true: nothing was changed")
    group: GroupView | None = doc("the group now (on a dry run: as it is; null when it does not exist yet)")
    would: str | None = doc("a dry run: what would happen, in words")


@attrs.frozen(kw_only=True)
class QueueOutcome:
    dry_run: bool = doc("true: nothing was changed")
    queue_paused: bool = doc("whether the whole queue is paused now")
    would: str | None = doc("a dry run: what would happen, in words")


@attrs.frozen(kw_only=True)
class PriorityOutcome:
    dry_run: bool = doc("true: nothing was changed")
    job: Job = doc("the job (on a dry run: as it is)")
    would: str | None = doc("a dry run: what would happen, in words")


@attrs.frozen(kw_only=True)
class RemovedOutcome:
    dry_run: bool = doc("true: nothing was changed")
    removed: list[str] = doc("the jobs removed (a dry run: that would be)")
    kept: list[str] = doc("ended jobs that matched but stay: jobs still waiting depend on them")
    files_removed: list[str] = doc("the folders removed: each job's own jobs/<id>/ (its logs); its runs, "
                                   "checkpoints and working directory stay")
    files_waiting_on: list[str] = doc("remote nodes whose agents are away: each deletes the folders there when "
                                      "it is back")
    would: str | None = doc("a dry run: what would happen, in words")


def _refused(what: str, error: ApiError) -> str:
    return f"{what} would be refused: {error.message}."


def _describe(g: GroupView) -> str:
    limit = f"{g.running} of {g.parallel} running" if g.parallel is not None else f"{g.running} running, no limit"
    return f"{g.name} ({limit}, {g.queued} queued{', paused' if g.paused else ''})"


async def _group_or_none(call: Call, name: str) -> GroupView | None:
    try:
        return await groups.get_group(call.shared, name)
    except ApiError as error:
        if error.code != ErrorCode.NOT_FOUND:
            raise
        return None


async def list_groups(call: Call, _: a.NoArgs) -> Result:
    found = await groups.list_groups(call.shared)
    words = "; ".join(_describe(g) for g in found.groups) or "none"
    queue = "paused" if found.queue_paused else "running"
    return Result(f"{len(found.groups)} group(s): {words}. The queue is {queue}.", found,
                  [next_action("list_jobs", "one group's jobs", group=g.name) for g in found.groups[:3]])


async def set_group_limit(call: Call, args: a.GroupLimitArgs) -> Result:
    limit = f"at most {args.parallel} at once" if args.parallel is not None else "no limit"
    if call.dry_run:
        now = await _group_or_none(call, args.group)
        try:
            groups.for_everyone(call.caller, "change a group's limit")
        except ApiError as error:
            return _would_group(now, _refused(f"setting group {args.group}'s limit", error))
        was = "is new" if now is None else f"now {now.parallel if now.parallel is not None else 'no limit'}"
        return _would_group(now, f"group {args.group} ({was}) would run {limit}.")
    group = await groups.set_group(call.shared, args.group, args.parallel, caller=call.caller)
    return Result(f"Group {_describe(group)}: {limit}.", GroupOutcome(dry_run=False, group=group, would=None),
                  [next_action("list_jobs", "its jobs", group=group.name)])


async def pause_group(call: Call, args: a.GroupPauseArgs) -> Result:
    verb = "paused" if args.paused else "resumed"
    if call.dry_run:
        now = await groups.get_group(call.shared, args.group)  # 404 naming an unknown group
        try:
            groups.for_everyone(call.caller, "pause or resume a group")
        except ApiError as error:
            return _would_group(now, _refused(f"group {args.group} {verb}", error))
        return _would_group(now, f"group {_describe(now)} would be {verb}"
                            + (" (its running jobs go on)." if args.paused else "."))
    group = await groups.pause_group(call.shared, args.group, args.paused, caller=call.caller)
    return Result(f"Group {_describe(group)} is {verb}.", GroupOutcome(dry_run=False, group=group, would=None),
                  [next_action("list_groups", "every group")])


def _would_group(group: GroupView | None, words: str) -> Result:
    return Result(f"Dry run, nothing changed: {words}", GroupOutcome(dry_run=True, group=group, would=words))


async def pause_queue(call: Call, args: a.QueuePauseArgs) -> Result:
    verb = "paused" if args.paused else "resumed"
    if call.dry_run:
        now = (await groups.queue_state(call.shared)).paused
        try:
            groups.for_everyone(call.caller, "pause or resume the queue")
            words = f"the queue (now {'paused' if now else 'running'}) would be {verb}."
        except ApiError as error:
            words = _refused(f"the queue {verb}", error)
        return Result(f"Dry run, nothing changed: {words}", QueueOutcome(dry_run=True, queue_paused=now, would=words))
    state = await groups.pause_queue(call.shared, args.paused, caller=call.caller)
    tail = " No queued job starts; running jobs go on." if state.paused else ""
    return Result(f"The queue is {verb}.{tail}", QueueOutcome(dry_run=False, queue_paused=state.paused, would=None))


async def set_job_priority(call: Call, args: a.PriorityArgs) -> Result:
    if call.dry_run:
        job = await jobs.get_job(call.shared, args.job_id)
        words = (f"job {job.id}'s priority would go from {job.priority} to {args.priority}."
                 if job.status == JobState.QUEUED else
                 f"job {job.id} is {job.status}, not QUEUED; changing its priority would be refused.")
        return Result(f"Dry run, nothing changed: {words}",
                      PriorityOutcome(dry_run=True, job=jobs.view_for(job, call.caller), would=words))
    job = await groups.set_priority(call.shared, args.job_id, args.priority, caller=call.caller)
    return Result(f"Job {job.id} ({job.name}) now has priority {job.priority}.",
                  PriorityOutcome(dry_run=False, job=jobs.view_for(job, call.caller), would=None),
                  [next_action("get_job", "its place and why it waits", job_id=job.id)])


def _removed(removed: Any, words: str) -> Result:
    return Result(words, RemovedOutcome(dry_run=False, removed=removed.removed, kept=removed.kept,
                                        files_removed=removed.files_removed,
                                        files_waiting_on=removed.files_waiting_on, would=None))


def _would_remove(removed: list[str], kept: list[str], words: str) -> Result:
    return Result(f"Dry run, nothing changed: {words}",
                  RemovedOutcome(dry_run=True, removed=removed, kept=kept, files_removed=[], files_waiting_on=[],
                                 would=words))


async def remove_job(call: Call, args: a.JobArgs) -> Result:
    if call.dry_run:
        job = await jobs.get_job(call.shared, args.job_id)
        waiting = [d.job_id for d in job.dependants if d.status in OPEN]
        if job.status != JobState.QUEUED and job.status not in ENDED:
            return _would_remove([], [], f"job {job.id} is {job.status}: removing it would be refused (cancel it "
                                         "first, then remove it once it has ended).")
        if waiting:
            return _would_remove([], [], f"removing job {job.id} would be refused: {', '.join(waiting)} depend on "
                                         "it (cancel or remove them first).")
        return _would_remove([job.id], [], f"job {job.id} ({job.status}) would be removed with its logs folder; its "
                                           "runs and checkpoints stay.")
    removed = await groups.remove(call.shared, args.job_id, caller=call.caller)
    return _removed(removed, f"Job {args.job_id} is removed ({len(removed.files_removed)} folder(s) deleted"
                             f"{_waiting(removed)}).")


async def clean_jobs(call: Call, body: CleanBody) -> Result:
    if call.dry_run:
        found = await groups.clean_preview(call.shared, body, caller=call.caller)
        kept = f"; {len(found.kept)} kept (waiting jobs depend on them)" if found.kept else ""
        return _would_remove(found.removed, found.kept, f"{len(found.removed)} ended job(s) would be removed{kept}.")
    cleaned = await groups.clean(call.shared, body, caller=call.caller)
    kept = f"; {len(cleaned.kept)} kept (waiting jobs depend on them)" if cleaned.kept else ""
    return _removed(cleaned, f"{len(cleaned.removed)} ended job(s) removed{kept}{_waiting(cleaned)}.")


def _waiting(removed: Any) -> str:
    away = removed.files_waiting_on
    return f"; the folders on {', '.join(away)} go when their agents are back" if away else ""


def clean_question(body: CleanBody) -> str:
    where = f" of group {body.group}" if body.group else ""
    when = f" that ended at least {body.older_than_s:g} s ago" if body.older_than_s is not None else ""
    return f"remove every ended job{where}{when}, with its logs"


TOOLS = [
    Tool(name="list_groups", title="List groups", description="Job groups with their parallel limit, pause, "
         "queued and running counts, and whether the whole queue is paused.", args=a.NoArgs, reply=GroupList,
         handler=list_groups),
    Tool(name="set_group_limit", title="Set group limit", description="Make a group or change how many of its "
         "jobs run at once (null: no limit).", args=a.GroupLimitArgs, reply=GroupOutcome, handler=set_group_limit,
         extra=DRY_RUN),
    Tool(name="pause_group", title="Pause group", description="Pause a group (paused: false resumes it): its "
         "queued jobs do not start; its running jobs go on.", args=a.GroupPauseArgs, reply=GroupOutcome,
         handler=pause_group, extra=DRY_RUN),
    Tool(name="pause_queue", title="Pause queue", description="Pause the whole queue (paused: false resumes "
         "it): no queued job starts; running jobs go on.", args=a.QueuePauseArgs, reply=QueueOutcome,
         handler=pause_queue, extra=DRY_RUN),
    Tool(name="set_job_priority", title="Set job priority", description="Change a QUEUED job's priority "
         "(higher runs first).", args=a.PriorityArgs, reply=PriorityOutcome, handler=set_job_priority,
         extra=DRY_RUN),
    Tool(name="remove_job", title="Remove job", description="Delete a queued or ended job and its logs (its runs "
         "and checkpoints stay); asks the user to confirm unless the token allows unattended use.", args=a.JobArgs,
         reply=RemovedOutcome, handler=remove_job, extra=DRY_RUN, by_hand="gpuplanectl job remove JOB"),
    Tool(name="clean_jobs", title="Clean jobs", description="Delete ended jobs (of a group; ended older_than_s ago) "
         "and their logs, but those waiting jobs depend on; asks the user to confirm unless the token allows "
         "unattended use.", args=CleanBody, reply=RemovedOutcome, handler=clean_jobs, extra=DRY_RUN,
         question=clean_question, by_hand="gpuplanectl clean"),
]
