"""Where a node's GPUs come from: ``nvml`` (the driver), ``fake:N`` (tests, demos) or ``none``.

``auto`` picks nvml when the driver loads and none otherwise, and says which. Only the
inventory lives here (what the scheduler needs for slots); the source a node names
(``GpuSource``), the backends and live readings are in ``gpuplaned.telemetry``.
"""

from __future__ import annotations

import attrs

from gpuplaned.protocol.agent import GpuInfo
from gpuplaned.telemetry.backend import GpuSource, open_backend


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
