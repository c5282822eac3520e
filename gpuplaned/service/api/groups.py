"""Groups and queue control for the API (issue 31 item 2, pueue-style): a group's parallel limit
and pause, the whole queue's pause, a queued job's priority, and removing jobs (``job remove``,
``clean``).

Each change wakes the scheduler, whose next pass applies it (``gpuplaned.domain.groups``). A
token with limits may change the priority of, or remove, only the jobs it submitted, and may
not pause, resume, limit or clean for everyone (403 naming that).

Removing a job removes its rows (``gpuplaned.store.job_removal_rows`` says which) and its own
folders, ``jobs/<id>/`` (its attempts' stdout/stderr logs and records,
``gpuplaned.home.attempt_dir``) in the daemon's home and on each remote agent's node that ran it
(``gpuplaned.service.passes.folder_removal``; an agent away deletes its own when it is back), and
nothing else on disk: its working directory, checkpoints and TensorBoard files are the user's. A
folder stays when a checkpoint record of the job points inside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuplaned.domain.groups import name_problem
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.group_wire import CleanBody, GroupList, GroupView, QueueState, Removed
from gpuplaned.protocol.job_wire import Job
from gpuplaned.service import access
from gpuplaned.service.api import budgets
from gpuplaned.service.link.registry import now_ms
from gpuplaned.service.passes import folder_removal
from gpuplaned.service.passes.dispatch import change_queue
from gpuplaned.store import group_rows, job_removal_rows, job_rows
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.api.ui_sessions import Caller
    from gpuplaned.service.context import ServerContext


def _store(shared: ServerContext) -> Any:
    return access.store_port(shared, "jobs")


def _readers(shared: ServerContext) -> Any:
    return access.readers(shared, "jobs")


def _view(found: group_rows.GroupCounts) -> GroupView:
    g = found.group
    return GroupView(name=g.name, parallel=g.parallel, paused=g.paused, queued=found.queued, running=found.running)


def _checked_name(name: str) -> str:
    problem = name_problem(name)
    if problem is not None:
        raise ApiError(ErrorCode.BAD_REQUEST, f"group: {problem}", {"field": "group", "group": name})
    return name


def for_everyone(caller: Caller | None, what: str) -> None:
    """Refuse a token with limits what changes the queue for every caller."""
    if budgets.limited(caller):
        raise ApiError(ErrorCode.FORBIDDEN, f"a token with limits may not {what}: it changes the queue for "
                       "everyone", {"limit": "owner"})


async def list_groups(shared: ServerContext) -> GroupList:
    def read(conn: Any) -> GroupList:
        return GroupList(groups=[_view(g) for g in group_rows.list_groups(conn)],
                         queue_paused=group_rows.queue_paused(conn))
    return await _readers(shared).run(read)


async def get_group(shared: ServerContext, name: str) -> GroupView:
    return _view(await _readers(shared).run(lambda conn: group_rows.get_group(conn, _checked_name(name))))


async def set_group(shared: ServerContext, name: str, parallel: int | None, *, caller: Caller | None = None) -> GroupView:
    """Make the group, or change its parallel limit (None: none)."""
    for_everyone(caller, "change a group's limit")
    _checked_name(name)

    def apply(conn: Any) -> GroupView:
        group_rows.set_parallel(conn, name, parallel)
        return _view(group_rows.get_group(conn, name))

    return await change_queue(shared, apply, small=True)


async def pause_group(shared: ServerContext, name: str, paused: bool, *, caller: Caller | None = None) -> GroupView:
    for_everyone(caller, "pause or resume a group")
    _checked_name(name)

    def apply(conn: Any) -> GroupView:
        group_rows.set_group_paused(conn, name, paused)
        return _view(group_rows.get_group(conn, name))

    return await change_queue(shared, apply, small=True)


async def queue_state(shared: ServerContext) -> QueueState:
    return QueueState(paused=await _readers(shared).run(group_rows.queue_paused))


async def pause_queue(shared: ServerContext, paused: bool, *, caller: Caller | None = None) -> QueueState:
    for_everyone(caller, "pause or resume the queue")

    def apply(conn: Any) -> QueueState:
        group_rows.set_queue_paused(conn, paused)
        return QueueState(paused=paused)

    return await change_queue(shared, apply, small=True)


async def set_priority(shared: ServerContext, job_id: str, priority: int, *, caller: Caller | None = None) -> Job:
    """Change a queued job's priority (409 naming the state of one not queued)."""
    def apply(conn: Any) -> Job:
        budgets.check_owner(conn, caller, job_id, "change the priority of")
        group_rows.set_priority(conn, job_id, priority)
        job = job_rows.get_job(conn, job_id)
        assert job is not None
        return job

    return await change_queue(shared, apply, small=True)


async def remove(shared: ServerContext, job_id: str, *, caller: Caller | None = None) -> Removed:
    """Remove a queued or ended job, its rows and its folders (409 for a job on a node, or one that
    open jobs depend on, naming them)."""
    def apply(conn: Any) -> None:
        budgets.check_owner(conn, caller, job_id, "remove")
        job_removal_rows.remove_job(conn, job_id, now_ms())

    await change_queue(shared, apply, small=True)  # a removed queued job may have held a slot's turn
    folders = await folder_removal.run(shared)
    return Removed(removed=[job_id], files_removed=folders.removed, files_waiting_on=folders.waiting_on)


async def clean(shared: ServerContext, body: CleanBody, *, caller: Caller | None = None) -> Removed:
    """Remove the ended jobs (of a group; that ended long enough ago) as ``job remove`` does,
    keeping those that open jobs depend on."""
    for_everyone(caller, "clean jobs (use job remove on its own jobs)")
    now = now_ms()
    before = _ended_before(body, now)

    def apply(conn: Any) -> job_removal_rows.Cleaned:
        return job_removal_rows.clean(conn, group=body.group, ended_before_ms=before, now_ms=now)

    cleaned = await write(_store(shared), apply)
    folders = await folder_removal.run(shared)
    return Removed(removed=cleaned.removed, kept=cleaned.kept, files_removed=folders.removed,
                   files_waiting_on=folders.waiting_on)


async def clean_preview(shared: ServerContext, body: CleanBody, *, caller: Caller | None = None) -> Removed:
    """What ``clean`` would remove and keep (no files listed), changing nothing."""
    for_everyone(caller, "clean jobs (use job remove on its own jobs)")
    before = _ended_before(body, now_ms())
    found = await _readers(shared).run(
        lambda conn: job_removal_rows.cleanable(conn, group=body.group, ended_before_ms=before))
    return Removed(removed=found.removed, kept=found.kept)


def _ended_before(body: CleanBody, now: int) -> int | None:
    return None if body.older_than_s is None else now - int(body.older_than_s * 1000)
