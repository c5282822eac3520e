"""Output: aligned plain-text tables for people, JSON for scripts, errors on stderr.

Pure formatting plus ``print``; nothing here talks to the daemon. The JSON printed is the
API's own body (or a small envelope around it), so ``--json`` output and the HTTP API agree.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuplaned.protocol.job_states import ENDED, WAITING
from gpuplaned.protocol.printable import printable, printable_lines
from gpuplaned.protocol.vocabulary import SEVERITIES

NONE = "-"

# JSON has no NaN or infinity: the API sends these strings instead (or null).
NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
WIDEST_NUMBER = 16  # past this many characters a number is shown in exponent form


def as_number(value: Any) -> int | float | None:
    """``value`` as the number the API meant: an int or a float (NaN and the infinities
    included, from their JSON strings too); None for null or anything else (a bool, text)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        return NONFINITE.get(value)
    return None


def finite(value: Any) -> float | None:
    """``value`` as a finite float, for arithmetic (times, sizes, shares); None for null, text,
    NaN, the infinities, and an integer too large for a float."""
    number = as_number(value)
    try:
        number = None if number is None else float(number)
    except OverflowError:
        return None
    return number if number is not None and math.isfinite(number) else None


def format_number(value: Any, spec: str = ".6g", unit: str = "") -> str:
    """``value`` by the format ``spec``, then ``unit``: the one formatter of the CLI's numbers.

    Never raises, whatever the API sent: ``-`` for null, ``nan``, ``inf`` and ``-inf`` for
    those (floats or the API's strings), a value that would take more than ``WIDEST_NUMBER``
    characters (``1e300`` by ``.0f``, an integer of 400 digits) in exponent form, and text
    that is no number as it is (escaped where printed).
    """
    number = as_number(value)
    if number is None:
        return NONE if value is None or not isinstance(value, str) else value
    if isinstance(number, float) and not math.isfinite(number):
        return f"{number}{unit}"  # nan, inf, -inf
    try:
        text = format(number, spec)
    except (OverflowError, ValueError):  # an integer too large for a float spec, a spec for ints only
        text = ""
    if not text or len(text) > WIDEST_NUMBER:
        text = _exponent(number)
    return text + unit


def _exponent(number: int | float) -> str:
    """``1.23e+400``: any finite number in a few characters, an integer too large for a float too."""
    try:
        return format(float(number), ".3g")
    except OverflowError:
        pass
    whole = abs(int(number))
    power = int(math.log10(whole))  # may be one off for so large a number: corrected below
    lead = whole // 10 ** (power - 2)
    if lead >= 1000:
        power, lead = power + 1, lead // 10
    elif lead < 100:
        power, lead = power - 1, whole // 10 ** (power - 3)
    return f"{'-' if number < 0 else ''}{lead // 100}.{lead % 100:02d}e+{power}"


def format_uptime(seconds: float | None) -> str:
    """``12s``, ``3m05s``, ``1h02m``, ``2d03h``: two units at most, truncated, never rounded up."""
    seconds = finite(seconds)
    if seconds is None or seconds < 0:
        return NONE
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    if days >= 100_000:  # no uptime, but a bad value: keep it short
        return format_number(days, "d", "d")
    return f"{days}d{hours:02d}h"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart; the last column is not padded. Control
    characters in a cell (a job named "\x1b[2J") are shown escaped, never sent to the terminal."""
    rows = [[printable(cell) for cell in headers]] + [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(headers))]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths)] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def endpoint_text(endpoints: Mapping[str, str | None]) -> str:
    parts = []
    if endpoints.get("unix"):
        parts.append(f"unix://{endpoints['unix']}")
    if endpoints.get("tcp"):
        parts.append(f"tcp://{endpoints['tcp']}")
    return ", ".join(parts) or NONE


def daemon_line(info: Mapping[str, Any]) -> str:
    """``gpuplaned 0.1.0 (pid 4242, role all): READY, up 3m05s, unix:///run/user/1000/gpuplane/gpuplaned.sock``"""
    return (
        f"gpuplaned {info['version']} (pid {info['pid']}, role {info['role']}): {info['state']}, "
        f"up {format_uptime(info.get('uptime_s'))}, {endpoint_text(info.get('endpoints') or {})}"
    )


def _active(actor: Mapping[str, Any]) -> bool:
    return actor["state"] in ("STARTING", "RUNNING", "STOPPING")


def last_error_text(actor: Mapping[str, Any], now: float | None = None) -> str:
    """The first line of the actor's last error, with how long ago it happened."""
    error = actor.get("last_error")
    if not error:
        return NONE
    text = printable(str(error).strip().splitlines()[0] if str(error).strip() else str(error))
    at = actor.get("last_error_at")
    if at is not None:
        now = time.time() if now is None else now
        text += f" ({format_uptime(_seconds_since(at, now))} ago)"  # the API speaks milliseconds
    return text


def stats_text(stats: Mapping[str, Any] | None) -> str:
    if not stats:
        return NONE
    return " ".join(f"{key}={value}" for key, value in stats.items())


def actor_table(actors: Sequence[Mapping[str, Any]], *, stats: bool = False) -> str:
    headers = ["ACTOR", "STATE", "UPTIME", "RESTARTS", "LAST ERROR"]
    if stats:
        headers.append("STATS")
    now = time.time()
    rows = []
    for actor in actors:
        row = [
            actor["name"],
            actor["state"],
            format_uptime(actor.get("uptime_s")) if _active(actor) else NONE,
            str(actor.get("restarts", 0)),
            last_error_text(actor, now),
        ]
        if stats:
            row.append(stats_text(actor.get("stats")))
        rows.append(row)
    return table(headers, rows)


def actor_line(actor: Mapping[str, Any]) -> str:
    """``store: RUNNING (up 12s, 0 restarts)``, plus the last error when there is one."""
    parts = []
    if _active(actor):
        parts.append(f"up {format_uptime(actor.get('uptime_s'))}")
    restarts = actor.get("restarts", 0)
    parts.append(f"{restarts} restart{'' if restarts == 1 else 's'}")
    if actor.get("last_error"):
        parts.append(f"last error: {last_error_text(actor)}")
    return f"{actor['name']}: {actor['state']} ({', '.join(parts)})"


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def print_error(message: str, *, hint: str | None = None) -> None:
    print(f"error: {printable_lines(message)}", file=sys.stderr)
    if hint:
        print(printable_lines(hint), file=sys.stderr)


# --- jobs, nodes, logs -------------------------------------------------------


def _seconds_since(ms: Any, now: float) -> float | None:
    at = finite(ms)
    return None if at is None else max(0.0, now - at / 1000)


def job_runtime(job: Mapping[str, Any], now: float | None = None) -> float | None:
    """Seconds from start to finish, or to ``now`` while it runs; None before it started."""
    started = finite(job.get("started_at"))
    if started is None:
        return None
    now = time.time() if now is None else now
    finished = finite(job.get("finished_at"))
    end = finished / 1000 if finished is not None else now
    return max(0.0, end - started / 1000)


def _attempts(job: Mapping[str, Any]) -> tuple[int, int] | None:
    """(the attempt to show, the retry policy's most), or None when the API's numbers are no counts.

    The API's ``attempt`` counts the attempts started; a waiting job (new, or queued again by
    a retry) shows the one it will run as: ``job retry`` showed the attempt that had ended."""
    attempt, most = finite(job.get("attempt", 0)), finite(job.get("max_attempts", 1))
    if attempt is None or most is None:
        return None
    return int(attempt) + (1 if job.get("status") in WAITING else 0), int(most)


def attempt_text(job: Mapping[str, Any]) -> str:
    """``2/3`` under a retry policy; just ``2`` without one, or past it (a manual retry)."""
    counts = _attempts(job)
    if counts is None:
        return format_number(job.get("attempt"), "d")
    attempt, most = counts
    return str(attempt) if most <= 1 or attempt > most else f"{attempt}/{most}"


def attempt_detail(job: Mapping[str, Any]) -> str:
    """``2 of 3`` within a retry policy; ``1``, or ``3 (2 retries)`` once manual retries went
    past it (``gpuplanectl job retry`` is not bound by the policy)."""
    counts = _attempts(job)
    if counts is None:
        return format_number(job.get("attempt"), "d")
    attempt, most = counts
    if 1 < most and attempt <= most:
        return f"{attempt} of {most}"
    if attempt <= 1:
        return str(attempt)
    retries = f"{attempt - 1} retr{'y' if attempt == 2 else 'ies'}"
    return f"{attempt} ({retries}; the retry policy allows {most})" if most > 1 else f"{attempt} ({retries})"


def job_gpus_text(job: Mapping[str, Any]) -> str:
    """The GPU indexes it holds or held (``0,1``), else how many it asks for (``(2)``); ``cpu`` for none."""
    if job.get("gpu_indexes") and job["status"] not in WAITING:
        return ",".join(str(i) for i in job["gpu_indexes"])
    if not job.get("gpu"):
        return "cpu"
    return f"({job['gpu']})"


def job_outcome_text(job: Mapping[str, Any]) -> str:
    """``0``, ``3``, ``SIGNAL(SIGSEGV)``, ``TIMEOUT``, ``cancelling`` or ``-``."""
    reason = job.get("failure_reason")
    if reason and reason != "EXIT_CODE":
        return reason
    if job.get("exit_code") is not None:
        return str(job["exit_code"])
    if job.get("cancel_requested") and job["status"] not in ENDED:
        return "cancelling"
    return NONE


def job_table(jobs: Sequence[Mapping[str, Any]], now: float | None = None) -> str:
    now = time.time() if now is None else now
    rows = [
        [
            job["id"],
            job.get("name") or NONE,
            job["status"],
            job_gpus_text(job),
            attempt_text(job),
            format_uptime(_seconds_since(job.get("created_at"), now)),
            format_uptime(job_runtime(job, now)),
            job_outcome_text(job),
        ]
        for job in jobs
    ]
    header = ["ID", "NAME", "STATUS", "GPUS", "ATTEMPT", "AGE", "RUNTIME", "EXIT/REASON"]
    if any(wait_text(job) for job in jobs):  # why a queued job waits, or its node has not started it
        header.append("WAIT")
        for row, job in zip(rows, jobs, strict=True):
            row.append(wait_text(job))
    return table(header, rows)


def wait_text(job: Mapping[str, Any]) -> str:
    """Why the job waits: the queue's reason while QUEUED, its node's (``Slurm: Resources``) while
    DISPATCHING; empty when neither says."""
    return job.get("queue_reason") or job.get("wait_reason") or ""


def job_line(job: Mapping[str, Any]) -> str:
    """``job_01J… (train): RUNNING, attempt 1/3, gpus 0,1, cancel requested``"""
    parts = [f"attempt {attempt_text(job)}", f"gpus {job_gpus_text(job)}"]
    outcome = job_outcome_text(job)
    if job["status"] in ENDED and outcome != NONE:
        parts.append(f"exit {outcome}")
    if job.get("cancel_requested") and job["status"] not in ENDED:
        parts.append("cancel requested")
    return f"{job['id']} ({printable(job.get('name') or NONE)}): {job['status']}, {', '.join(parts)}"


def local_time(ms: Any, fmt: str = "%Y-%m-%d %H:%M:%S", missing: str = NONE) -> str:
    """The API's milliseconds since the epoch as this machine's local time; ``missing`` for
    null, and the number itself for one that is no date (NaN, out of the calendar's range)."""
    if ms is None:
        return missing
    at = finite(ms)
    try:
        return time.strftime(fmt, time.localtime(at / 1000)) if at is not None else format_number(ms)
    except (OverflowError, OSError, ValueError):
        return format_number(ms)


def when_text(ms: int | None, now: float) -> str:
    if ms is None:
        return NONE
    return f"{local_time(ms)} ({format_uptime(_seconds_since(ms, now))} ago)"


def _number(value: float | None, unit: str = "s") -> str:
    return format_number(value, "g", unit)


def _sweep_trial(job: dict[str, Any]) -> str:
    """``swp_... trial 3: lr=0.1 bs=32`` (gpuplanectl sweep show lists its trials)."""
    values = " ".join(f"{k}={'true' if v is True else 'false' if v is False else v}"
                      for k, v in (job.get("sweep_values") or {}).items())
    return printable(f"{job['sweep_id']} trial {job.get('sweep_trial')}" + (f": {values}" if values else ""))


def _gpus_detail(job: Mapping[str, Any]) -> str:
    """``2 (holds 0,1)``, ``2 (held 0,1)``, ``2``, or ``0 (CPU only)``."""
    wanted = job.get("gpu", 0)
    if not wanted:
        return "0 (CPU only)"
    if job.get("gpu_indexes") and job["status"] not in WAITING:
        verb = "held" if job["status"] in ENDED else "holds"
        return f"{wanted} ({verb} {','.join(map(str, job['gpu_indexes']))})"
    return str(wanted)


def job_detail(job: Mapping[str, Any], now: float | None = None) -> str:
    """``gpuplanectl job show``: one ``key: value`` line per field. Environment values are
    left out (they can hold secrets and are long); ``--json`` has them."""
    import shlex  # only this view needs it

    now = time.time() if now is None else now
    where = job.get("node_id") or NONE
    if job.get("node"):
        where += f" (asked for node {job['node']})"
    fields = [
        ("id", job["id"]),
        ("name", job.get("name") or NONE),
        ("type", job.get("type") or NONE),
        ("status", job["status"] + (" (cancel requested)" if job.get("cancel_requested") and job["status"] not in ENDED else "")),
        *((("waits", job["queue_reason"]),) if job.get("queue_reason") else ()),
        *((("waiting", job["wait_reason"]),) if job.get("wait_reason") else ()),
        ("attempt", attempt_detail(job)),
        ("command", shlex.join(job.get("command") or [])),
        ("cwd", job.get("cwd") or NONE),
        ("gpus", _gpus_detail(job)),
        *((("gpu wants", _gpu_wants(job)),) if _gpu_wants(job) else ()),
        ("node", where),
        ("labels", ", ".join(job.get("labels") or []) or NONE),
        ("priority", str(job.get("priority", 0))),
        *((("group", job["group"]),) if job.get("group") else ()),
        *((("sweep", _sweep_trial(job)),) if job.get("sweep_id") else ()),
        ("timeout", _number(job.get("timeout_s"))),
        ("stop grace", _number(job.get("stop_grace_s"))),
        ("created", when_text(job.get("created_at"), now)),
        ("started", when_text(job.get("started_at"), now)),
        ("finished", when_text(job.get("finished_at"), now)),
        ("runtime", format_uptime(job_runtime(job, now))),
        ("exit code", NONE if job.get("exit_code") is None else str(job["exit_code"])),
        ("failure", job.get("failure_reason") or NONE),
        *((("why", job["failure_message"]),) if job.get("failure_message") else ()),
        ("run", job.get("run_id") or NONE),
        *((("after", _links(job, "dependencies", job.get("after"))),) if job.get("dependencies") else ()),
        *((("dependants", _links(job, "dependants")),) if job.get("dependants") else ()),
        ("env", " ".join(sorted(job.get("env") or {})) or NONE),
        *((("secret env", " ".join(job["secret_env"])),) if job.get("secret_env") else ()),  # names only
    ]
    return "\n".join(kv_lines(fields))


def _links(job: Mapping[str, Any], key: str, when: str | None = None) -> str:
    """``job_a (SUCCEEDED), job_b (RUNNING)``, after ``when`` for the dependencies:
    ``every one ended: job_a (FAILED)``."""
    listed = ", ".join(f"{link['job_id']} ({link['status']})" for link in job.get(key) or [])
    prefix = {"ended": "every one ended: ", "failed": "one failed: "}.get(when or "", "")
    return prefix + listed


def submit_plan(plan: Mapping[str, Any]) -> str:
    """``submit --dry-run``: what would happen, then why (one line per reason)."""
    would = plan["would"]
    if would == "dispatch":
        gpus = ",".join(str(i) for i in plan.get("gpus") or []) or "no GPU"
        head = f"would run now on node {plan['node_id']} (GPU {gpus})" if plan.get("gpus") else \
            f"would run now on node {plan['node_id']} (CPU only)"
    elif would == "queue":
        head = (f"would wait in the queue at position {plan['queue_position']}" if plan.get("queue_position")
                else "would wait in the queue")  # for its dependencies: no place in line yet
    else:
        head = "would be refused"
    lines = [head, *(f"  {reason}" for reason in plan.get("reasons") or [])]
    if plan.get("budget_after_gpu_hours") is not None:
        lines.append(f"GPU-hours left after it: {format_number(plan['budget_after_gpu_hours'], 'g')}")
    lines.append("dry run: nothing was queued")
    return "\n".join(printable(line) for line in lines)


def _gpu_wants(job: Mapping[str, Any]) -> str:
    """``model ~ 'A100', >= 40960 MiB, spread``: the job's GPU constraints and placement ('' if none)."""
    parts = []
    if job.get("gpu_model"):
        parts.append(f"model ~ {job['gpu_model']!r}")
    if job.get("min_gpu_memory_mb"):
        parts.append(f">= {job['min_gpu_memory_mb']} MiB")
    if job.get("placement"):
        parts.append(job["placement"])
    return ", ".join(parts)


def kv_lines(fields: Sequence[tuple[str, str]]) -> list[str]:
    """``key: value`` lines, the values aligned and their control characters escaped."""
    width = max(len(key) for key, _ in fields) + 1
    return [f"{(key + ':').ljust(width)} {printable(value)}" for key, value in fields]


def format_bytes(count: int | None) -> str:
    """``512 B``, ``1.5 KiB`` ... ``3.2 TiB``."""
    value = finite(count)
    if value is None:
        return format_number(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return format_number(value, ".0f", " B") if unit == "B" else format_number(value, ".1f", f" {unit}")
        value /= 1024
    raise AssertionError("unreachable")


def format_memory(mb: int | None) -> str:
    """``24 GiB``, ``79.6 GiB``, ``512 MiB``."""
    value = finite(mb)
    if value is None:
        return format_number(mb)
    if value < 1024:
        return format_number(value, ".0f", " MiB")
    return format_number(value / 1024, ".1f").removesuffix(".0") + " GiB"


def queue_order(jobs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The scheduler's order: highest priority first, oldest first within a priority."""
    return sorted(jobs, key=lambda job: (-(finite(job.get("priority", 0)) or 0), finite(job.get("created_at", 0)) or 0,
                                         str(job["id"])))


def queue_table(queue: Sequence[Mapping[str, Any]], now: float | None = None) -> str:
    now = time.time() if now is None else now
    rows = [
        [job["id"], job.get("name") or NONE, str(job.get("priority", 0)), job_gpus_text(job),
         job.get("node") or NONE, format_uptime(_seconds_since(job.get("created_at"), now))]
        for job in queue
    ]
    return table(["ID", "NAME", "PRIORITY", "GPUS", "NODE", "AGE"], rows)


def end_line(job_id: str, end: Mapping[str, Any]) -> str:
    """The last line of ``logs -f``: ``[job job_… SUCCEEDED, exit code 0]``, ``[job job_… FAILED,
    signal SIGSEGV]``, ``[job job_… FAILED (TIMEOUT)]``."""
    status = end.get("status") or "ENDED"
    reason = end.get("failure_reason") or ""
    signal = end.get("signal")
    if reason.startswith("SIGNAL(") and reason.endswith(")"):
        signal = reason[len("SIGNAL("):-1] if signal is None else signal
        reason = ""
    if signal is not None:
        detail = f", signal {signal}"
    elif end.get("exit_code") is not None:
        detail = f", exit code {end['exit_code']}"
    else:
        detail = ""
    if reason and reason not in ("EXIT_CODE", status):
        detail += f" ({reason})"
    return f"[job {job_id} {status}{detail}]"


# --- events --------------------------------------------------------------------


def event_time(ms: int | None) -> str:
    return local_time(ms)


def event_row(event: Mapping[str, Any], node_names: Mapping[str, str] | None = None) -> list[str]:
    """TIME, SEVERITY, TYPE, NODE (its name when known), JOB, MESSAGE."""
    node_id = event.get("node_id")
    node = (node_names or {}).get(node_id, node_id) if node_id else None
    message = " ".join(str(event.get("message") or "").split()) or NONE  # one line
    cells = [event_time(event.get("ts")), event.get("severity") or NONE, event.get("type") or NONE,
             node or NONE, event.get("job_id") or NONE, message]
    return [printable(cell) for cell in cells]  # a followed event is printed without ``table``


EVENT_HEADERS = ["TIME", "SEVERITY", "TYPE", "NODE", "JOB", "MESSAGE"]


def event_table(events: Sequence[Mapping[str, Any]], node_names: Mapping[str, str] | None = None) -> str:
    """``events`` as the API lists them (newest first), printed oldest first like a log: the
    newest event is the last line."""
    return table(EVENT_HEADERS, [event_row(event, node_names) for event in reversed(events)])


# Fixed widths for followed events, which cannot be aligned to rows not seen yet.
EVENT_WIDTHS = (19, 8, 21, 12, 30)


def event_line(event: Mapping[str, Any] | None, node_names: Mapping[str, str] | None = None) -> str:
    """One followed event (or, for None, the header), in fixed-width columns."""
    cells = EVENT_HEADERS if event is None else event_row(event, node_names)
    padded = [cell.ljust(width) for cell, width in zip(cells, EVENT_WIDTHS)] + [cells[-1]]
    return "  ".join(padded).rstrip()
