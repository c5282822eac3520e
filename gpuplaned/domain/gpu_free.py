"""When a GPU is free for a new job, said out loud (issue 31 item 6). Pure: the readings are
passed in; the node's monitor and the server's scheduler pass decide with these rules, and a
job that waits for such a GPU names it (``gpuplaned.domain.queue.place``).

A GPU is free for a new job when:
- no GPUPlane job holds it (its slot has no owner: the store's, which the scheduler books);
- its node does not withhold it: it reads (a lost GPU takes no new job until it reads again)
  and, with ``[monitor] foreign_gpu_busy`` (on by default), the processes on it that belong to
  no GPUPlane job ("foreign": a colleague's notebook, a training run started by hand) hold
  less than ``[monitor] foreign_min_memory_mb`` together (a process whose memory cannot be
  read counts as that much: an unknown size never passes for a small one). A desktop's display
  server holds less and blocks nothing. A job's own processes are never foreign: the node
  attributes each GPU process to the job whose process group or session it is in;
- and, only with ``[scheduler] max_free_util`` set, the median of its last
  ``[scheduler] free_util_samples`` utilisation readings is under that percent. Only readings
  taken while no GPUPlane job held the GPU count, and the rule judges once that many have been
  taken since the node connected or a job last held the GPU: what a job of ours did there is
  no reason to keep the next one off, and a few readings say nothing.

The node decides the first two (its own config, its own readings: ``blocked_gpus`` in its
snapshot, which reaches the server in role ``all`` and over the uplink alike); the server
describes them from the same snapshot, and judges the third on the readings it keeps of each
node (``gpuplaned.service.link.registry``).

A reason names the GPU and what is on it: "GPU 1: foreign process 4 GiB (pid 123)",
"GPU 0: busy 87% (median of the last 5 samples, over max_free_util 10%)", "GPU 0: lost
(the driver's error)". ``withheld`` gives the part after "GPU i: " (the queue adds the GPU and, with
several nodes, the node).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

MAX_UTIL_SAMPLES = 60  # the most ``[scheduler] free_util_samples`` may ask for (2 minutes at 2 s)


@attrs.frozen
class ForeignProcess:
    pid: int
    memory_mb: int | None  # None: the driver could not say


@attrs.frozen
class GpuUse:
    """One GPU as one node sample saw it."""

    index: int
    utilization_pct: float | None = None
    error: str | None = None  # it could not be read (lost)
    held: bool = False  # a GPUPlane job owns it or has a process on it
    foreign: tuple[ForeignProcess, ...] = ()


@attrs.frozen
class UtilRule:
    """``[scheduler] max_free_util`` (None: utilisation is not judged) and ``free_util_samples``."""

    max_free_util: float | None = None
    samples: int = 5


# --- foreign processes (the node's rule) ---------------------------------------


def foreign_memory_mb(processes: Iterable[ForeignProcess]) -> float:
    """What foreign processes hold together; an unreadable size counts as infinite."""
    return sum(math.inf if p.memory_mb is None else p.memory_mb for p in processes)


def foreign_blocks(processes: Sequence[ForeignProcess], min_memory_mb: int) -> bool:
    """Whether foreign processes on one GPU keep it from new jobs (``[monitor] foreign_min_memory_mb``)."""
    return bool(processes) and foreign_memory_mb(processes) >= min_memory_mb


def size(memory_mb: float) -> str:
    """``300 MiB``, ``1.5 GiB``, ``4 GiB``."""
    if memory_mb < 1024:
        return f"{memory_mb:.0f} MiB"
    return f"{memory_mb / 1024:.1f}".removesuffix(".0") + " GiB"


def describe_foreign(processes: Sequence[ForeignProcess]) -> str:
    """``foreign process 4 GiB (pid 123)``; several: ``2 foreign processes, 5 GiB (pids 123, 456)``."""
    held = foreign_memory_mb(processes)
    amount = size(held) if math.isfinite(held) else "of unknown size"
    pids = ", ".join(str(p.pid) for p in processes[:3]) + (", ..." if len(processes) > 3 else "")
    if len(processes) == 1:
        return f"foreign process {amount} (pid {pids})"
    return f"{len(processes)} foreign processes, {amount} (pids {pids})"


# --- utilisation (the server's rule) -------------------------------------------


class UtilWindow:
    """Each GPU's utilisation readings since a GPUPlane job last held it (newest last, at most
    ``MAX_UTIL_SAMPLES``). A held GPU's window starts over; a reading that says nothing (a lost
    GPU, no utilisation) is left out."""

    __slots__ = ("_by_gpu",)

    def __init__(self) -> None:
        self._by_gpu: dict[int, deque[float]] = {}

    def add(self, uses: Iterable[GpuUse]) -> None:
        for use in uses:
            window = self._by_gpu.get(use.index)
            if use.held:
                if window:
                    window.clear()
                continue
            if use.error is not None or use.utilization_pct is None:
                continue
            if window is None:
                window = self._by_gpu[use.index] = deque(maxlen=MAX_UTIL_SAMPLES)
            window.append(use.utilization_pct)

    def last(self, index: int, count: int) -> tuple[float, ...]:
        window = self._by_gpu.get(index)
        if not window:
            return ()
        return tuple(window)[-count:]


def _pct(value: float) -> str:
    return f"{round(value, 1):g}%"


def busy_reason(readings: Sequence[float], rule: UtilRule) -> str | None:
    """Why a GPU no job holds is too busy for a new one (None: it is not, or not judged yet).

    ``readings``: its last utilisation readings (``UtilWindow.last``), oldest first.
    """
    if rule.max_free_util is None or len(readings) < rule.samples:
        return None
    median = statistics.median(readings[-rule.samples:])
    if median < rule.max_free_util:
        return None
    than = "over" if median > rule.max_free_util else "at"
    samples = f"median of the last {rule.samples} samples" if rule.samples > 1 else "the last sample"
    return f"busy {_pct(median)} ({samples}, {than} max_free_util {_pct(rule.max_free_util)})"


# --- one node's verdict ----------------------------------------------------------


def withheld(uses: Iterable[GpuUse], blocked: Iterable[int], window: UtilWindow | None = None,
             rule: UtilRule | None = None) -> dict[int, str]:
    """Each GPU of one node that takes no new job although no GPUPlane job may hold it, and why
    (the words after "GPU i: ").

    Args:
        uses: the node's latest sample of its GPUs.
        blocked: what the node itself withholds (its snapshot's ``blocked_gpus``: lost, or
            foreign processes over its threshold); described here from ``uses``.
        window, rule: the utilisation rule's readings and settings (None: not judged).
    """
    by_index = {use.index: use for use in uses}
    out: dict[int, str] = {}
    for index in blocked:
        use = by_index.get(index)
        if use is not None and use.error is not None:
            out[index] = f"lost ({use.error.removeprefix('gpu_lost: ')})"  # the monitor's code, said once
        elif use is not None and use.foreign:
            out[index] = describe_foreign(use.foreign)
        else:
            out[index] = "withheld by its node"
    if window is not None and rule is not None and rule.max_free_util is not None:
        for index, use in by_index.items():
            if index in out or use.held:
                continue
            reason = busy_reason(window.last(index, rule.samples), rule)
            if reason is not None:
                out[index] = reason
    return out


def uses_of(gpus: Iterable[Mapping[str, Any]]) -> tuple[GpuUse, ...]:
    """A node snapshot's GPUs (the JSON ``gpuplaned.actors.monitor.snapshot_of`` makes; an agent
    of another version may lack a key, which then says nothing)."""
    out = []
    for gpu in gpus:
        index = gpu.get("index")
        if not isinstance(index, int):
            continue
        processes = gpu.get("processes") or ()
        foreign = tuple(ForeignProcess(p.get("pid", 0), p.get("gpu_memory_mb"))
                        for p in processes if p.get("foreign"))
        held = gpu.get("owner_job_id") is not None or any(p.get("job_id") for p in processes)
        util = gpu.get("utilization_pct")
        out.append(GpuUse(index, util if isinstance(util, (int, float)) else None, gpu.get("error"), held, foreign))
    return tuple(out)


def said(where: str, index: int, why: str) -> str:
    """``GPU 1: foreign process 4 GiB (pid 123)``; ``where``: the node's name when it matters."""
    return f"GPU {index}{f' on {where}' if where else ''}: {why}"


def summary(reasons: Sequence[str]) -> str | None:
    """The first reason, and how many more GPUs are not free (None: none)."""
    if not reasons:
        return None
    more = len(reasons) - 1
    return reasons[0] if not more else f"{reasons[0]}; {more} more GPU{'s' if more > 1 else ''} not free"
