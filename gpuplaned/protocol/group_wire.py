"""The wire of job groups and queue control (issue 31 item 2, pueue-style): a group's limit
and pause, the queue's pause, a queued job's priority, and removing ended jobs (``clean``)."""

from __future__ import annotations

import attrs

from gpuplaned.protocol.fields import doc, field

GROUP_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
GROUP_MESSAGE = "must be 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit"
MAX_PARALLEL = 10_000
MAX_PRIORITY = 1_000_000  # as a submit's (gpuplaned.protocol.job_wire.MAX_PRIORITY)


@attrs.frozen(kw_only=True)
class GroupView:
    name: str
    parallel: int | None = doc("at most this many of its jobs run at once; null: no limit")
    paused: bool = doc("no new job of it starts; its running jobs go on")
    queued: int = doc("its jobs waiting in the queue", minimum=0)
    running: int = doc("its jobs on a node (DISPATCHING, RUNNING, LOST)", minimum=0)


@attrs.frozen(kw_only=True)
class GroupList:
    groups: list[GroupView]
    queue_paused: bool = doc("the whole queue is paused (queue pause): no job starts")


@attrs.frozen(kw_only=True)
class GroupReply:
    group: GroupView


@attrs.frozen(kw_only=True)
class GroupBody:
    """``PUT /api/v1/groups/{name}``: make the group, or change its limit."""

    parallel: int | None = field(minimum=1, maximum=MAX_PARALLEL,
                                 description="at most this many of its jobs run at once; null: no limit")


@attrs.frozen(kw_only=True)
class QueueState:
    paused: bool = doc("no queued job starts; running jobs go on")


@attrs.frozen(kw_only=True)
class PriorityBody:
    priority: int = field(minimum=-MAX_PRIORITY, maximum=MAX_PRIORITY, description="higher runs first")


@attrs.frozen(kw_only=True)
class CleanBody:
    """``POST /api/v1/jobs:clean``: which ended jobs to remove."""

    group: str | None = field(default=None, pattern=GROUP_PATTERN, message=GROUP_MESSAGE,
                              description="only this group's jobs")
    older_than_s: float | None = field(default=None, minimum=0, maximum=10 * 365 * 86400,
                                       description="only jobs that ended at least this many seconds ago")


@attrs.frozen(kw_only=True)
class Removed:
    removed: list[str] = doc("the ids of the jobs removed")
    kept: list[str] = doc("ended jobs that matched but were kept: jobs still waiting depend on them",
                          factory=list)
    files_removed: list[str] = doc("the folders removed: each job's own folder (jobs/<id>/: its attempts' logs "
                                   "and records) in the daemon's home, and as node:path on the remote agents' "
                                   "nodes that ran it", factory=list)
    files_waiting_on: list[str] = doc("the remote nodes whose agents are away: each deletes the jobs' folders "
                                      "there when it is back", factory=list)

