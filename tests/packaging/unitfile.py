"""What a systemd service unit says about stopping and restarting its main process, and
systemd's rules for acting on it (systemd.kill(5), systemd.service(5)), so a test can play
systemd's part on a machine where PID 1 is not systemd.

Only what the packaged units use: ``KillMode=``, ``KillSignal=``, ``Restart=``,
``RestartPreventExitStatus=`` and ``ExecStart=``; any other key is read but not acted on.
"""

from __future__ import annotations

import shlex
import signal
from pathlib import Path

import attrs

# Signals systemd counts as a clean stop of the main process (systemd.service(5), SuccessExitStatus=).
CLEAN_SIGNALS = frozenset({signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE})


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """``{section: {key: [values in order]}}``: a key may repeat; ``#``/``;`` lines are comments;
    a trailing backslash continues the line. An empty assignment resets the key, as in systemd."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        if not sep or current is None:
            raise ValueError(f"not a unit-file line: {raw!r}")
        values = current.setdefault(key.strip(), [])
        if value.strip():
            values.append(value.strip())
        else:
            values.clear()
    return sections


def _exit_statuses(values: list[str]) -> tuple[frozenset[int], frozenset[signal.Signals]]:
    """Exit codes and signal names, kept apart: signals are IntEnums, and SIGHUP == 1."""
    codes: set[int] = set()
    signals: set[signal.Signals] = set()
    for word in " ".join(values).split():
        if word.isdigit():
            codes.add(int(word))
        else:
            signals.add(signal.Signals[word if word.startswith("SIG") else f"SIG{word}"])
    return frozenset(codes), frozenset(signals)


@attrs.frozen
class ServiceRules:
    """The ``[Service]`` keys that decide what happens to the main process and its children."""

    exec_start: tuple[str, ...]
    kill_mode: str = "control-group"
    kill_signal: signal.Signals = signal.SIGTERM
    restart: str = "no"
    restart_prevent_codes: frozenset[int] = frozenset()
    restart_prevent_signals: frozenset[signal.Signals] = frozenset()

    @classmethod
    def from_file(cls, path: Path) -> ServiceRules:
        service = parse_unit(path.read_text()).get("Service", {})

        def last(key: str) -> str | None:
            return service[key][-1] if service.get(key) else None

        if not service.get("ExecStart"):
            raise ValueError(f"{path}: no ExecStart=")
        codes, signals = _exit_statuses(service.get("RestartPreventExitStatus", []))
        return cls(
            exec_start=tuple(shlex.split(last("ExecStart") or "")),
            kill_mode=last("KillMode") or "control-group",
            kill_signal=signal.Signals[last("KillSignal") or "SIGTERM"],
            restart=last("Restart") or "no",
            restart_prevent_codes=codes,
            restart_prevent_signals=signals,
        )

    def stop_signals(self, main_pid: int, unit_pids: list[int]) -> list[tuple[int, signal.Signals]]:
        """What ``systemctl stop`` sends first: ``(pid, signal)`` for the main process and the
        other processes in the unit's cgroup (``unit_pids``), per ``KillMode=``."""
        others = [pid for pid in unit_pids if pid != main_pid]
        if self.kill_mode == "process":
            return [(main_pid, self.kill_signal)]
        if self.kill_mode == "mixed":  # the rest get SIGKILL once the main process has gone
            return [(main_pid, self.kill_signal)] + [(pid, signal.SIGKILL) for pid in others]
        if self.kill_mode == "control-group":
            return [(pid, self.kill_signal) for pid in [main_pid, *others]]
        if self.kill_mode == "none":
            return []
        raise ValueError(f"unknown KillMode={self.kill_mode}")

    def restarts_after(self, returncode: int) -> bool:
        """Whether systemd restarts the service after its main process ended on its own with
        ``returncode`` (``subprocess``'s: negative for a signal)."""
        killed_by = signal.Signals(-returncode) if returncode < 0 else None
        if killed_by is None and returncode in self.restart_prevent_codes:
            return False
        if killed_by is not None and killed_by in self.restart_prevent_signals:
            return False
        clean = returncode == 0 or killed_by in CLEAN_SIGNALS
        if self.restart == "always":
            return True
        if self.restart == "on-success":
            return clean
        if self.restart == "on-failure":
            return not clean
        if self.restart in ("on-abnormal", "on-abort"):
            return killed_by is not None and not clean
        return False
