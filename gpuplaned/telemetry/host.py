"""The host's CPU, memory, swap, disks and network through psutil."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from gpuplaned.telemetry.samples import DiskSample, HostSample

_MIB = 1024 * 1024


class HostSampler:
    """Not thread-safe: one caller at a time (it keeps the previous CPU times)."""

    def __init__(self, disk_paths: Mapping[str, Path]) -> None:
        self._disks = tuple((label, str(path)) for label, path in disk_paths.items())
        # CPU % is the busy share between two readings, so this first one only primes it.
        # Not psutil.cpu_percent(None): it keeps its baseline per calling thread, and the
        # monitor samples from whichever worker thread trio hands it.
        self._cpu_before = psutil.cpu_times()
        self._loopback: dict[str, bool] = {}

    def sample(self) -> HostSample:
        memory = psutil.virtual_memory()
        swap = psutil.swap_memory()
        try:
            load1, load5, load15 = os.getloadavg()
        except OSError:  # no load average on this system
            load1 = load5 = load15 = None
        rx, tx = self._network()
        return HostSample(
            cpu_percent=self._cpu_percent(),
            load1=load1, load5=load5, load15=load15,
            memory_used_mb=(memory.total - memory.available) // _MIB,
            memory_total_mb=memory.total // _MIB,
            swap_used_mb=swap.used // _MIB,
            swap_total_mb=swap.total // _MIB,
            disks=tuple(_disk(label, path) for label, path in self._disks),
            net_rx_bytes=rx, net_tx_bytes=tx,
        )

    def _cpu_percent(self) -> float | None:
        before, now = self._cpu_before, psutil.cpu_times()
        self._cpu_before = now
        total = _total(now) - _total(before)
        if total <= 0:  # two readings within one clock tick
            return None
        busy = total - (now.idle - before.idle) - (getattr(now, "iowait", 0.0) - getattr(before, "iowait", 0.0))
        return round(min(100.0, max(0.0, 100.0 * busy / total)), 1)

    def _network(self) -> tuple[int | None, int | None]:
        try:
            counters = psutil.net_io_counters(pernic=True)
        except OSError:
            return None, None
        rx = tx = 0
        for name, nic in counters.items():
            if not self._is_loopback(name):
                rx += nic.bytes_recv
                tx += nic.bytes_sent
        return rx, tx

    def _is_loopback(self, name: str) -> bool:
        known = self._loopback.get(name)
        if known is None:  # a new interface: ask once (an ioctl each, so not every sample)
            stats = psutil.net_if_stats()
            for nic, stat in stats.items():
                self._loopback[nic] = "loopback" in getattr(stat, "flags", "").split(",") or nic == "lo"
            known = self._loopback.setdefault(name, name == "lo")
        return known


def _total(times: Any) -> float:
    # On Linux guest time is already counted in user and nice (psutil and htop do the same).
    return sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


def _disk(label: str, path: str) -> DiskSample:
    try:
        usage = psutil.disk_usage(path)
    except OSError:  # missing, unmounted or unreadable: reported empty, not raised
        return DiskSample(label, path, None, None, None)
    return DiskSample(label, path, usage.used, usage.free, usage.total)
