"""A node sample as metric points: ``(name, value)``, readings that are None left out.

Per GPU ``i`` (every reading of a GPU that could not be read is None, so it has none)::

    gpu<i>.utilization        %
    gpu<i>.memory_used_mb     MiB
    gpu<i>.memory_total_mb    MiB
    gpu<i>.temperature_c      degrees C
    gpu<i>.power_w            W
    gpu<i>.power_limit_w      W (enforced limit)
    gpu<i>.sm_clock_mhz       MHz
    gpu<i>.fan_pct            %
    gpu<i>.ecc_corrected      volatile count
    gpu<i>.ecc_uncorrected    volatile count

Host::

    host.cpu_percent          % of all cores
    host.load1                1-minute load average
    host.memory_used_mb       MiB (total - available)
    host.swap_used_mb         MiB
    host.disk.<label>.free_bytes
    host.disk.<label>.used_bytes
    host.net_rx_bytes         counter since boot, non-loopback interfaces
    host.net_tx_bytes         counter since boot
"""

from __future__ import annotations

from functools import cache

from gpuplaned.telemetry.samples import GpuSample, HostSample, NodeSample

Point = tuple[str, float]


@cache
def _gpu_names(index: int) -> tuple[str, ...]:
    # Built once per GPU: the monitor flattens every 2 s, the names never change.
    return tuple(f"gpu{index}.{field}" for field in (
        "utilization", "memory_used_mb", "memory_total_mb", "temperature_c", "power_w",
        "power_limit_w", "sm_clock_mhz", "fan_pct", "ecc_corrected", "ecc_uncorrected"))


def gpu_points(gpu: GpuSample) -> list[Point]:
    ecc = gpu.ecc_errors
    values = (gpu.utilization_pct, gpu.memory_used_mb, gpu.memory_total_mb, gpu.temperature_c, gpu.power_w,
              gpu.power_limit_w, gpu.sm_clock_mhz, gpu.fan_pct,
              ecc.corrected if ecc else None, ecc.uncorrected if ecc else None)
    return [(name, value) for name, value in zip(_gpu_names(gpu.index), values) if value is not None]


def host_points(host: HostSample) -> list[Point]:
    points = [("host.cpu_percent", host.cpu_percent), ("host.load1", host.load1),
              ("host.memory_used_mb", host.memory_used_mb), ("host.swap_used_mb", host.swap_used_mb)]
    for disk in host.disks:
        points.append((f"host.disk.{disk.label}.free_bytes", disk.free_bytes))
        points.append((f"host.disk.{disk.label}.used_bytes", disk.used_bytes))
    points.append(("host.net_rx_bytes", host.net_rx_bytes))
    points.append(("host.net_tx_bytes", host.net_tx_bytes))
    return [(name, value) for name, value in points if value is not None]


def node_points(sample: NodeSample) -> list[Point]:
    points = [point for gpu in sample.gpus for point in gpu_points(gpu)]
    if sample.host is not None:
        points.extend(host_points(sample.host))
    return points
