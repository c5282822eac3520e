"""``explain_failure``: why a job's attempt failed, classified, with the log lines, GPU samples
and events that show it.

The causes, tried in this order (the first that has its proof wins): spawn failure, timeout,
OOM (the failure reason, or an out-of-memory line; the GPU memory peak beside it), disk full
(an ENOSPC line or a DISK_LOW event), NaN divergence (a LOSS_NAN event or a NaN loss line),
dataloader hang (a DataLoader worker line that timed out or died), stalled (a RUN_STALLED
event), killed or preempted (a signal, the job lost, a preemption line), then the plain exit
code with the last lines of stderr.

A next action that names a command writes it in backquotes, whole and as it runs
(``gpuplanectl job logs job_... --stream stderr``: this job's id, no placeholder), and only
where it would work (a resume only when a checkpoint is there to resume from); the rest is advice
in words.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from gpuplaned.domain.diagnosis import evidence as ev
from gpuplaned.domain.failures import OOM_MARKERS
from gpuplaned.protocol.job_states import WENT_WRONG, FailureReason, JobState

MAX_LINES = 5
_DISK = re.compile(r"No space left on device|ENOSPC|Disk quota exceeded", re.I)
_NAN = re.compile(r"\bloss\b.*\b(nan|inf)\b|\b(nan|inf)\b.*\bloss\b", re.I)
_LOADER = re.compile(r"DataLoader.*(timed out|exited unexpectedly|killed|hang)|"
                     r"(timed out|exited unexpectedly).*DataLoader", re.I)
_PREEMPT = re.compile(r"preempt", re.I)
_KILL_SIGNALS = ("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP")

Lines = Sequence[tuple[int, str]]


def explain_failure(job: Mapping[str, Any], logs: Mapping[str, Lines], *,
                    gpu: Mapping[int, Mapping[str, Sequence[Any]]] | None = None,
                    events: Sequence[Mapping[str, Any]] = (), resumable: bool = False) -> dict[str, Any]:
    """``job``: the job as the API shows it (``id``, ``status``, ``attempt``, ``exit_code``,
    ``failure_reason``, ``failure_message``, ``node_id``, ``run_id``); ``logs``: the attempt's
    last lines per stream, ``(byte offset, text)``; ``gpu``: per index ``{"ts",
    "memory_used_mb", "memory_total_mb", "utilization"}`` over the attempt; ``events``: its
    events; ``resumable``: a checkpoint of the job's is there to resume from."""
    reason = job.get("failure_reason") or ""
    status = job.get("status")
    if status not in WENT_WRONG and not reason:
        return _answer(job, "none", [], [], f"job {job['id']} is {status}: nothing failed")
    ctx = _Context(job, logs, gpu or {}, events, resumable)
    for cause, test in (("spawn_failure", _spawn), ("timeout", _timeout), ("oom", _oom), ("disk_full", _disk),
                        ("nan_divergence", _nan), ("dataloader_hang", _loader), ("stalled", _stalled),
                        ("killed_or_preempted", _killed)):
        found = test(ctx)
        if found is not None:
            return _answer(job, cause, *found)
    return _answer(job, "exit_code", *_exit_code(ctx))


class _Context:
    def __init__(self, job: Mapping[str, Any], logs: Mapping[str, Lines], gpu: Mapping[int, Any],
                 events: Sequence[Mapping[str, Any]], resumable: bool) -> None:
        self.job, self.logs, self.gpu, self.events, self.resumable = job, logs, gpu, events, resumable
        self.reason = job.get("failure_reason") or ""
        self.attempt = job.get("attempt") or 0

    def lines(self, pattern: Any) -> list[dict[str, Any]]:
        """A log pointer per stream to the lines matching ``pattern`` (a regex or substrings)."""
        out = []
        for stream in ("stderr", "stdout"):
            hits = [(o, t) for o, t in self.logs.get(stream, ()) if _matches(pattern, t)][-MAX_LINES:]
            if hits:
                out.append(ev.log(self.job["id"], self.attempt, stream, hits))
        return out

    def events_of(self, *types: str) -> list[dict[str, Any]]:
        return [ev.event(e["id"], e["type"]) for e in self.events if e.get("type") in types]

    def last_lines(self, stream: str = "stderr", count: int = 3) -> list[dict[str, Any]]:
        tail = [(o, t) for o, t in self.logs.get(stream, ()) if t.strip()][-count:]
        return [ev.log(self.job["id"], self.attempt, stream, tail)] if tail else []

    def retry(self, why: str) -> list[str]:
        """Queue it again: resumed from its last checkpoint when it has one, else afresh."""
        if self.resumable:
            return [f"{why}: {command('job', 'retry', self.job['id'], '--resume-from', 'last')}"]
        return [f"{why} (it has no checkpoint to resume from): {command('job', 'retry', self.job['id'])}"]


def command(*words: str) -> str:
    """A gpuplanectl command line as a next action writes it: in backquotes, runnable as it stands."""
    return "`" + " ".join(["gpuplanectl", *map(shlex.quote, words)]) + "`"


def _matches(pattern: Any, text: str) -> bool:
    if isinstance(pattern, tuple):
        return any(p in text for p in pattern)
    return bool(pattern.search(text))


Found = tuple[list[dict[str, Any]], list[str], str] | None


def _spawn(c: _Context) -> Found:
    if c.reason != FailureReason.SPAWN_FAILED:
        return None
    return (c.last_lines(), ["check the command exists and is executable on the node, and its cwd"],
            f"the command could not be started: {c.job.get('failure_message') or 'spawn failed'}")


def _timeout(c: _Context) -> Found:
    if c.reason != FailureReason.TIMEOUT:
        return None
    return (c.last_lines("stdout") + c.last_lines(), ["give it a longer timeout_s when you submit it again",
                                                      *c.retry("or go on where it stopped")],
            f"it ran past its timeout ({c.job.get('timeout_s')} s) and was stopped")


def _oom(c: _Context) -> Found:
    lines = c.lines(OOM_MARKERS)
    if c.reason != FailureReason.OOM and not lines:
        return None
    proofs = lines + _memory_peak(c)
    host = "kernel" in (c.job.get("failure_message") or "")
    what = "host memory (the kernel's OOM killer)" if host else "GPU memory"
    peak = next((p for p in proofs if p["kind"] == "gpu"), None)
    detail = f"; GPU {peak['gpu']} peaked at {peak['values'][0]:.0f} of {peak['total_mb']:.0f} MiB" if peak else ""
    line = f": {lines[0]['lines'][-1].strip()[:200]}" if lines else ""
    return (proofs, ["halve the batch size (or use gradient accumulation), enable activation checkpointing or "
                     "mixed precision", "to retry it with half the batch on an OOM, submit it with "
                     "on_oom = {retry = 1, env = {BATCH_SIZE = \"half\"}} in its job file"],
            f"out of {what}{line}{detail}")


def _memory_peak(c: _Context) -> list[dict[str, Any]]:
    out = []
    for index, s in sorted(c.gpu.items()):
        used = [(t, v) for t, v in zip(s.get("ts", ()), s.get("memory_used_mb", ())) if v is not None]
        if not used:
            continue
        t, v = max(used, key=lambda p: p[1])
        totals = [x for x in s.get("memory_total_mb", ()) if x is not None]
        out.append(ev.gpu(c.job.get("node_id") or "", index, f"gpu{index}.memory_used_mb", [t], [v])
                   | {"total_mb": max(totals) if totals else float("nan")})
    return out


CURVE_POINTS = 60  # an event's memory curve: enough to see the climb, small enough to store with it


def memory_curve(node_id: str, gpu: Mapping[int, Mapping[str, Sequence[Any]]]) -> list[dict[str, Any]]:
    """Each GPU's memory in use over the attempt (``gpu`` as ``explain_failure`` takes it), at most
    ``CURVE_POINTS`` values evenly picked, the peak always among them: an OOM event's evidence."""
    out = []
    for index, s in sorted(gpu.items()):
        used = [(t, v) for t, v in zip(s.get("ts", ()), s.get("memory_used_mb", ())) if v is not None]
        if not used:
            continue
        stride = max(1, -(-len(used) // CURVE_POINTS))
        peak = max(range(len(used)), key=lambda k: used[k][1])
        picked = sorted(set(range(0, len(used), stride)) | {peak, len(used) - 1})
        totals = [x for x in s.get("memory_total_mb", ()) if x is not None]
        out.append(ev.gpu(node_id, index, f"gpu{index}.memory_used_mb", [used[0][0], used[-1][0]],
                          [used[k][1] for k in picked])
                   | {"samples_ts": [used[k][0] for k in picked], "peak_mb": used[peak][1],
                      "total_mb": max(totals) if totals else None})
    return out


def _disk(c: _Context) -> Found:
    proofs = c.lines(_DISK) + c.events_of("DISK_LOW")
    if not proofs:
        return None
    prune = (f" (what pruning the run's old checkpoints would delete: {command('ckpt', 'prune', c.job['run_id'])}"
             ", then again with --yes)") if c.job.get("run_id") else ""
    return (proofs, [f"free space on the node{prune}, or write elsewhere"], "the disk filled up")


def _nan(c: _Context) -> Found:
    proofs = c.events_of("LOSS_NAN") + c.lines(_NAN)
    if not proofs:
        return None
    return (proofs, ["resume from a checkpoint before the NaN with a lower learning rate or gradient clipping"],
            "the loss diverged to NaN")


def _loader(c: _Context) -> Found:
    proofs = c.lines(_LOADER)
    if not proofs:
        return None
    return (proofs, ["lower DataLoader num_workers or set a timeout; check shared memory (/dev/shm) on the node"],
            "a DataLoader worker hung or died")


def _stalled(c: _Context) -> Found:
    proofs = c.events_of("RUN_STALLED")
    if not proofs:
        return None
    look = command("job", "logs", c.job["id"], "--tail", "50")
    return (proofs + c.last_lines("stdout"), [f"look at where its output stops: {look}",
                                              'to restart it next time it stalls, submit it with on_stalled = '
                                              '{after = "20m", action = "restart"} in its job file'],
            "the run stopped making progress")


def _killed(c: _Context) -> Found:
    signal = c.reason[len("SIGNAL("):-1] if c.reason.startswith("SIGNAL(") else None
    lines = c.lines(_PREEMPT)
    lost = c.reason in (FailureReason.LOST, FailureReason.SHIM_DIED) or c.job.get("status") == JobState.LOST
    if not (lines or lost or signal in _KILL_SIGNALS):
        return None
    proofs = lines + c.events_of("JOB_LOST", "AGENT_DISCONNECTED") + c.last_lines()
    why = ("preempted" if lines else f"killed by {signal}" if signal else "lost: its node or shim went away")
    return (proofs, c.retry("queue it again"), f"it was {why}")


def _exit_code(c: _Context) -> tuple[list[dict[str, Any]], list[str], str]:
    code = c.job.get("exit_code")
    signal = c.reason[len("SIGNAL("):-1] if c.reason.startswith("SIGNAL(") else None
    what = f"killed by {signal}" if signal else f"exit code {code}"
    read = command("job", "logs", c.job["id"], "--stream", "stderr", "--tail", "50")
    return (c.last_lines() or c.last_lines("stdout"), [f"read the end of its stderr: {read}"], f"it ended with {what}")


def _answer(job: Mapping[str, Any], cause: str, proofs: list[dict[str, Any]], actions: list[str],
            claim: str) -> dict[str, Any]:
    severity = "info" if cause == "none" else "critical"
    findings = [ev.finding("cause", severity, claim, *proofs, cause=cause)] if cause != "none" else []
    out = ev.report(findings, f"job {job['id']} attempt {job.get('attempt')}: {claim}", actions)
    out["cause"] = cause
    return out
