"""Where a node's GPUs come from: ``nvml`` (the driver), ``fake:N`` (tests, demos) or ``none``.

``auto`` picks nvml when the driver loads and none otherwise, and says which. Only the
inventory lives here (what the scheduler needs for slots); live readings belong to the
monitor.
"""

from __future__ import annotations

import logging
import re

import attrs

from gpuplaned.protocol.agent import GpuInfo

log = logging.getLogger("gpuplaned.gpus")

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
    if source.kind == "none":
        return Inventory("none", ())
    if source.kind == "fake":
        gpus = tuple(GpuInfo(i, source.fake_model, source.fake_memory_mb, f"GPU-fake-{i:04d}")
                     for i in range(source.count))
        return Inventory("fake", gpus)
    try:
        return Inventory("nvml", _nvml_inventory())
    except Exception as exc:  # noqa: BLE001 - pynvml raises NVMLError subclasses and OSError
        if source.kind == "nvml":
            raise RuntimeError(f"NVML is not usable: {exc}") from None
        return Inventory("none", (), note=f"no NVIDIA driver ({type(exc).__name__}: {exc})")


def _nvml_inventory() -> tuple[GpuInfo, ...]:
    import pynvml

    pynvml.nvmlInit()
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            gpus.append(GpuInfo(index, name, int(memory), uuid))
        return tuple(gpus)
    finally:
        pynvml.nvmlShutdown()
