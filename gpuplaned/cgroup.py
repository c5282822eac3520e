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
    counter = oom_kill_file(proc_self_cgroup, root)
    return None if counter is None else read_oom_kills(counter)


def oom_kill_file(proc_self_cgroup: Path = Path("/proc/self/cgroup"),
                  root: Path = Path("/sys/fs/cgroup")) -> Path | None:
    """The file that holds our memory cgroup's OOM-kill counter; None if there is none.

    A process stays in its cgroup, so this can be looked up once and read many times.
    """
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
        if read_oom_kills(candidate) is not None:
            return candidate
    return None


def read_oom_kills(counter: Path) -> int | None:
    """The OOM-kill count in ``counter`` (from ``oom_kill_file``); None if it cannot be read."""
    try:
        return _counter(counter.read_text())
    except OSError:
        return None
