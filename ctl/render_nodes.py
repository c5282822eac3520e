"""Output for nodes: GPU and host readings (a node's ``snapshot``), a remote node's link, the node
list and detail, and a node's last hour (``GET /api/v1/nodes/{id}/metrics``). Pure formatting, as
``gpuplanectl.render``, whose tables and key-value lines it uses.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from gpuplaned.protocol.printable import printable
from gpuplanectl.render import (NONE, finite, format_bytes, format_memory, format_number, format_uptime, kv_lines,
                                table, when_text)


# --- GPU and host readings (a node's ``snapshot``) ---------------------------


def format_pct(value: float | None) -> str:
    """``90%``; ``-`` when not read."""
    return format_number(value, ".0f", "%")


def format_temp(celsius: float | None) -> str:
    return format_number(celsius, ".0f", "C")


def format_power(watts: float | None, limit: float | None = None, *, unit: str = " W") -> str:
    """``600/700 W``, ``600 W`` without a limit, ``-`` when not read."""
    if watts is None:
        return NONE
    if limit is None:
        return format_number(watts, ".0f", unit)
    return f"{format_number(watts, '.0f')}/{format_number(limit, '.0f', unit)}"


def format_memory_pair(used_mb: int | None, total_mb: int | None, *, compact: bool = False) -> str:
    """``48.0/80.0 GiB`` (one unit, from the total); ``-/80.0 GiB`` when the use is not read.

    ``compact``: ``48.0/80.0G``, for narrow screens.
    """
    if used_mb is None and total_mb is None:
        return NONE
    scale = finite(total_mb if total_mb is not None else used_mb)

    def number(mb: int | None, gib: bool) -> str:
        value = finite(mb)
        if value is None:
            return format_number(mb)
        return format_number(value / 1024, ".1f") if gib else format_number(value, ".0f")

    gib = scale is not None and scale >= 1024
    unit = ("G" if gib else "M") if compact else (" GiB" if gib else " MiB")
    if total_mb is None:
        return number(used_mb, gib) + unit
    return f"{number(used_mb, gib)}/{number(total_mb, gib)}{unit}"


def format_load(host: Mapping[str, Any]) -> str:
    """``0.52 0.40 0.33``: the 1, 5 and 15 minute load averages."""
    values = [host.get(key) for key in ("load1", "load5", "load15")]
    return " ".join(format_number(v, ".2f") for v in values)


def owner_text(job_id: str | None, job_name: str | None = None) -> str:
    """``job_01... (train)``, ``job_01...``, or ``-``."""
    if not job_id:
        return NONE
    return f"{job_id} ({job_name})" if job_name else job_id


def node_gpus(node: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], Mapping[str, Any] | None]]:
    """Each GPU of a node as ``(slot, reading)``, by index: the scheduler's slot (model, memory,
    owner) and the latest sample of it (None before the first sample, or when it was not read).

    A GPU the sample shows but the node registered no slot for (it appeared later) gets a slot
    made from the sample, so it is listed.
    """
    snapshot = node.get("snapshot") or {}
    readings = {gpu["index"]: gpu for gpu in snapshot.get("gpus") or []}
    slots = {slot["index"]: slot for slot in node.get("gpus") or []}
    for index, reading in readings.items():
        slots.setdefault(index, {"index": index, "model": reading.get("model"),
                                 "memory_mb": reading.get("memory_total_mb"),
                                 "owner_job_id": reading.get("owner_job_id"), "owner_job_name": None})
    return [(slots[index], readings.get(index)) for index in sorted(slots, key=_index_order)]


def _index_order(index: Any) -> tuple[bool, float, str]:
    """GPUs by index; an index that is no number (the API's fault) last, whatever it is."""
    number = finite(index)
    return number is None, number or 0.0, str(index)


def gpu_owner(slot: Mapping[str, Any], reading: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    """The job that holds the GPU, as ``(id, name)``: the scheduler's assignment, else what the sample saw."""
    if slot.get("owner_job_id"):
        return slot["owner_job_id"], slot.get("owner_job_name")
    if reading is not None and reading.get("owner_job_id"):
        return reading["owner_job_id"], None
    return None, None


def gpu_readings(slot: Mapping[str, Any], reading: Mapping[str, Any] | None) -> dict[str, str]:
    """The text of one GPU's utilization, memory, temperature and power; ``-`` without a sample,
    ``error`` for utilization when the GPU could not be read."""
    if reading is None:
        total = slot.get("memory_mb")
        return {"util": NONE, "memory": format_memory_pair(None, total) if total else NONE,
                "temp": NONE, "power": NONE}
    return {
        "util": "error" if reading.get("error") else format_pct(reading.get("utilization_pct")),
        "memory": format_memory_pair(reading.get("memory_used_mb"),
                                     reading.get("memory_total_mb") or slot.get("memory_mb")),
        "temp": format_temp(reading.get("temperature_c")),
        "power": format_power(reading.get("power_w"), reading.get("power_limit_w")),
    }


def blocked_gpus(node: Mapping[str, Any]) -> set[int]:
    """GPUs that take no new job for now (a foreign process uses it, it was lost), per the last sample."""
    return set((node.get("snapshot") or {}).get("blocked_gpus") or [])


def free_gpus(node: Mapping[str, Any]) -> int:
    """GPUs a new job could get: no job holds them, none blocked or lost at the last sample."""
    blocked = blocked_gpus(node)
    return sum(1 for slot, reading in node_gpus(node)
               if gpu_owner(slot, reading)[0] is None and slot["index"] not in blocked
               and not (reading and reading.get("error")))


def pooled_text(pooled: Mapping[str, Any]) -> str:
    """A Slurm node's capacity: ``up to 4 GPUs a job, 8 jobs at once, 3 in flight``."""
    return (f"up to {pooled.get('gpus_per_job')} GPUs a job, {pooled.get('max_jobs')} jobs at once, "
            f"{pooled.get('jobs_in_flight')} in flight")


def capacity_cells(node: Mapping[str, Any]) -> list[str]:
    """GPUS, FREE and CPU JOBS of ``node list``: a pooled node (Slurm places its GPUs) shows the most
    GPUs a job, its free job slots and ``pooled`` (its CPU jobs count against its job slots)."""
    pooled = node.get("pooled")
    if pooled:
        free = (pooled.get("max_jobs") or 0) - (pooled.get("jobs_in_flight") or 0)
        return [f"{pooled.get('gpus_per_job')}/job", f"{max(0, free)} jobs", "pooled"]
    return [str(len(node_gpus(node))), str(free_gpus(node)),
            f"{node.get('cpu_jobs') or 0}/{node.get('max_cpu_jobs') or 0}"]


def node_conditions_text(node: Mapping[str, Any]) -> str:
    """``DISK_LOW (not accepting jobs)``, ``not accepting jobs``, or ``-``."""
    text = ",".join(node.get("conditions") or [])
    if node.get("accepting") is False:
        text = f"{text} (not accepting jobs)" if text else "not accepting jobs"
    return text or NONE


# --- a remote node's link (its ``remote`` and ``link``) ------------------------


LINK_HEADERS = ("LINK", "HEARTBEAT", "BACKLOG", "SKEW")


def has_links(nodes: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any node is a remote agent's: only then does the list show link columns."""
    return any(node.get("remote") or node.get("link") for node in nodes)


def link_state_text(node: Mapping[str, Any]) -> str:
    """``attached`` or ``detached`` for a remote agent's node; ``local`` for the server's own.

    A remote node this server has not heard from since it started has no ``link``: detached.
    """
    link = node.get("link")
    if link:
        return str(link.get("state") or NONE)
    return "detached" if node.get("remote") else "local"


def age_text(ms: int | None, now: float) -> str:
    """``3s ago``, ``2m05s ago``; ``-`` for never. A time a little ahead of this machine's clock
    (the server's clock is not this one's) reads ``0s ago``."""
    at = finite(ms)
    if at is None:
        return format_number(ms)
    return f"{format_uptime(max(0.0, now - at / 1000))} ago"


def count_text(count: int) -> str:
    """``950``, ``12.3k``, ``4.5M``."""
    value = finite(count)
    if value is None:
        return format_number(count)
    if value < 10_000:
        return format_number(value, ".0f")
    if value < 1_000_000:
        return format_number(value / 1000, ".1f", "k")
    return format_number(value / 1_000_000, ".1f", "M")


def backlog_text(link: Mapping[str, Any] | None) -> str:
    """The agent's spool not yet acknowledged: ``0``, ``1234 / 96.4 KiB``; ``-`` before its first heartbeat."""
    if not link or link.get("backlog_records") is None:
        return NONE
    records, size = link["backlog_records"], link.get("backlog_bytes")
    if not records and not size:
        return "0"
    return f"{count_text(records)} / {format_bytes(size)}"


def skew_text(skew_ms: int | None) -> str:
    """The agent's clock minus the server's: ``+12 ms``, ``-3 ms``, ``+42 s``; ``-`` when not known."""
    skew = finite(skew_ms)
    if skew is None:
        return format_number(skew_ms)
    return format_number(skew, "+.0f", " ms") if abs(skew) < 10_000 else format_number(skew / 1000, "+.0f", " s")


def link_cells(node: Mapping[str, Any], now: float) -> list[str]:
    """LINK, HEARTBEAT (an age), BACKLOG and SKEW of one node; ``local`` and dashes for the server's own."""
    if not node.get("remote") and not node.get("link"):
        return ["local", NONE, NONE, NONE]
    link = node.get("link") or {}
    beat = link.get("last_heartbeat_at") or node.get("last_heartbeat_at")
    return [link_state_text(node), age_text(beat, now), backlog_text(link), skew_text(link.get("skew_ms"))]


def link_lines(node: Mapping[str, Any], now: float) -> list[tuple[str, str]]:
    """``node show``'s lines on the link: its state and when the agent was last heard from, the
    backlog of its spool, its clock's skew."""
    if not node.get("remote") and not node.get("link"):
        return [("link", "local")]
    link = node.get("link")
    if not link:
        return [("link", "detached (not heard from since the server started)")]
    state = link_state_text(node)
    heard = link.get("last_heard_at")
    records = link.get("backlog_records")
    if records is None:
        backlog = "not known yet (no heartbeat)"
    else:
        backlog = "0 records" if not records else \
            f"{count_text(records)} records, {format_bytes(link.get('backlog_bytes'))}"
        backlog += " at its last heartbeat" if state == "detached" else " not yet acknowledged"
    return [("link", f"{state}, last heard {age_text(heard, now)}" if heard is not None else state),
            ("backlog", backlog), ("clock skew", skew_text(link.get("skew_ms")))]


def node_list_table(nodes: Sequence[Mapping[str, Any]], now: float | None = None) -> str:
    """``node list`` and ``status``: one row per node. LINK, HEARTBEAT, BACKLOG and SKEW only when
    a node is a remote agent's (the server's own node shows ``local`` there)."""
    now = time.time() if now is None else now
    links = has_links(nodes)
    runners = any((node.get("runner") or "local") != "local" for node in nodes)  # a RUNNER column only then
    rows = [
        [node["name"], node.get("status") or NONE, *([node.get("runner") or "local"] if runners else ()),
         node.get("gpu_backend") or NONE, *capacity_cells(node),
         *(link_cells(node, now) if links else ()), node_conditions_text(node)]
        for node in nodes
    ]
    return table(["NODE", "STATUS", *(("RUNNER",) if runners else ()), "BACKEND", "GPUS", "FREE", "CPU JOBS",
                  *(LINK_HEADERS if links else ()), "CONDITIONS"], rows)


def gpu_status_table(nodes: Sequence[Mapping[str, Any]]) -> str:
    """``gpuplanectl status``: one row per GPU with its latest readings and the job holding it."""
    rows = []
    for node in nodes:
        for slot, reading in node_gpus(node):
            text = gpu_readings(slot, reading)
            rows.append([node["name"], str(slot["index"]), slot.get("model") or NONE, text["util"],
                         text["memory"], text["temp"], text["power"], owner_text(*gpu_owner(slot, reading))])
    return table(["NODE", "GPU", "MODEL", "UTIL", "MEMORY", "TEMP", "POWER", "JOB"], rows)


def node_detail(node: Mapping[str, Any], now: float | None = None) -> str:
    """``gpuplanectl node show``: the node, its GPUs with their readings and processes, the host."""
    now = time.time() if now is None else now
    snapshot = node.get("snapshot")
    backend = node.get("gpu_backend") or NONE
    if node.get("gpu_backend_note"):
        backend += f" ({node['gpu_backend_note']})"
    accepting = "not accepting jobs" if node.get("accepting") is False else "accepting jobs"
    conditions = ", ".join(node.get("conditions") or [])
    lines = kv_lines([
        ("node", f"{node['name']} ({node.get('id') or NONE})"),
        ("status", f"{node.get('status') or NONE}, {accepting}" + (f" ({conditions})" if conditions else "")),
        *((printable(name), message) for name, message in (node.get("condition_messages") or {}).items()),
        ("labels", ", ".join(node.get("labels") or []) or NONE),
        ("hardware", hardware_text(node.get("hardware") or {})),
        ("gpu backend", backend),
        # A Slurm node's job slots instead of its CPU jobs (they count against its max_jobs).
        *((("runner", str(node.get("runner"))), ("pooled", pooled_text(node["pooled"]))) if node.get("pooled") else
          (("cpu jobs", f"{node.get('cpu_jobs') or 0} of {node.get('max_cpu_jobs') or 0}"),)),
        ("heartbeat", when_text(node.get("last_heartbeat_at"), now)),
        ("sampled", when_text(snapshot.get("ts"), now) if snapshot else "not yet"),
        *link_lines(node, now),
    ])
    gpus = node_gpus(node)
    lines.append("")
    if not gpus and node.get("pooled"):
        lines.append("GPUs: placed by Slurm for each job")
    elif not gpus:
        lines.append("no GPUs")
    else:
        rows, notes, processes = [], [], []
        blocked = blocked_gpus(node)
        for slot, reading in gpus:
            text = gpu_readings(slot, reading)
            reading = reading or {}
            clock = reading.get("sm_clock_mhz")
            rows.append([str(slot["index"]), slot.get("model") or NONE, text["util"], text["memory"], text["temp"],
                         text["power"], NONE if clock is None else f"{clock} MHz",
                         format_pct(reading.get("fan_pct")), owner_text(*gpu_owner(slot, reading or None))])
            if reading.get("error"):
                notes.append(f"GPU {slot['index']}: {reading['error']}")
            elif slot["index"] in blocked and gpu_owner(slot, reading)[0] is None:
                notes.append(f"GPU {slot['index']}: takes no new jobs for now")
            throttles = [r for r in reading.get("throttle_reasons") or [] if r != "idle"]
            if throttles:
                notes.append(f"GPU {slot['index']}: throttled ({', '.join(throttles)})")
            for proc in reading.get("processes") or []:
                who = "foreign" if proc.get("foreign") else (proc.get("job_id") or NONE)
                processes.append([str(slot["index"]), str(proc.get("pid", NONE)),
                                  format_memory(proc.get("gpu_memory_mb")), who])
        lines.append(table(["GPU", "MODEL", "UTIL", "MEMORY", "TEMP", "POWER", "SM CLOCK", "FAN", "JOB"], rows))
        lines.extend(printable(note) for note in notes)
        lines.append("")
        if processes:
            lines.append(table(["GPU", "PID", "GPU MEMORY", "JOB"], processes))
        else:
            lines.append("no GPU processes" if snapshot else "GPU processes: not sampled yet")
    host = (snapshot or {}).get("host")
    lines.append("")
    if not host:
        lines.append("host: not sampled yet")
        return "\n".join(lines)
    lines.extend(kv_lines([
        ("cpu", f"{format_pct(host.get('cpu_percent'))}, load {format_load(host)}"),
        ("memory", format_memory_pair(host.get("memory_used_mb"), host.get("memory_total_mb"))),
        ("swap", format_memory_pair(host.get("swap_used_mb"), host.get("swap_total_mb"))),
        ("network", f"{format_bytes(host.get('net_rx_bytes'))} received, "
                    f"{format_bytes(host.get('net_tx_bytes'))} sent (since boot)"),
    ]))
    disks = host.get("disks") or []
    if disks:
        lines.append("")
        lines.append(table(["DISK", "PATH", "USED", "FREE", "TOTAL", "USE"], [
            [disk.get("label") or NONE, disk.get("path") or NONE, format_bytes(disk.get("used_bytes")),
             format_bytes(disk.get("free_bytes")), format_bytes(disk.get("total_bytes")),
             _share(disk.get("used_bytes"), disk.get("total_bytes"))]
            for disk in disks
        ]))
    return "\n".join(lines)


def hardware_text(hardware: Mapping[str, Any]) -> str:
    """``16 CPUs, 62.8 GiB memory, Linux-6.1.0-x86_64 (gpu-box-1)`` from the node's host facts."""
    parts = []
    if hardware.get("cpu_count"):
        parts.append(f"{hardware['cpu_count']} CPUs")
    if hardware.get("memory_mb"):
        parts.append(f"{format_memory(hardware['memory_mb'])} memory")
    if hardware.get("platform"):
        parts.append(str(hardware["platform"]))
    text = ", ".join(parts)
    if hardware.get("hostname"):
        text = f"{text} ({hardware['hostname']})" if text else str(hardware["hostname"])
    return text or NONE


def _share(part: int | None, whole: int | None) -> str:
    part, whole = finite(part), finite(whole)
    if part is None or not whole:
        return NONE
    return format_number(100 * part / whole, ".0f", "%")




# --- a node's last hour (``GET /api/v1/nodes/{id}/metrics``) -----------------------

HISTORY_SERIES = ("gpu*.utilization", "gpu*.memory_used_mb", "host.cpu_percent", "host.memory_used_mb")


def _series_stats(series: Mapping[str, Any] | None) -> tuple[float | None, float | None]:
    """The average (of the buckets' averages) and the maximum over all buckets; None when empty."""
    if not series:
        return None, None
    avgs = [v for v in map(finite, series.get("avg") or []) if v is not None]
    maxes = [v for v in map(finite, series.get("max") or []) if v is not None]
    return (sum(avgs) / len(avgs) if avgs else None), (max(maxes) if maxes else None)


def history_text(metrics: Mapping[str, Any], what: str = "last hour") -> str | None:
    """Per GPU, average and peak utilization and peak memory; the host's CPU and memory.
    None when the window holds no points."""
    series = metrics.get("series") or {}
    indexes = sorted({int(name[3:].split(".", 1)[0]) for name in series
                      if name.startswith("gpu") and name[3:].split(".", 1)[0].isdigit()})
    rows = []
    for i in indexes:
        util_avg, util_max = _series_stats(series.get(f"gpu{i}.utilization"))
        _, mem_max = _series_stats(series.get(f"gpu{i}.memory_used_mb"))
        rows.append([str(i), format_pct(util_avg), format_pct(util_max),
                     format_memory(mem_max)])
    cpu_avg, cpu_max = _series_stats(series.get("host.cpu_percent"))
    _, host_mem = _series_stats(series.get("host.memory_used_mb"))
    if all(row[1:] == [NONE] * 3 for row in rows) and cpu_max is None and host_mem is None:
        return None
    lines = [f"{what}:"]
    if rows:
        lines.append(table(["GPU", "UTIL AVG", "UTIL MAX", "MEMORY MAX"], rows))
    lines.append(f"host: cpu avg {format_pct(cpu_avg)}, max {format_pct(cpu_max)}; memory max "
                 f"{format_memory(host_mem)}")
    return "\n".join(lines)
