"""One GPU's and one host's readings in a sampling period: frozen values, no behaviour.

The monitor takes them (``gpuplaned.telemetry``), and the API shows them in a node's snapshot
(``gpuplaned.protocol.node_replies``). Every reading may be ``None``: cards differ in what they
report (a passively cooled card has no fan; consumer cards have no ECC), and a field the card
does not support must not cost the rest of the sample.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class GpuProcess:
    pid: int  # as the driver sees it (host PID namespace)
    gpu_memory_mb: int | None  # None where the driver cannot tell (WDDM, MIG without rights)


@attrs.frozen
class EccErrors:
    """Volatile counts: since the last driver load."""

    corrected: int | None
    uncorrected: int | None


@attrs.frozen
class GpuSample:
    index: int
    uuid: str | None
    model: str
    utilization_pct: float | None = None
    memory_used_mb: int | None = None
    memory_total_mb: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    fan_pct: float | None = None
    throttle_reasons: tuple[str, ...] = ()  # e.g. ("sw_power_cap", "hw_thermal"), see nvml.py
    ecc_errors: EccErrors | None = None
    processes: tuple[GpuProcess, ...] = ()
    # Set when the GPU could not be read at all this period, as "gpu_lost: <why>"; the
    # readings are then None. The monitor turns it into a GPU_LOST event.
    error: str | None = None


@attrs.frozen
class DiskSample:
    label: str
    path: str
    used_bytes: int | None  # None: the path is missing or unreadable
    free_bytes: int | None
    total_bytes: int | None


@attrs.frozen
class HostSample:
    cpu_percent: float | None  # all cores together, 0-100, since the previous sample
    load1: float | None
    load5: float | None
    load15: float | None
    memory_used_mb: int | None  # total - available: what programs cannot have
    memory_total_mb: int | None
    swap_used_mb: int | None
    swap_total_mb: int | None
    disks: tuple[DiskSample, ...] = ()
    net_rx_bytes: int | None = None  # counters since boot, summed over non-loopback interfaces
    net_tx_bytes: int | None = None
