"""How one queued job fits the nodes, pure: its selectors, its GPU constraints, whether a
node could run it when idle and, when none can whatever frees up, why in words. The pass
over the whole queue (its order, placement, reservations) is ``gpuplaned.domain.queue``'s.

Rules (seed 000 section 6.2):
- Selectors: a job runs only on a node with every one of its labels, and on the node it
  names, if it names one.
- Constraints: ``gpu_model`` (a case-insensitive substring) and ``min_gpu_memory_mb`` hold
  for every GPU the job gets; a GPU whose model or memory is unknown meets neither.
- A node could run a GPU job when it has ``gpu`` GPUs, free or not, that meet its
  constraints; a CPU job (``gpu == 0``) when its ``max_cpu_jobs`` is above 0.
- A pooled node (``NodeCapacity.pooled``: Slurm places its GPUs) could run a job that asks
  for at most its ``gpus_per_job`` GPUs and names no GPU model or memory (it does not know
  its GPUs), CPU jobs too; what it holds at once is bounded by its ``max_jobs``.
- A job that waits because of what the nodes are, not because they are busy (no node has
  its labels or GPU model, every node that could run it is drained or offline) has a
  reason in words (``waiting_reason``), which the job shows while it is QUEUED.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from gpuplaned.protocol.agent import PooledCapacity
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
    priority: int = 0  # higher first (``gpuplaned.domain.queue.ORDER``)
    submitted_at: int = 0  # ms; older first within a priority
    stored_reason: str | None = None  # the queue reason its row holds (what the last pass said)
    group: str | None = None  # its group (submit --group); None: the default group
    sweep: str | None = None  # its sweep's id (a sweep's trial); None: none


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
    # GPUs no GPUPlane job holds that take no new job for now, and why (``gpuplaned.domain.gpu_free``:
    # "foreign process 4 GiB (pid 123)"); not among ``free_gpus``.
    withheld: tuple[tuple[int, str], ...] = ()
    # A pooled node (Slurm places its GPUs): what one job may ask of it and how many of our jobs it
    # holds at once; it has no GPU slots. None: a local node, whose GPUs are its slots.
    pooled: PooledCapacity | None = None
    jobs_in_flight: int = 0  # a pooled node's DISPATCHING and RUNNING jobs, CPU jobs too

    @property
    def usable(self) -> bool:
        return self.online and self.accepting and not self.drained

    @property
    def free_job_slots(self) -> int:
        """How many more of our jobs a pooled node takes now (0 for a local node)."""
        return max(0, self.pooled.max_jobs - self.jobs_in_flight) if self.pooled is not None else 0


@attrs.frozen
class Assignment:
    job_id: str
    node_id: str
    gpu_indexes: tuple[int, ...]


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


def most_one_job_gets(node: NodeCapacity) -> int:
    """The most GPUs one job may have on the node: all its GPUs, or a pooled node's gpus_per_job."""
    return node.pooled.gpus_per_job if node.pooled is not None else node.total_gpus


def suitable_total(job: QueuedJob, node: NodeCapacity) -> int:
    """How many of the node's GPUs, free or not, meet the job's constraints."""
    if not constrained(job):
        return node.total_gpus
    return sum(1 for gpu in node.gpus if gpu_suits(job, gpu))


def could_run(job: QueuedJob, node: NodeCapacity) -> bool:
    """Whether the node could run the job when idle (usable or not)."""
    if not matches(job, node):
        return False
    if node.pooled is not None:  # a CPU job counts against its max_jobs, which is at least 1
        return job.gpu == 0 or (job.gpu <= node.pooled.gpus_per_job and not constrained(job))
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
            return _unmet_constraints(job, matching)
        return f"the job asks for {job.gpu} GPU(s) but {largest_matching(matching)}"
    if any(n.usable for n in runnable):
        return None
    drained = [n.name for n in runnable if n.drained]
    if len(drained) == len(runnable):
        return f"every node that could run it is drained: {', '.join(drained)}"
    away = [n.name for n in runnable if not n.usable]
    return f"every node that could run it is drained, offline or not accepting jobs: {', '.join(away)}"



def largest_matching(matching: Sequence[NodeCapacity]) -> str:
    """``the largest matching node has 2`` (or ``pooled node 'hpc' takes at most 4 GPU(s) a job``
    where a pooled node's bound is the largest): the most GPUs one job could get on them."""
    best = max(matching, key=lambda n: (most_one_job_gets(n), n.pooled is None), default=None)
    if best is None:
        return "the largest matching node has 0"
    if best.pooled is not None:
        return f"pooled node {best.name!r} takes at most {best.pooled.gpus_per_job} GPU(s) a job"
    return f"the largest matching node has {best.total_gpus}"


def _unmet_constraints(job: QueuedJob, matching: Sequence[NodeCapacity]) -> str:
    """Why no matching node meets a job's GPU model or memory: the local nodes' best, and the
    pooled nodes, which cannot promise either (Slurm places their GPUs, which we do not know)."""
    local = [n for n in matching if n.pooled is None]
    pooled = [n.name for n in matching if n.pooled is not None]
    said = []
    if local:
        said.append(f"no node has {job.gpu} GPU(s) {describe_constraints(job)} "
                    f"(the most on one matching node: {max(suitable_total(job, n) for n in local)})")
    if pooled:
        names = ", ".join(repr(name) for name in pooled)
        said.append(f"pooled node{'s' if len(pooled) > 1 else ''} {names} cannot promise GPUs "
                    f"{describe_constraints(job)}: Slurm places {'their' if len(pooled) > 1 else 'its'} GPUs, "
                    "whose model and memory GPUPlane does not know")
    return "; ".join(said)
