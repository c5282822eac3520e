"""The queue's decisions, pure: its order, admission at submit, and each scheduling pass
(which queued jobs get which free slots, and why each other one waits).

No SQL and no trio. The store reads the rows these decide on and writes what they decide
(``gpuplaned.store.job_rows``: the queue read in ``ORDER``, each node's free slots, a
placement recorded with its slots booked); the scheduler joins the three inside one store
transaction (``gpuplaned.service.passes.dispatch.schedule``), so a slot is never booked twice.
How one job fits one node (selectors, GPU constraints, why no node can ever run it) is
``gpuplaned.domain.scheduling``'s.

Rules (seed 000 section 6.2, no preemption):
- The queue is taken in ``ORDER``: highest priority first, oldest first within a priority,
  then by id (jobs submitted in the same millisecond).
- A node is usable for new work while it is ONLINE, accepting (no low disk) and not drained
  (``gpuplanectl node drain``: its running jobs go on, it gets no new ones).
- A GPU job needs ``gpu`` free GPUs that meet its constraints on one usable node that
  matches its selectors. Placement among the nodes that fit (the job's own, else the
  pass's default from ``[scheduler] placement``):
  - ``pack`` (default): the node with the fewest free GPUs (best fit keeps whole machines
    free for big jobs);
  - ``spread``: the node with the most free GPUs (jobs share no machine while they need not).
  Ties go to the node whose name sorts first; the lowest suitable GPU indexes are taken.
- A GPU job that some usable node could run when idle, but none can now, *reserves* those
  nodes: no later (lower in the queue) GPU job is placed on them in this pass, so a 4-GPU
  job is not starved by a stream of 1-GPU jobs. A job no node could ever run reserves
  nothing (it would block its nodes for good).
- A CPU job (``gpu == 0``) takes no GPU and is bounded by the node's ``max_cpu_jobs``;
  ``pack`` takes the first node (by name) with room, ``spread`` the one running fewest.
- A pooled node (Slurm) books no GPU: a job that fits it (``scheduling.could_run``) takes one
  of its ``max_jobs`` job slots, GPU and CPU jobs alike, and Slurm places the GPUs (a foreign
  Slurm job holding them makes ours wait in Slurm: GPUPlane hands over up to ``max_jobs`` and
  lets Slurm queue). A job goes to a local node when one fits now (it starts there at once),
  else to a pooled node: ``pack`` the one with the fewest free job slots, ``spread`` the most.
  A job waiting for GPUs reserves local nodes only: a pooled node is Slurm's to order.
- Before a job gets slots, its group and the queue's pause may hold it back
  (``gpuplaned.domain.groups``: "queue paused", "group train paused", "group train: 2 of 2
  running"); a held job books nothing and reserves no node.
- A sweep's max-parallel holds its trials back from local nodes only: a trial held by nothing
  but that limit still takes a pooled node's free job slot, so one pass hands a pooled node all
  of a sweep's queued trials its ``max_jobs`` allows. The node runs them as one Slurm array whose
  throttle (``%K``) is the sweep's max-parallel (issue 32 item 4).
- A job the pass looks at and leaves queued waits either for capacity (no reason) or
  because of what the nodes are (``scheduling.waiting_reason``, which the job shows while
  QUEUED). Admission refuses at submit a job that no known node could run even when idle.
- A GPU no GPUPlane job holds may still take no new job (``gpuplaned.domain.gpu_free``: a
  foreign process on it, lost, too busy under ``[scheduler] max_free_util``). A job that would
  fit now were those GPUs free, or that can never fit without them, waits naming the first of
  them and how many more ("GPU 1: foreign process 4 GiB (pid 123); 1 more GPU not free"; with
  several nodes, "GPU 1 on box2: ..."). When what is withheld changes (``recheck``), a pass
  with no slot left reads on, so every waiting job's reason says it, and stops saying it once it
  is gone.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from gpuplaned.domain.gpu_free import said, summary
from gpuplaned.domain.groups import QUEUE_PAUSED, GroupGate, Holds
from gpuplaned.domain.scheduling import (
    DEFAULT_PLACEMENT,
    Assignment,
    NodeCapacity,
    QueuedJob,
    can_ever_fit,
    could_run,
    gpu_suits,
    largest_matching,
    matches,
    most_one_job_gets,
    suitable_total,
    waiting_reason,
)
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.protocol.vocabulary import PlacementMode

# --- the order ---------------------------------------------------------------


@attrs.frozen
class SortKey:
    field: str  # a QueuedJob field
    descending: bool = False  # only for numbers


ORDER = (SortKey("priority", descending=True), SortKey("submitted_at"), SortKey("job_id"))
"""The queue's one order. The store reads the queue in it (``job_rows.queued_jobs`` builds its
``ORDER BY`` from it), and the dry run puts a new job in its place by it."""


def order_key(job: QueuedJob) -> tuple[Any, ...]:
    """``job``'s place in ``ORDER`` as a sort key (``sorted(jobs, key=order_key)``)."""
    return tuple(-getattr(job, k.field) if k.descending else getattr(job, k.field) for k in ORDER)


def _ahead_of_newcomer(job: QueuedJob, newcomer: QueuedJob) -> bool:
    for key in ORDER:
        mine, theirs = getattr(job, key.field), getattr(newcomer, key.field)
        if mine != theirs:
            return mine > theirs if key.descending else mine < theirs
    return True


def in_line(queued: Sequence[QueuedJob], newcomer: QueuedJob) -> tuple[list[QueuedJob], int]:
    """The queue (``queued``, in ``ORDER``) with ``newcomer`` in its place, and that place (1:
    first). A newcomer loses every tie: it is the last submitted, so it goes behind every
    queued job of its priority or higher."""
    ahead = sum(1 for job in queued if _ahead_of_newcomer(job, newcomer))
    line = list(queued)
    line.insert(ahead, newcomer)
    return line, ahead + 1


# --- admission ---------------------------------------------------------------


def as_queued(spec: JobSpec, job_id: str, submitted_at: int = 0) -> QueuedJob:
    """The job as the queue sees it (the dry run places one under a made-up id)."""
    return QueuedJob(job_id, spec.gpu, spec.labels, spec.node, spec.gpu_model, spec.min_gpu_memory_mb,
                     spec.placement, spec.priority, submitted_at)


def refusal(job: QueuedJob, nodes: Sequence[NodeCapacity]) -> ApiError | None:
    """Why no known node could ever run the job, as submit's ``bad_request``; None: some could.

    Selectors and the GPU count only: a GPU constraint (model, memory) that no node meets
    queues the job with a reason instead, since a node that meets it may say hello later.
    """
    wanted = attrs.evolve(job, gpu_model=None, min_gpu_memory_mb=None)
    if job.node is not None and not any(n.name == job.node for n in nodes):
        return ApiError(ErrorCode.BAD_REQUEST, f"node: no node named {job.node!r}",
                        {"field": "node", "nodes": [n.name for n in nodes]})
    if can_ever_fit(wanted, nodes):
        return None
    matching = [n for n in nodes if matches(wanted, n)]
    biggest = max((most_one_job_gets(n) for n in matching), default=0)
    return ApiError(
        ErrorCode.BAD_REQUEST,
        f"gpu: the job asks for {job.gpu} GPU(s) but {largest_matching(matching)}"
        if job.gpu else "no matching node runs CPU jobs",
        {"field": "gpu", "requested": job.gpu, "largest_matching_node": biggest},
    )


def admit(job: QueuedJob, nodes: Sequence[NodeCapacity]) -> str | None:
    """Admit a new job to the queue: the reason it waits from the start (None: none but capacity).

    Raises:
        ApiError: ``refusal``'s, for a job no known node could ever run.
    """
    refused = refusal(job, nodes)
    if refused is not None:
        raise refused
    return waiting_reason(job, nodes)


# --- a scheduling pass -------------------------------------------------------


@attrs.frozen
class Placement:
    """A pass's outcome.

    Attributes:
        assignments: what is placed where, in queue order.
        waiting: for each job the pass looked at and left queued, why it waits (None: only
            for capacity to free up).
        reasons: the queue reasons to write, each job's whose reason differs from the one
            its row holds (``QueuedJob.stored_reason``); a placed job's is cleared.
    """

    assignments: list[Assignment]
    waiting: dict[str, str | None]
    reasons: dict[str, str | None] = attrs.field(factory=dict)


class _FreeSlots:
    """What a pass has left to give: each node's free GPUs and CPU slots, each pooled node's
    free job slots, and the (local) nodes reserved by a GPU job that waits for them."""

    __slots__ = ("cpu", "facts", "gpus", "job_slots", "nodes", "reserved", "usable", "withheld")

    def __init__(self, nodes: Sequence[NodeCapacity]) -> None:
        self.nodes = nodes
        self.usable = [n for n in nodes if n.usable]
        # Each usable pooled node's free job slots (a local node is not in it).
        self.job_slots = {n.node_id: n.free_job_slots for n in self.usable if n.pooled is not None}
        self.facts = {n.node_id: {g.index: g for g in n.gpus} for n in nodes}
        self.gpus = {n.node_id: sorted(n.free_gpus) for n in nodes}
        self.cpu = {n.node_id: n.cpu_jobs for n in nodes}
        self.reserved: set[str] = set()
        self.withheld = {n.node_id: n.withheld for n in nodes if n.withheld}

    def exhausted(self) -> bool:
        gpus, cpu = self.gpus, self.cpu  # locals: this runs once per job read
        if any(gpus[n.node_id] or cpu[n.node_id] < n.max_cpu_jobs for n in self.usable):
            return False
        return not any(self.job_slots.values())  # a pooled node's free job slot

    def take(self, job: QueuedJob, how: str) -> Assignment | str | None:
        """Book the job's slots: its assignment, or why it waits (None: for capacity)."""
        candidates = [n for n in self.usable if could_run(job, n)]
        if not candidates:
            return waiting_reason(job, self.nodes)
        local = [n for n in candidates if n.pooled is None]
        outcome = self._cpu(job, how, local) if job.gpu == 0 else self._gpus(job, how, local)
        if outcome is None or isinstance(outcome, str):  # no local node has room now: a pooled one may
            handed = self._pooled(job, how, [n for n in candidates if n.pooled is not None])
            if handed is not None:
                return handed
            if job.gpu:
                self.reserved.update(n.node_id for n in local)
        return outcome

    def pooled_only(self, job: QueuedJob, how: str) -> Assignment | None:
        """A pooled node's job slot for a job no local node may take (a trial past its sweep's
        max-parallel: Slurm's array throttle holds it there)."""
        if not self.job_slots:
            return None
        return self._pooled(job, how, [n for n in self.usable if n.pooled is not None and could_run(job, n)])

    def _pooled(self, job: QueuedJob, how: str, candidates: list[NodeCapacity]) -> Assignment | None:
        """One of a pooled node's job slots (Slurm places the GPUs: none is booked here)."""
        free = self.job_slots
        roomy = [n for n in candidates if free[n.node_id] > 0]
        if not roomy:
            return None
        sign = -1 if how == PlacementMode.SPREAD else 1
        node = min(roomy, key=lambda n: (sign * free[n.node_id], n.name))
        free[node.node_id] -= 1
        return Assignment(job.job_id, node.node_id, ())

    def _cpu(self, job: QueuedJob, how: str, candidates: list[NodeCapacity]) -> Assignment | None:
        roomy = [n for n in candidates if self.cpu[n.node_id] < n.max_cpu_jobs]
        if not roomy:
            return None
        node = min(roomy, key=lambda n: (self.cpu[n.node_id], n.name)) if how == PlacementMode.SPREAD else roomy[0]
        self.cpu[node.node_id] += 1
        return Assignment(job.job_id, node.node_id, ())

    def _gpus(self, job: QueuedJob, how: str, candidates: list[NodeCapacity]) -> Assignment | str | None:
        """Free GPUs on a local node (reserving the candidates when none fits is ``take``'s: a
        pooled node may take the job instead)."""
        gpus, facts, reserved = self.gpus, self.facts, self.reserved
        suitable = {n.node_id: [i for i in gpus[n.node_id] if gpu_suits(job, facts[n.node_id].get(i))]
                    for n in candidates if n.node_id not in reserved}
        fitting = [n for n in candidates if len(suitable.get(n.node_id, ())) >= job.gpu]
        if not fitting:
            return self._withheld_from(job, candidates, suitable) if self.withheld else None
        sign = -1 if how == PlacementMode.SPREAD else 1
        node = min(fitting, key=lambda n: (sign * len(gpus[n.node_id]), n.name))
        taken = tuple(suitable[node.node_id][: job.gpu])
        gpus[node.node_id] = [i for i in gpus[node.node_id] if i not in taken]
        return Assignment(job.job_id, node.node_id, taken)

    def _withheld_from(self, job: QueuedJob, candidates: list[NodeCapacity],
                       suitable: dict[str, list[int]]) -> str | None:
        """Why a GPU job that fits no node now waits, when GPUs no job of ours holds are what it
        lacks on some node: free with them, it would fit there now, or without them it could
        not fit there even once our jobs end (a node a job ahead reserved too, since that job
        waits for the same GPUs). The first such GPU, and how many more; None: it waits for our
        own jobs' GPUs."""
        named = len(self.nodes) > 1
        reasons = []
        for n in candidates:
            facts = self.facts[n.node_id]
            free = suitable.get(n.node_id)
            if free is None:  # reserved: its free GPUs were not looked at
                free = [i for i in self.gpus[n.node_id] if gpu_suits(job, facts.get(i))]
            lacking = [(i, why) for i, why in self.withheld.get(n.node_id, ()) if gpu_suits(job, facts.get(i))]
            if not lacking or len(free) >= job.gpu:
                continue
            if len(free) + len(lacking) >= job.gpu or suitable_total(job, n) - len(lacking) < job.gpu:
                reasons += [said(n.name if named else "", i, why) for i, why in lacking]
        return summary(reasons)


HeldRest = Callable[[frozenset[str], frozenset[str], Mapping[str, str]], Iterable[QueuedJob]]


def place(queue: Iterable[QueuedJob], nodes: Iterable[NodeCapacity],
          placement: str = DEFAULT_PLACEMENT, holds: Holds | None = None, *, recheck: bool = False,
          read_on_withheld: bool = True, held_rest: HeldRest | None = None) -> Placement:
    """One pass over ``queue`` (in ``ORDER``; read lazily: it stops once nothing is left to give,
    unless groups or the queue's pause have reasons to write).

    Args:
        placement: ``pack`` or ``spread``, for jobs that name none.
        holds: the queue's pause and the groups' limits (None: nothing holds a job back).
        recheck: read the whole queue even with no slot left, so that each job's reason is
            said again (the scheduler asks for it when what is withheld changed: jobs further
            down the queue may name a GPU that is free now, or none for one that is not).
        read_on_withheld: while a GPU is withheld, read the whole queue (the dry run, which
            must reach its job); False: only on ``recheck``.
        held_rest: ``held_rest(groups, sweeps, said)``: of the rest of ``queue`` (the same
            read, within its limit, in any order; jobs already seen are skipped), at least the
            jobs of those groups or sweeps (by id) and those with a hold as their stored reason,
            but for the trials of a sweep in ``said`` (sweep id -> the reason each of its
            trials gets now) that show that reason already.
            Once no slot is left and the queue is not paused, nothing is placed any more, so
            only those jobs can have a reason to say or to drop: the pass reads them alone
            instead of reading on through ``queue`` (a sweep's limit that does not bind, an
            idle group, cost a pass no read of the whole queue); ``waiting`` then names only
            the jobs read. None: read on through ``queue``.
    """
    slots = _FreeSlots(list(nodes))
    # Withheld GPUs: a pass with no slot left still looks at each job (one fit per kind of
    # job), to say which of them it waits for.
    gpus_said = recheck or (read_on_withheld and bool(slots.withheld))
    gate = GroupGate(holds)
    # With groups or a paused queue, a pass with no slot left still reads on, to say why each
    # held job waits (a cheap look per job, no fit).
    read_on = gate.holds.queue_paused or bool(gate.holds.groups) or bool(gate.holds.sweeps)
    out: list[Assignment] = []
    waiting: dict[str, str | None] = {}
    reasons: dict[str, str | None] = {}
    # A job that asks for what an earlier job of this pass waits for waits too, for the same
    # reason: what a pass has left only shrinks. So a long queue of alike jobs (a sweep's
    # trials) costs one fit per kind, not one per job.
    waits_alike: dict[tuple[Any, ...], str | None] = {}
    # With ``held_rest``, once no slot is left the rest of the queue is read from it instead.
    seen: set[str] | None = set() if held_rest is not None and read_on and not gate.holds.queue_paused else None
    rest: Iterable[QueuedJob] = ()
    for job in queue:
        if seen is not None:
            if held_rest is not None and not gpus_said and slots.exhausted():
                rest = itertools.chain((job,), held_rest(*gate.holding()))
                break
            seen.add(job.job_id)
        held = gate.held(job.group, job.sweep)
        if held is None and not gpus_said and slots.exhausted():
            if not read_on:
                break  # nothing left to give: the rest of the queue need not even be read
            if job.stored_reason is not None and is_hold(job.stored_reason):
                reasons[job.job_id] = None  # no longer held: it waits for capacity now
            continue
        needs = (job.gpu, job.labels, job.node, job.gpu_model, job.min_gpu_memory_mb)
        if held is not None:
            outcome: Assignment | str | None = held
            if job.sweep is not None and gate.held(job.group, job.sweep, sweep_limit=False) is None:
                outcome = slots.pooled_only(job, job.placement or placement) or held
        elif needs in waits_alike:
            outcome = waits_alike[needs]
        else:
            outcome = slots.take(job, job.placement or placement)
            if not isinstance(outcome, Assignment):
                waits_alike[needs] = outcome
        if isinstance(outcome, Assignment):
            out.append(outcome)
            gate.count(job.group, job.sweep)
            reason = None
        else:
            reason = waiting[job.job_id] = outcome
        if reason != job.stored_reason:
            reasons[job.job_id] = reason
    for job in rest:  # no slot left: what the loop above does to a job then, for the jobs a hold concerns
        if seen is None or job.job_id in seen:
            continue
        seen.add(job.job_id)
        held = gate.held(job.group, job.sweep)
        if held is None:
            if job.stored_reason is not None and is_hold(job.stored_reason):
                reasons[job.job_id] = None
            continue
        waiting[job.job_id] = held
        if held != job.stored_reason:
            reasons[job.job_id] = held
    return Placement(out, waiting, reasons)


def pooled_room(nodes: Iterable[NodeCapacity]) -> bool:
    """Whether a usable pooled node has a free job slot (a sweep's limit does not hold its trials
    back from it: ``groups.Holds.settled``)."""
    return any(n.usable and n.pooled is not None and n.free_job_slots > 0 for n in nodes)


def is_hold(reason: str) -> bool:
    """Whether ``reason`` is one a group, a sweep or the queue's pause gives (``gpuplaned.domain.groups``)."""
    return reason == QUEUE_PAUSED or reason.startswith(("group ", "sweep "))


def assign(queue: Iterable[QueuedJob], nodes: Iterable[NodeCapacity],
           placement: str = DEFAULT_PLACEMENT) -> list[Assignment]:
    return place(queue, nodes, placement).assignments
