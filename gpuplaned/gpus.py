"""Where a node's GPUs come from: ``nvml`` (the driver), ``fake:N`` (tests, demos) or ``none``.

``auto`` picks nvml when the driver loads and none otherwise, and says which. Only the
inventory lives here (what the scheduler needs for slots); the backends and live readings
are in ``gpuplaned.telemetry``.
"""

from __future__ import annotations

import re

import attrs

from gpuplaned.protocol.agent import GpuInfo
from gpuplaned.telemetry.backend import open_backend

_FAKE = re.compile(r"^fake:(\d{1,3})$")


@attrs.frozen
class GpuSource:
    kind: str  # "auto", "nvml", "fake" or "none"
    count: int = 0  # for fake
    fake_model: str = "Fake GPU 80GB"
    fake_memory_mb: int = 81920


def parse_gpus(value: str) -> GpuSource:
    """Parse ``auto``, ``nvml``, ``none`` or ``fake:N``; ValueError names the problem."""
    if value in ("auto", "nvml", "none"):
        return GpuSource(value)
    match = _FAKE.match(value)
    if match:
        count = int(match.group(1))
        if not 1 <= count <= 64:
            raise ValueError(f"fake GPU count must be 1..64, got {count}")
        return GpuSource("fake", count)
    raise ValueError(f"must be auto, nvml, none or fake:N; got {value!r}")


@attrs.frozen
class Inventory:
    backend: str  # what was actually used: "nvml", "fake" or "none"
    gpus: tuple[GpuInfo, ...]
    note: str = ""


def inventory(source: GpuSource) -> Inventory:
    """The node's GPUs.

    Raises:
        RuntimeError: ``nvml`` was asked for explicitly and the driver cannot be used.
    """
    backend = open_backend(source)
    try:
        return Inventory(backend.kind, backend.inventory(), note=backend.note)
    finally:
        backend.close()
