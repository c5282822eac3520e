"""One interface over the GPU sources: ``nvml`` (the driver), ``fake:N`` and ``none``.

``auto`` opens nvml when ``nvmlInit`` works and falls back to none, saying why in ``note``;
an explicit ``nvml`` that cannot be used is an error, because the operator asked for it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

import attrs

from gpuplaned.protocol.agent import GpuInfo
from gpuplaned.telemetry.fake import FakeGpus
from gpuplaned.telemetry.nvml import NvmlUnavailable, open_nvml
from gpuplaned.telemetry.samples import Busy, GpuSample

_FAKE = re.compile(r"^fake:(\d{1,3})$")


@attrs.frozen
class GpuSource:
    """Which backend to open: ``[node] gpus`` / ``--gpus``."""

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


class GpuBackend(Protocol):
    """Not thread-safe: one caller at a time (the monitor's worker thread)."""

    kind: str  # "nvml", "fake" or "none"
    note: str  # why this kind was picked, when it is not the obvious one

    def inventory(self) -> tuple[GpuInfo, ...]: ...

    def sample(self, busy: Busy = frozenset()) -> tuple[GpuSample, ...]:
        """Read every GPU once. Never raises for a GPU gone bad: its sample carries ``error``."""
        ...

    def close(self) -> None: ...


class NoGpus:
    kind = "none"

    def __init__(self, note: str = "") -> None:
        self.note = note

    def inventory(self) -> tuple[GpuInfo, ...]:
        return ()

    def sample(self, busy: Busy = frozenset()) -> tuple[GpuSample, ...]:
        return ()

    def close(self) -> None:
        pass


def open_backend(source: GpuSource, *, fake_claims_dir: Path | None = None) -> GpuBackend:
    """Open the backend ``source`` names; close it when done.

    Raises:
        RuntimeError: ``nvml`` was asked for explicitly and the driver cannot be used.
    """
    if source.kind == "none":
        return NoGpus()
    if source.kind == "fake":
        return FakeGpus(source.count, source.fake_model, source.fake_memory_mb, claims_dir=fake_claims_dir)
    try:
        return open_nvml()
    except NvmlUnavailable as exc:
        if source.kind == "nvml":
            raise RuntimeError(f"NVML is not usable: {exc}") from None
        return NoGpus(note=f"no NVIDIA driver ({exc})")
