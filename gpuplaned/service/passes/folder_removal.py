"""Deleting removed jobs' folders where they lie (``job remove``, ``clean``; issue 31 item 2).

The removal's transaction records what is to delete (``gpuplaned.store.folder_removal_rows``);
this pass does it and forgets each row once its host has: this daemon's own home on a worker
thread, a remote agent's node by asking its agent (``JobFoldersRemove``, answered by the same
``gpuplaned.job_folders.remove``). An agent away now is asked when it next says hello
(``agent_link``), and what a crash interrupted here is done at the next start (``daemon``).
So no folder outlives its job for long, and none is deleted twice by mistake: a folder already
gone is simply not there.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import attrs
import trio

from gpuplaned import job_folders
from gpuplaned.protocol.errors import ApiError
from gpuplaned.protocol.job_folder_ops import MAX_JOBS, JobFoldersRemoval, JobFoldersRemove
from gpuplaned.service import access
from gpuplaned.service.link.registry import NodeUnavailable
from gpuplaned.store import folder_removal_rows, uplink_rows
from gpuplaned.store.folder_removal_rows import HERE, Pending
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger(__name__)

REMOVE_TIMEOUT_S = 120.0


@attrs.frozen
class Outcome:
    removed: list[str] = attrs.field(factory=list)  # the folders deleted: a path here, "node:path" on an agent's node
    waiting_on: list[str] = attrs.field(factory=list)  # the agents' nodes (names) that will delete theirs once back


async def run(shared: ServerContext, nodes: set[str] | None = None) -> Outcome:
    """Delete what is pending here and on the connected agents' nodes (only ``nodes``' when given;
    HERE names this daemon's home)."""
    away: set[str] = set()  # hosts that could not do it in this call

    def read(conn: Any) -> tuple[list[Pending], dict[str, str]]:
        hosts = [n for n in folder_removal_rows.nodes_with_pending(conn)
                 if (nodes is None or n in nodes) and n not in away]
        names = {n: _name(conn, n) for n in hosts if n != HERE}
        return folder_removal_rows.pending(conn, hosts, MAX_JOBS), names

    outcome = Outcome()
    more = True
    while more:  # a host's pending rows come MAX_JOBS at a time
        batches, names = await access.readers(shared, "jobs").run(read)
        more = False
        for batch in batches:
            if not await _remove(shared, batch, names.get(batch.node_id, batch.node_id), outcome):
                away.add(batch.node_id)
                continue
            await write(access.store_port(shared, "jobs"),
                        lambda conn, b=batch: folder_removal_rows.done(conn, b.node_id, b.job_ids), small=True)
            more = more or len(batch.job_ids) == MAX_JOBS
    return outcome


def _name(conn: Any, node_id: str) -> str:
    """The node's name, or its id once it is forgotten."""
    found = uplink_rows.by_id(conn, node_id)
    return found[0] if found is not None else node_id


async def _remove(shared: ServerContext, batch: Pending, name: str, outcome: Outcome) -> bool:
    """Delete one host's batch; False when its agent could not do it now."""
    ask = JobFoldersRemove(batch.job_ids, batch.keep)
    if batch.node_id == HERE:
        config = getattr(shared, "config", None)
        if config is None:  # a context without a home has no job folders
            return True
        removal = await trio.to_thread.run_sync(job_folders.remove, config.jobs_home, ask)  # rmtree: off the loop
        outcome.removed.extend(removal.removed)
        return True
    try:
        removal = await shared.nodes.request(batch.node_id, ask, REMOVE_TIMEOUT_S)
    except NodeUnavailable:
        outcome.waiting_on.append(name)
        return False
    except ApiError as error:
        log.warning("node %s: removing %d job folders failed: %s; asked again at its next hello",
                    name, len(batch.job_ids), error.message)
        outcome.waiting_on.append(name)
        return False
    if not isinstance(removal, JobFoldersRemoval):
        outcome.waiting_on.append(name)
        return False
    outcome.removed.extend(f"{name}:{path}" for path in removal.removed)
    return True
