"""Dispatch: waking its one owner, the scheduler actor, and the pieces of its pass.

Only the scheduler actor (``gpuplaned.actors.scheduler``) runs scheduling passes, on its
2 s tick and whenever it is woken. Whatever may have made work placeable (a submit, a
job's end, a node's hello, a snapshot that changes what a node accepts, a cancel of a
queued job, a retry) calls ``wake_scheduler`` after its own transaction has committed,
and the woken pass places the job: no service code runs a pass, and none reads the
scheduler's state. Stopping the scheduler actor (``gpuplanectl actor stop scheduler``, or one
gone FATAL) therefore pauses dispatching and nothing else. Every pass (``schedule``) runs
inside one store transaction, which the store serializes, so no slot is ever given twice: it
reads the rows (``gpuplaned.store.job_rows``), lets the queue decide
(``gpuplaned.domain.queue.place``) and records what it decided.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from gpuplaned.domain import gpu_free, queue
from gpuplaned.domain.groups import Holds
from gpuplaned.domain.scheduling import DEFAULT_PLACEMENT, NodeCapacity
from gpuplaned.protocol.agent import ArrayTask, Dispatch, JobSpecWire, JobStatus, NodeSnapshot
from gpuplaned.protocol.job_states import FailureReason
from gpuplaned.protocol.job_states import NodeReport
from gpuplaned.service import access
from gpuplaned.service.api import job_tokens
from gpuplaned.service.link.registry import NodeRegistry, NodeUnavailable, now_ms
from gpuplaned.service.sealing import KEY_FILE, unseal_env
from gpuplaned.store import group_rows, job_rows, sweep_rows
from gpuplaned.store.connection import Connection
from gpuplaned.store.writer import RequestPort, write

if TYPE_CHECKING:
    from gpuplaned.service.context import Actors, Dispatching, ServerContext

log = logging.getLogger("gpuplaned.scheduler")
T = TypeVar("T")


class _Wake:
    def __repr__(self) -> str:
        return "WAKE"


WAKE = _Wake()  # what ``wake_scheduler`` sends; any message on its inbox asks for a pass


def wake_scheduler(shared: Actors) -> None:
    """Ask the scheduler for a pass now; never blocks (a pending wake is as good as two)."""
    port = shared.supervisor.ports.get("scheduler")
    if port is None:
        return
    try:
        port.send_nowait(WAKE)
    except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
        pass


# The task steps from the store's commit of a pass to the job's spawn request on the launcher's
# pipe: the scheduler's delivery (into the runner's inbox), the runner's intake (which starts the
# attempt's task) and that task's first step (which writes the request).
DISPATCH_STEPS = 3


async def insert_and_place(shared: Actors, port: trio.MemorySendChannel[Any] | RequestPort,
                           insert: Callable[[Connection], T]) -> T:
    """Write a new job with ``insert`` and place it in the same transaction; ``insert``'s result.

    The scheduler is woken just before the insert is queued, so its pass is queued behind it
    (the store takes writes in order) and mostly shares its transaction: a job submitted to a
    free slot starts at once. Then the caller yields the event loop for the task steps that
    dispatch takes to reach the launcher: trio runs the tasks a commit wakes in either order, so
    the reply's own work (the job's view, JSON, Quart's and Hypercorn's send, ~1 ms of CPU) ran
    before the job's start half the time at each step. The yields are shielded: the write has
    committed, and its caller gets its result whatever happens meanwhile.
    """
    wake_scheduler(shared)
    done = await write(port, insert, small=True)
    for _ in range(DISPATCH_STEPS):
        await trio.lowlevel.cancel_shielded_checkpoint()
    return done


async def change_queue(shared: ServerContext, apply: Callable[[Connection], T], *, small: bool = False) -> T:
    """Write a change to what the queue holds (a job, a priority, a pause, a limit) in the store,
    then ask for the scheduling pass that acts on it; ``apply``'s result."""
    done = await write(access.store_port(shared, "jobs"), apply, small=small)
    wake_scheduler(shared)
    return done


SAY_AGAIN_S = 1.5  # while GPUs stay withheld, a pass reads the whole queue at most this often (the tick's)


def run_pass(nodes: NodeRegistry, conn: Connection, placement: str = DEFAULT_PLACEMENT,
             util_rule: gpu_free.UtilRule | None = None, *, at: float | None = None) -> list[job_rows.Dispatched]:
    """A scheduling pass inside the caller's (the scheduler's) store transaction: queued jobs
    to free slots of connected nodes, within what each node's latest readings allow.

    Args:
        placement: ``[scheduler] placement`` (``placement_of``), for jobs that name none.
        util_rule: ``[scheduler] max_free_util`` (``util_rule_of``); None: not judged.
        at: monotonic seconds now (None: ``time.monotonic()``).

    A pass with no slot left reads no further down the queue, unless which GPUs are withheld
    changed since the last full reading (each waiting job names the GPUs it waits for, or stops
    naming those freed), or GPUs stay withheld and ``SAY_AGAIN_S`` have passed (jobs queued since
    say it too, and a busy GPU's median is said anew): a pass while a GPU stays withheld costs no
    more than one without, and a median that moves rewrites no reasons more often than that.

    A job placed on a node whose jobs reach the HTTP front (a Slurm node's ``server_url``) gets its
    SDK token here, in the transaction that records its dispatch (``job_tokens``).
    """
    withheld = nodes.withheld(util_rule or gpu_free.UtilRule())
    said, said_at = nodes.withheld_said
    now = time.monotonic() if at is None else at
    full = _gpus_of(withheld) != _gpus_of(said) or (bool(withheld) and now - said_at >= SAY_AGAIN_S)
    wall = now_ms()
    dispatched = schedule(conn, wall, nodes.connected(), None, nodes.snapshots(), placement=placement,
                          withheld=withheld, recheck=full, read_on_withheld=False)
    if full:
        nodes.withheld_said = (withheld, now)
    return job_tokens.give_tokens(conn, dispatched, wall)


def _gpus_of(withheld: Mapping[str, Mapping[int, str]]) -> set[tuple[str, int]]:
    return {(node_id, index) for node_id, gpus in withheld.items() for index in gpus}


def schedule(conn: Connection, now_ms: int, connected: set[str], nodes: list[NodeCapacity] | None = None,
             health: Mapping[str, NodeSnapshot] | None = None, *,
             placement: str = DEFAULT_PLACEMENT, withheld: Mapping[str, Mapping[int, str]] | None = None,
             recheck: bool = False, read_on_withheld: bool = True) -> list[job_rows.Dispatched]:
    """Give queued jobs free slots on connected nodes, inside the caller's store transaction:
    each placed job becomes DISPATCHING (a new run each), and each job the pass looked at and
    left queued gets its ``queue_reason`` (written only when it changed).

    Args:
        nodes: every node's capacity; None: read now (``job_rows.capacities``), judged with
            ``connected`` (node ids) and ``health`` (node id -> its latest snapshot).
        placement: ``[scheduler] placement``, for jobs that name none.
        withheld: node id -> GPU index -> why it takes no new job (``NodeRegistry.withheld``);
            None: what ``health`` says.
        recheck, read_on_withheld: how far down the queue to read (``queue.place``'s).
    """
    if nodes is None:
        nodes = job_rows.capacities(conn, connected, health, withheld)
    holds = group_rows.holds(conn)
    settled = holds.settled(pooled_room=queue.pooled_room(nodes))
    queued = job_rows.queued_jobs(conn, settled=settled)  # a held sweep's trials that know it: not read
    try:
        plan = queue.place(queued, nodes, placement, holds, recheck=recheck,
                           read_on_withheld=read_on_withheld,
                           held_rest=lambda groups, sweeps, said: job_rows.queued_held(
                               conn, groups, sweeps, settled=settled, said=said))
    finally:
        queued.close()
    job_rows.set_queue_reasons(conn, plan.reasons)
    dispatched = [job_rows.record_dispatch(conn, decision, now_ms) for decision in plan.assignments]
    return as_array_tasks(conn, dispatched, nodes, holds)


def as_array_tasks(conn: Connection, dispatched: list[job_rows.Dispatched], nodes: list[NodeCapacity],
                   holds: Holds) -> list[job_rows.Dispatched]:
    """A sweep's trial placed on a pooled node goes as a task of its sweep's array there
    (``JobSpecWire.array``: its trial number, the sweep's max-parallel as the array's throttle)."""
    pooled = {n.node_id for n in nodes if n.pooled is not None}
    onto = [item.job.job_id for item in dispatched if item.node_id in pooled]
    trials = sweep_rows.trial_numbers(conn, onto) if onto else {}
    if not trials:
        return dispatched
    out = []
    for item in dispatched:
        found = trials.get(item.job.job_id) if item.node_id in pooled else None
        if found is not None:
            sweep_id, trial = found
            hold = holds.sweeps.get(sweep_id)
            throttle = hold.max_parallel or 0 if hold is not None else 0
            item = attrs.evolve(item, job=attrs.evolve(item.job, array=ArrayTask(sweep_id, trial, throttle)))
        out.append(item)
    return out


def util_rule_of(shared: object) -> gpu_free.UtilRule:
    """The daemon's ``[scheduler] max_free_util`` and ``free_util_samples`` (no config: not judged)."""
    config = getattr(shared, "config", None)
    if config is None:
        return gpu_free.UtilRule()
    return gpu_free.UtilRule(config.scheduler.max_free_util, config.scheduler.free_util_samples)


def placement_of(shared: object) -> str:
    """The daemon's ``[scheduler] placement`` (a context without a config: the default)."""
    config = getattr(shared, "config", None)
    return config.scheduler.placement if config is not None else DEFAULT_PLACEMENT


class SealBroken(Exception):
    """A dispatch's secret env cannot be opened (its key was replaced or lost)."""


def with_secret_env(shared: object, item: job_rows.Dispatched) -> JobSpecWire:
    """The dispatch's job spec with its secret env opened into its env, only here, in memory, on
    its way to the node: the node's launcher hands it to the job's process alone (its
    ``runtime.json`` lists names, never values), and no store row or log holds it open."""
    if item.secret_env_sealed is None:
        return item.job
    config = getattr(shared, "config", None)
    if config is None:  # a context with no home has no key: nothing was sealed under it
        raise SealBroken("its secret env cannot be opened: this daemon has no home, so no sealing key")
    from cryptography.fernet import InvalidToken  # imported where used, as gpuplaned.service.sealing does

    try:
        opened = unseal_env(config.home, item.secret_env_sealed)
    except (InvalidToken, OSError, ValueError) as exc:
        raise SealBroken(f"its secret env cannot be opened: {config.home / KEY_FILE} is not the key it was "
                         f"sealed with, or cannot be read ({type(exc).__name__}); submit it again") from None
    return attrs.evolve(item.job, env=item.job.env | opened)


async def deliver(shared: Dispatching, dispatched: list[job_rows.Dispatched]) -> int:
    """Send each dispatch to its node; a node that has gone away gets its job requeued.

    Not cancellable: the dispatches are committed, and one never sent would stay
    DISPATCHING, holding its slots, for as long as its node stays connected.

    Returns how many were delivered.
    """
    with trio.CancelScope(shield=True):
        return await _deliver(shared, dispatched)


async def _deliver(shared: Dispatching, dispatched: list[job_rows.Dispatched]) -> int:
    delivered = 0
    for item in dispatched:
        try:
            job = with_secret_env(shared, item)
        except SealBroken as broken:
            # One job's unreadable secret fails that job's attempt, not the scheduler.
            log.error("%s attempt %d: %s", item.job.job_id, item.job.attempt, broken)
            failed = JobStatus(item.job.job_id, item.job.attempt, NodeReport.FAILED,
                               failure_reason=FailureReason.SPAWN_FAILED.value, message=str(broken))
            await write(shared.supervisor.ports["store"],
                        lambda conn, s=failed, n=item.node_id: job_rows.apply_status(conn, n, s, now_ms()))
            continue
        try:
            await shared.nodes.send(item.node_id, Dispatch(job))
        except NodeUnavailable:
            log.warning("node %s is not connected; %s goes back to the queue", item.node_id, job.job_id)
            status = JobStatus(job.job_id, job.attempt, NodeReport.REQUEUE, message="node not connected")
            await write(shared.supervisor.ports["store"],
                        lambda conn, s=status, n=item.node_id: job_rows.apply_status(conn, n, s, now_ms()))
            continue
        delivered += 1
        log.info("dispatched %s attempt %d to %s (gpus %s)", job.job_id, job.attempt, item.node_id,
                 list(job.gpu_indexes) or (f"{job.gpus}, placed by its node" if job.gpus else "none"))
    return delivered
