"""Node samples flattened to metric points."""

from __future__ import annotations

from gpuplaned.telemetry.fake import FakeGpus
from gpuplaned.telemetry.names import node_points
from gpuplaned.telemetry.samples import DiskSample, EccErrors, GpuSample, HostSample, NodeSample

HOST = HostSample(cpu_percent=12.5, load1=0.5, load5=0.4, load15=None, memory_used_mb=2048, memory_total_mb=8192,
                  swap_used_mb=0, swap_total_mb=0,
                  disks=(DiskSample("home", "/home", 10, 90, 100), DiskSample("gone", "/x", None, None, None)),
                  net_rx_bytes=5, net_tx_bytes=None)


def test_every_name_with_a_value_and_none_without():
    gpu = GpuSample(0, "GPU-a", "H200", utilization_pct=50.0, memory_used_mb=1000, memory_total_mb=143771,
                    temperature_c=40, power_w=300.5, power_limit_w=700.0, sm_clock_mhz=1980, fan_pct=None,
                    ecc_errors=EccErrors(2, None))
    lost = GpuSample(1, "GPU-b", "H200", memory_total_mb=143771, error="gpu_lost: NVMLError_GpuIsLost: GPU is lost")
    sample = NodeSample(1_700_000_000_000, (gpu, lost), HOST, "nvml")
    assert node_points(sample) == [
        ("gpu0.utilization", 50.0), ("gpu0.memory_used_mb", 1000), ("gpu0.memory_total_mb", 143771),
        ("gpu0.temperature_c", 40), ("gpu0.power_w", 300.5), ("gpu0.power_limit_w", 700.0),
        ("gpu0.sm_clock_mhz", 1980), ("gpu0.ecc_corrected", 2),
        ("gpu1.memory_total_mb", 143771),
        ("host.cpu_percent", 12.5), ("host.load1", 0.5), ("host.memory_used_mb", 2048), ("host.swap_used_mb", 0),
        ("host.disk.home.free_bytes", 90), ("host.disk.home.used_bytes", 10), ("host.net_rx_bytes", 5),
    ]
    assert sample.gpu_errors == ("gpu1: gpu_lost: NVMLError_GpuIsLost: GPU is lost",)


def test_a_fake_node_without_host():
    sample = NodeSample(0, FakeGpus(2, "Fake", 1000).sample({1}), None, "fake")
    names = [name for name, _ in node_points(sample)]
    assert len(names) == 20 and names[0] == "gpu0.utilization" and names[-1] == "gpu1.ecc_uncorrected"
    assert sample.gpu_errors == ()
