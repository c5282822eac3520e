"""``gpuplanectl top``'s screen, composed from API data: pure, no terminal and no I/O.

``compose(nodes, jobs, width=, height=, now=)`` returns the lines of one frame: at most
``height`` lines, none longer than ``width``. The top of the frame is kept whole where it can
be (a title, then per node a header and one line per GPU); the jobs table below gets what is
left and says how many jobs it could not show.

    gpuplane  23:11:42  1 node  1 running  1 queued                          q quits
    box ONLINE  cpu 51%  mem 0.4/23.5G  load 0.31 0.39 0.61  swap 0/0M
    GPU UTIL                              MEM  TEMP      POWER  JOB
      0 [|||||||||||||||  ]  90%   48.4/80.0G   72C   544/700W  train
      1 [                 ]   0%    0.4/80.0G   32C    70/700W  -

    ID                              STATUS   GPUS  GPU MEM  TIME  NAME
    job_01M8MS819DPJ8S03AAANCWKWHW  RUNNING  0     600M     6s    train
    job_01M8MS81PKH3GZDQPJXR63X34J  QUEUED   (2)   -        6s    waiting-for-two-..

Everything the API may leave out (a node's ``snapshot`` before its first sample, any
reading) shows as ``-``; control characters in names show escaped (``\\x1b``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from gpuplaned.protocol.job_states import ACTIVE, WAITING
from gpuplanectl import render, render_nodes

NONE = render.NONE
RUNNING = ACTIVE  # what top counts and shows as running: dispatched or running
QUEUED = WAITING
ELLIPSIS = ".."  # ASCII: the terminal at the other end of an SSH session may have no UTF-8

# The GPU line: index, bar, util, memory, temperature, power, then the owner in what is left.
_GPU_FIXED = 3 + 1 + 2 + 1 + 4 + 2 + 11 + 2 + 4 + 2 + 9 + 2
_OWNER_ROOM = 20  # the bar shrinks before the owner gets less than this
_BAR_MIN, _BAR_MAX = 5, 40


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, trailing blanks dropped."""
    return text[:max(width, 0)].rstrip()


def shorten(text: str, width: int) -> str:
    """``text`` in ``width`` characters, its end replaced by ``..`` when it is longer."""
    if len(text) <= width:
        return text
    if width <= len(ELLIPSIS):
        return text[:max(width, 0)]
    return text[:width - len(ELLIPSIS)] + ELLIPSIS


def bar(pct: float | None, inner: int) -> str:
    """``[|||||     ]``: ``inner`` cells filled in proportion to ``pct`` (0-100); blank when unknown."""
    value = render.finite(pct)
    filled = 0 if value is None else round(min(max(value, 0.0), 100.0) / 100 * inner)
    return "[" + "|" * filled + " " * (inner - filled) + "]"


def _pct(value: float | None) -> str:
    return render_nodes.format_pct(value)


def title_line(nodes: Sequence[Mapping[str, Any]], jobs: Sequence[Mapping[str, Any]], width: int,
               now: float, hint: str | None = "q quits") -> str:
    running = sum(1 for job in jobs if job.get("status") in RUNNING)
    queued = sum(1 for job in jobs if job.get("status") in QUEUED)
    left = (f"gpuplane  {time.strftime('%H:%M:%S', time.localtime(now))}  {len(nodes)} node"
            f"{'' if len(nodes) == 1 else 's'}  {running} running  {queued} queued")
    right = hint or ""
    if right and len(left) + 2 + len(right) <= width:
        return left + " " * (width - len(left) - len(right)) + right
    return fit(left, width)


def node_header(node: Mapping[str, Any]) -> str:
    """Name, status and conditions first (a narrow screen cuts the end), then the host's readings."""
    head = f"{render.printable(node.get('name') or node.get('id') or NONE)} {node.get('status') or NONE}"
    conditions = render_nodes.node_conditions_text(node)
    if conditions != NONE:
        head += f" {conditions}"
    host = (node.get("snapshot") or {}).get("host")
    if not host:
        return f"{head}  (no sample yet)"
    mem = render_nodes.format_memory_pair(host.get("memory_used_mb"), host.get("memory_total_mb"), compact=True)
    swap = render_nodes.format_memory_pair(host.get("swap_used_mb"), host.get("swap_total_mb"), compact=True)
    return (f"{head}  cpu {_pct(host.get('cpu_percent'))}  mem {mem}  load {render_nodes.format_load(host)}  "
            f"swap {swap}")


def bar_width(width: int) -> int:
    return min(_BAR_MAX, max(_BAR_MIN, width - _GPU_FIXED - _OWNER_ROOM))


def gpu_header(width: int) -> str:
    inner = bar_width(width)
    return fit(f"GPU {'UTIL'.ljust(inner + 2 + 1 + 4)}  {'MEM'.rjust(11)}  TEMP  {'POWER'.rjust(9)}  JOB", width)


def gpu_line(slot: Mapping[str, Any], reading: Mapping[str, Any] | None, width: int) -> str:
    inner = bar_width(width)
    job_id, job_name = render_nodes.gpu_owner(slot, reading)
    owner = render.printable(job_name or job_id or NONE)
    index = str(slot.get("index", NONE)).rjust(3)
    if reading is not None and reading.get("error"):
        return fit(f"{index} {'[' + '?' * inner + ']'} error: {render.printable(reading['error'])}", width)
    reading = reading or {}
    util = reading.get("utilization_pct")
    mem = render_nodes.format_memory_pair(reading.get("memory_used_mb"),
                                    reading.get("memory_total_mb") or slot.get("memory_mb"), compact=True)
    power = render_nodes.format_power(reading.get("power_w"), reading.get("power_limit_w"), unit="W")
    line = (f"{index} {bar(util, inner)} {_pct(util).rjust(4)}  {mem.rjust(11)}  "
            f"{render_nodes.format_temp(reading.get('temperature_c')).rjust(4)}  {power.rjust(9)}  ")
    return fit(line + shorten(owner, width - len(line)), width)


def foreign_line(node: Mapping[str, Any], width: int) -> str | None:
    """GPU processes no job of ours accounts for, on one line; None when there are none."""
    found = []
    for gpu in (node.get("snapshot") or {}).get("gpus") or []:
        for proc in gpu.get("processes") or []:
            if proc.get("foreign"):
                mem = render_nodes.format_memory_pair(proc.get("gpu_memory_mb"), None, compact=True)
                found.append(f"GPU {gpu.get('index')} pid {proc.get('pid')} ({mem})")
    if not found:
        return None
    return fit("    foreign: " + ", ".join(found), width)


def job_memory(nodes: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """GPU memory (MiB) each job uses, summed over the nodes' latest samples."""
    used: dict[str, int] = {}
    for node in nodes:
        for entry in (node.get("snapshot") or {}).get("jobs") or []:
            mb = render.finite(entry.get("gpu_memory_mb"))
            if entry.get("job_id") and mb is not None:
                used[entry["job_id"]] = used.get(entry["job_id"], 0) + int(mb)
    return used


def ordered_jobs(jobs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Running jobs (longest running first), then queued ones in the order they will run."""
    running = sorted((job for job in jobs if job.get("status") in RUNNING),
                     key=lambda job: (render.finite(job.get("started_at")) or render.finite(job.get("created_at")) or 0,
                                      str(job["id"])))
    waiting = render.queue_order(job for job in jobs if job.get("status") not in RUNNING)
    return running + waiting


def job_lines(nodes: Sequence[Mapping[str, Any]], jobs: Sequence[Mapping[str, Any]], width: int,
              now: float) -> list[str]:
    """The jobs table: a header, then one line per job; the name, last, is shortened to fit."""
    if not jobs:
        return ["no running or queued jobs"]
    names = {node.get("id"): node.get("name") for node in nodes}
    with_node = len(nodes) > 1
    memory = job_memory(nodes)
    rows = []
    for job in ordered_jobs(jobs):
        used = memory.get(job["id"])
        row = [job["id"], job.get("status") or NONE, render.job_gpus_text(job),
               NONE if used is None else render_nodes.format_memory_pair(used, None, compact=True),
               format_runtime(job, now)]
        if with_node:
            row.insert(3, render.printable(names.get(job.get("node_id")) or job.get("node_id") or job.get("node")
                                           or NONE))
        rows.append((row, render.printable(job.get("name") or NONE)))
    headers = ["ID", "STATUS", "GPUS", "GPU MEM", "TIME"]
    if with_node:
        headers.insert(3, "NODE")
    widths = [max(len(headers[i]), *(len(row[i]) for row, _ in rows)) for i in range(len(headers))]

    def line(cells: Sequence[str], name: str) -> str:
        start = "  ".join(cell.ljust(w) for cell, w in zip(cells, widths)) + "  "
        return fit(start + shorten(name, width - len(start)), width)

    return [line(headers, "NAME")] + [line(row, name) for row, name in rows]


def format_runtime(job: Mapping[str, Any], now: float) -> str:
    """TIME: how long a running job has run, or a queued one has waited."""
    if job.get("status") in RUNNING:
        return render.format_uptime(render.job_runtime(job, now))
    created = render.finite(job.get("created_at"))  # queued: how long it has waited
    return NONE if created is None else render.format_uptime(max(0.0, now - created / 1000))


def clip(lines: list[str], budget: int, what: str, width: int) -> list[str]:
    """``lines`` in at most ``budget`` lines, the last saying how many were left out."""
    if budget <= 0:
        return []
    if len(lines) <= budget:
        return lines
    kept = lines[:budget - 1]
    return kept + [fit(f"... {len(lines) - len(kept)} more {what}", width)]


def compose(nodes: Sequence[Mapping[str, Any]], jobs: Sequence[Mapping[str, Any]], *, width: int,
            height: int, now: float | None = None, hint: str | None = "q quits") -> list[str]:
    """One frame of ``top`` in ``width`` x ``height`` characters; ``hint`` ends the title line."""
    now = time.time() if now is None else now
    if width <= 0 or height <= 0:
        return []
    top = [title_line(nodes, jobs, width, now, hint)]
    body: list[str] = []
    for node in nodes:
        body.append(fit(node_header(node), width))
        gpus = render_nodes.node_gpus(node)
        if gpus:
            body.append(gpu_header(width))
            body.extend(gpu_line(slot, reading, width) for slot, reading in gpus)
        foreign = foreign_line(node, width)
        if foreign:
            body.append(foreign)
    if not nodes:
        body.append("no nodes yet")
    table = job_lines(nodes, jobs, width, now)
    # The jobs keep at least their header and a line (or the "more" line) below a blank one.
    reserved = min(len(table) + 1, 3)
    body = clip(body, height - 1 - reserved, "lines", width)
    rest = height - 1 - len(body)
    below = clip(table, rest - 1, "jobs", width)
    frame = top + body + ([""] + below if below else [])
    return [fit(line, width) for line in frame[:height]]
