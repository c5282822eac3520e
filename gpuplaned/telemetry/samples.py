"""What one sampling period sees: frozen values, no behaviour.

Every reading may be ``None``: cards differ in what they report (a passively cooled card has
no fan; consumer cards have no ECC), and a field the card does not support must not cost the
rest of the sample.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

import attrs

# What a GPU sample is taken against: GPU index -> how hard the job owning it works (0..1),
# or a plain set of busy indexes (1.0 each). Only the fake backend looks at it: real GPUs
# show what really runs on them.
Busy = Mapping[int, float] | Set[int]


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


def _errors_of(sample: NodeSample) -> tuple[str, ...]:
    return tuple(f"gpu{gpu.index}: {gpu.error}" for gpu in sample.gpus if gpu.error)


@attrs.frozen
class NodeSample:
    ts_ms: int  # wall clock, a data field only
    gpus: tuple[GpuSample, ...]
    host: HostSample | None
    backend: str  # "nvml", "fake" or "none"
    # One line per GPU that could not be read ("gpu3: gpu_lost: GPU is lost"); filled from
    # ``gpus`` unless given, so the monitor can set the node's status without a second look.
    gpu_errors: tuple[str, ...] = attrs.field(default=attrs.Factory(_errors_of, takes_self=True))
