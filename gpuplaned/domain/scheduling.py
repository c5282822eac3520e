"""Pure slot assignment: (queue, nodes) -> which jobs go where, on which GPUs.

Rules (seed 000 section 6.2, no preemption):
- The queue is taken in order: highest priority first, oldest first within a priority.
- A GPU job needs ``gpu`` free slots on one ONLINE node matching its selector (every
  label, and the node name if given). Among the nodes that fit, the one with the fewest
  free slots wins (best fit keeps whole machines free for big jobs); the lowest GPU
  indexes are taken.
- A GPU job that matches nodes but fits none *reserves* those nodes: no later (lower in
  the queue) GPU job is placed on them in this pass, so a 4-GPU job is not starved by a
  stream of 1-GPU jobs.
- A CPU job (``gpu == 0``) takes no slot and is bounded by the node's ``max_cpu_jobs``.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs


@attrs.frozen
class QueuedJob:
    job_id: str
    gpu: int
    labels: tuple[str, ...] = ()
    node: str | None = None


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


@attrs.frozen
class Assignment:
    job_id: str
    node_id: str
    gpu_indexes: tuple[int, ...]


def matches(job: QueuedJob, node: NodeCapacity) -> bool:
    if job.node is not None and job.node != node.name:
        return False
    return set(job.labels) <= set(node.labels)


def can_ever_fit(job: QueuedJob, nodes: Iterable[NodeCapacity]) -> bool:
    """Whether some known node could run the job when idle (used to refuse at submit)."""
    return any(matches(job, n) and n.total_gpus >= job.gpu and (job.gpu > 0 or n.max_cpu_jobs > 0)
               for n in nodes)


def assign(queue: Iterable[QueuedJob], nodes: Iterable[NodeCapacity]) -> list[Assignment]:
    free = {n.node_id: sorted(n.free_gpus) for n in nodes}
    cpu = {n.node_id: n.cpu_jobs for n in nodes}
    usable = [n for n in nodes if n.online and n.accepting]
    reserved: set[str] = set()
    out: list[Assignment] = []
    for job in queue:
        if not any(free[n.node_id] or cpu[n.node_id] < n.max_cpu_jobs for n in usable):
            break  # nothing left to give: the rest of the queue need not even be read
        candidates = [n for n in usable if matches(job, n)]
        if job.gpu == 0:
            for node in candidates:
                if cpu[node.node_id] < node.max_cpu_jobs:
                    cpu[node.node_id] += 1
                    out.append(Assignment(job.job_id, node.node_id, ()))
                    break
            continue
        open_nodes = [n for n in candidates if n.node_id not in reserved]
        fitting = [n for n in open_nodes if len(free[n.node_id]) >= job.gpu]
        if not fitting:
            reserved.update(n.node_id for n in candidates)
            continue
        node = min(fitting, key=lambda n: (len(free[n.node_id]), n.name))
        taken = tuple(free[node.node_id][: job.gpu])
        free[node.node_id] = free[node.node_id][job.gpu:]
        out.append(Assignment(job.job_id, node.node_id, taken))
    return out
