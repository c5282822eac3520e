"""Pure slot assignment: (queue, nodes) -> which jobs go where, on which GPUs, and why the
others wait.

Rules (seed 000 section 6.2, no preemption):
- The queue is taken in order: highest priority first, oldest first within a priority.
- A node is usable for new work while it is ONLINE, accepting (no low disk) and not drained
  (``gpuplanectl node drain``: its running jobs go on, it gets no new ones).
- Selectors: a job runs only on a node with every one of its labels, and on the node it
  names, if it names one.
- Constraints: ``gpu_model`` (a case-insensitive substring) and ``min_gpu_memory_mb`` hold
  for every GPU the job gets; a GPU whose model or memory is unknown meets neither.
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
- A job that waits because of what the nodes are, not because they are busy (no node has
  its labels or GPU model, every node that could run it is drained or offline) has a
  reason in words (``waiting_reason``), which the job shows while it is QUEUED.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from gpuplaned.protocol.vocabulary import PLACEMENTS as PLACEMENTS
from gpuplaned.protocol.vocabulary import PlacementMode

DEFAULT_PLACEMENT = PlacementMode.PACK.value


@attrs.frozen
class QueuedJob:
    job_id: str
    gpu: int
    labels: tuple[str, ...] = ()
    node: str | None = None
    gpu_model: str | None = None  # a substring of each GPU's model, any case
    min_gpu_memory_mb: int | None = None  # each GPU's total memory at least this
    placement: str | None = None  # pack | spread; None: the pass's default


@attrs.frozen
class GpuFacts:
    """What a node said of one of its GPUs in its hello; None: not known."""

    index: int
    model: str | None = None
    memory_mb: int | None = None


@attrs.frozen
class NodeCapacity:
    node_id: str
    name: str
    labels: tuple[str, ...]
    free_gpus: tuple[int, ...]
    total_gpus: int
    cpu_jobs: int
    max_cpu_jobs: int
    online: bool = True
    accepting: bool = True  # False while the node must not get new work (disk low, paused)
    drained: bool = False  # `node drain`: no new work until `node undrain`
    gpus: tuple[GpuFacts, ...] = ()  # every GPU's model and memory, free or not

    @property
    def usable(self) -> bool:
        return self.online and self.accepting and not self.drained


@attrs.frozen
class Assignment:
    job_id: str
    node_id: str
    gpu_indexes: tuple[int, ...]


@attrs.frozen
class Placement:
    """A pass's outcome: what is placed, and for each job it looked at but did not place,
    why it waits (None: only for capacity to free up)."""

    assignments: list[Assignment]
    waiting: dict[str, str | None]


def constrained(job: QueuedJob) -> bool:
    return job.gpu_model is not None or job.min_gpu_memory_mb is not None


def gpu_suits(job: QueuedJob, gpu: GpuFacts | None) -> bool:
    """Whether one GPU meets the job's constraints (every GPU does when it has none)."""
    if not constrained(job):
        return True
    if gpu is None:
        return False
    if job.gpu_model is not None and (gpu.model is None or job.gpu_model.casefold() not in gpu.model.casefold()):
        return False
    return job.min_gpu_memory_mb is None or (gpu.memory_mb is not None and gpu.memory_mb >= job.min_gpu_memory_mb)


def matches(job: QueuedJob, node: NodeCapacity) -> bool:
    """The selectors: the node named (if one is) and every label."""
    if job.node is not None and job.node != node.name:
        return False
    return set(job.labels) <= set(node.labels)


def suitable_total(job: QueuedJob, node: NodeCapacity) -> int:
    """How many of the node's GPUs, free or not, meet the job's constraints."""
    if not constrained(job):
        return node.total_gpus
    return sum(1 for gpu in node.gpus if gpu_suits(job, gpu))


def could_run(job: QueuedJob, node: NodeCapacity) -> bool:
    """Whether the node could run the job when idle (usable or not)."""
    if not matches(job, node):
        return False
    if job.gpu == 0:
        return node.max_cpu_jobs > 0
    return suitable_total(job, node) >= job.gpu


def can_ever_fit(job: QueuedJob, nodes: Iterable[NodeCapacity]) -> bool:
    """Whether some known node could run the job when idle (used to refuse at submit)."""
    return any(could_run(job, n) for n in nodes)


def describe_constraints(job: QueuedJob) -> str:
    """``whose model contains 'A100' and with at least 40960 MiB of memory`` ('' without any)."""
    parts = []
    if job.gpu_model is not None:
        parts.append(f"whose model contains {job.gpu_model!r}")
    if job.min_gpu_memory_mb is not None:
        parts.append(f"with at least {job.min_gpu_memory_mb} MiB of memory")
    return " and ".join(parts)


def waiting_reason(job: QueuedJob, nodes: Sequence[NodeCapacity]) -> str | None:
    """Why the job cannot be placed whatever frees up, in words naming the selector or
    constraint at fault; None when it only waits for capacity (or could be placed now)."""
    matching = [n for n in nodes if matches(job, n)]
    if not matching:
        if job.node is not None and not any(n.name == job.node for n in nodes):
            return f"no node named {job.node!r}"
        wanted = ", ".join(job.labels)
        return (f"node {job.node!r} lacks the label(s) {wanted}" if job.node is not None
                else f"no node has the label(s) {wanted}")
    runnable = [n for n in matching if could_run(job, n)]
    if not runnable:
        if job.gpu == 0:
            return "no matching node runs CPU jobs (max_cpu_jobs = 0)"
        if constrained(job):
            best = max(suitable_total(job, n) for n in matching)
            return (f"no node has {job.gpu} GPU(s) {describe_constraints(job)} "
                    f"(the most on one matching node: {best})")
        return f"the job asks for {job.gpu} GPU(s) but the largest matching node has " \
               f"{max(n.total_gpus for n in matching)}"
    if any(n.usable for n in runnable):
        return None
    drained = [n.name for n in runnable if n.drained]
    if len(drained) == len(runnable):
        return f"every node that could run it is drained: {', '.join(drained)}"
    away = [n.name for n in runnable if not n.usable]
    return f"every node that could run it is drained, offline or not accepting jobs: {', '.join(away)}"


def assign(queue: Iterable[QueuedJob], nodes: Iterable[NodeCapacity],
           placement: str = DEFAULT_PLACEMENT) -> list[Assignment]:
    return place(queue, nodes, placement).assignments


def place(queue: Iterable[QueuedJob], nodes: Iterable[NodeCapacity],
          placement: str = DEFAULT_PLACEMENT) -> Placement:
    """One pass over ``queue`` (read lazily: it stops once nothing is left to give).

    Args:
        placement: ``pack`` or ``spread``, for jobs that name none.
    """
    nodes = list(nodes)
    facts = {n.node_id: {g.index: g for g in n.gpus} for n in nodes}
    free = {n.node_id: sorted(n.free_gpus) for n in nodes}
    cpu = {n.node_id: n.cpu_jobs for n in nodes}
    usable = [n for n in nodes if n.usable]
    reserved: set[str] = set()
    out: list[Assignment] = []
    waiting: dict[str, str | None] = {}
    for job in queue:
        if not any(free[n.node_id] or cpu[n.node_id] < n.max_cpu_jobs for n in usable):
            break  # nothing left to give: the rest of the queue need not even be read
        how = job.placement or placement
        candidates = [n for n in usable if could_run(job, n)]
        if job.gpu == 0:
            roomy = [n for n in candidates if cpu[n.node_id] < n.max_cpu_jobs]
            if roomy:
                node = min(roomy, key=lambda n: (cpu[n.node_id], n.name)) if how == PlacementMode.SPREAD else roomy[0]
                cpu[node.node_id] += 1
                out.append(Assignment(job.job_id, node.node_id, ()))
            else:
                waiting[job.job_id] = None if candidates else waiting_reason(job, nodes)
            continue
        suitable = {n.node_id: [i for i in free[n.node_id] if gpu_suits(job, facts[n.node_id].get(i))]
                    for n in candidates if n.node_id not in reserved}
        fitting = [n for n in candidates if len(suitable.get(n.node_id, ())) >= job.gpu]
        if not fitting:
            reserved.update(n.node_id for n in candidates)
            waiting[job.job_id] = None if candidates else waiting_reason(job, nodes)  # None: it waits its turn
            continue
        if how == PlacementMode.SPREAD:
            node = min(fitting, key=lambda n: (-len(free[n.node_id]), n.name))
        else:
            node = min(fitting, key=lambda n: (len(free[n.node_id]), n.name))
        taken = tuple(suitable[node.node_id][: job.gpu])
        free[node.node_id] = [i for i in free[node.node_id] if i not in taken]
        out.append(Assignment(job.job_id, node.node_id, taken))
    return Placement(out, waiting)
