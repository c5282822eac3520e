"""One interface over the GPU sources: ``nvml`` (the driver), ``fake:N`` and ``none``.

``auto`` opens nvml when ``nvmlInit`` works and falls back to none, saying why in ``note``;
an explicit ``nvml`` that cannot be used is an error, because the operator asked for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gpuplaned.protocol.agent import GpuInfo
from gpuplaned.telemetry.fake import FakeGpus
from gpuplaned.telemetry.nvml import NvmlUnavailable, open_nvml
from gpuplaned.telemetry.samples import Busy, GpuSample

if TYPE_CHECKING:  # gpus.py imports this module
    from gpuplaned.gpus import GpuSource


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
