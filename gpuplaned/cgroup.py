"""The kernel's OOM-kill counter for our memory cgroup, to tell an OOM kill from any other SIGKILL.

Jobs inherit the daemon's cgroup. When a job dies of SIGKILL that we did not send and the
counter rose while it ran, the kernel's OOM killer is the likely cause. Works with cgroup
v2 (``memory.events``) and v1 (``memory.oom_control``), including hybrid layouts.
"""

from __future__ import annotations

from pathlib import Path


def _counter(text: str) -> int | None:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def oom_kill_count(proc_self_cgroup: Path = Path("/proc/self/cgroup"),
                   root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """How many processes the OOM killer has killed in our memory cgroup; None if unknown."""
    try:
        lines = proc_self_cgroup.read_text().splitlines()
    except OSError:
        return None
    candidates: list[Path] = []
    for line in lines:
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        relative = path.lstrip("/")
        if controllers == "":
            candidates += [root / relative / "memory.events", root / "unified" / relative / "memory.events"]
        elif "memory" in controllers.split(","):
            candidates.append(root / "memory" / relative / "memory.oom_control")
    for candidate in candidates:
        try:
            count = _counter(candidate.read_text())
        except OSError:
            continue
        if count is not None:
            return count
    return None
