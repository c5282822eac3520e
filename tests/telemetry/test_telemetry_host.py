"""The host sampler on this machine: sane values, a missing disk path survived."""

from __future__ import annotations

import threading

from gpuplaned.telemetry.host import HostSampler
from gpuplaned.telemetry.samples import DiskSample


def test_a_sample_of_this_host(tmp_path):
    sampler = HostSampler({"tmp": tmp_path, "gone": tmp_path / "no-such-dir"})
    sample = sampler.sample()
    assert sample.cpu_percent is None or 0.0 <= sample.cpu_percent <= 100.0
    assert all(load >= 0 for load in (sample.load1, sample.load5, sample.load15))
    assert 0 < sample.memory_used_mb <= sample.memory_total_mb
    assert 0 <= sample.swap_used_mb <= max(sample.swap_total_mb, 0)
    tmp, gone = sample.disks
    assert (tmp.label, tmp.path) == ("tmp", str(tmp_path))
    assert tmp.total_bytes > 0 and 0 <= tmp.free_bytes <= tmp.total_bytes and tmp.used_bytes >= 0
    assert gone == DiskSample("gone", str(tmp_path / "no-such-dir"), None, None, None)
    assert sample.net_rx_bytes >= 0 and sample.net_tx_bytes >= 0


def test_cpu_percent_comes_once_cpu_time_has_passed():
    sampler = HostSampler({})
    sampler.sample()
    for _ in range(10_000):  # until the kernel's CPU counters have moved (a clock tick)
        sum(range(2000))
        percent = sampler.sample().cpu_percent
        if percent is not None:
            break
    assert percent is not None and 0.0 <= percent <= 100.0


def test_any_thread_may_sample():
    # The monitor samples from whichever worker thread trio gives it.
    sampler = HostSampler({})
    results = []
    thread = threading.Thread(target=lambda: results.append(sampler.sample()))
    thread.start()
    thread.join()
    assert results[0].memory_total_mb > 0
