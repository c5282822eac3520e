"""The nvml backend: against the real binding where this machine has no driver, and against
a stand-in ``pynvml`` (same structs, same exception classes) for everything a real card does."""

from __future__ import annotations

import sys

import pynvml
import pytest
from standin_pynvml import MIB, StandinGpu, StandinNvml

from gpuplaned.gpus import Inventory, inventory
from gpuplaned.protocol.agent import GpuInfo
from gpuplaned.telemetry import nvml
from gpuplaned.telemetry.backend import GpuSource, open_backend, parse_gpus
from gpuplaned.telemetry.samples import EccErrors, GpuProcess


def _driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


no_driver = pytest.mark.skipif(_driver_present(), reason="this machine has an NVIDIA driver")


@pytest.fixture(autouse=True)
def no_leaked_users():
    yield
    assert nvml._users == 0, "a test left an nvml backend open"


@pytest.fixture
def install(monkeypatch):
    def install(gpus: list[StandinGpu], **kwargs) -> StandinNvml:
        module = StandinNvml(gpus, **kwargs)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module
    return install


def two_gpus() -> list[StandinGpu]:
    return [
        StandinGpu(name="NVIDIA H200", uuid="GPU-aaaa", utilization=73, processes=[(4242, 2048 * MIB), (4243, None)]),
        StandinGpu(name=b"NVIDIA A100-SXM4-40GB", uuid=b"GPU-bbbb", total_mb=40960),
    ]


# --- the real binding, no driver on this machine ---


@no_driver
def test_auto_without_a_driver_is_none_and_says_why():
    backend = open_backend(GpuSource("auto"))
    try:
        assert backend.kind == "none"
        assert backend.note == "no NVIDIA driver (NVMLError_LibraryNotFound: NVML Shared Library Not Found)"
        assert backend.inventory() == ()
        assert backend.sample() == ()
    finally:
        backend.close()
    inv = inventory(GpuSource("auto"))
    assert (inv.backend, inv.gpus, inv.note) == ("none", (), backend.note)


@no_driver
def test_explicit_nvml_without_a_driver_is_an_error():
    with pytest.raises(RuntimeError, match=r"^NVML is not usable: NVMLError_LibraryNotFound: NVML Shared Library"):
        open_backend(GpuSource("nvml"))
    with pytest.raises(RuntimeError, match="NVML is not usable"):
        inventory(GpuSource("nvml"))


def test_inventory_of_fake_and_none_is_unchanged():
    assert inventory(parse_gpus("none")) == Inventory("none", ())
    inv = inventory(parse_gpus("fake:2"))
    assert inv == Inventory("fake", (GpuInfo(0, "Fake GPU 80GB", 81920, "GPU-fake-0000"),
                                     GpuInfo(1, "Fake GPU 80GB", 81920, "GPU-fake-0001")))


# --- the stand-in ---


def test_stand_in_without_a_driver(install):
    install([], driver=False)
    assert open_backend(GpuSource("auto")).note.startswith("no NVIDIA driver (NVMLError_LibraryNotFound")
    with pytest.raises(RuntimeError, match="NVMLError_LibraryNotFound"):
        open_backend(GpuSource("nvml"))


def test_inventory_and_a_full_sample(install):
    fake = install(two_gpus())
    fake.gpus[1].reasons = 0x4 | 0x40 | 0x1000
    fake.gpus[1].ecc = (3, 1)
    inv = inventory(GpuSource("nvml"))
    assert inv == Inventory("nvml", (GpuInfo(0, "NVIDIA H200", 81559, "GPU-aaaa"),
                                     GpuInfo(1, "NVIDIA A100-SXM4-40GB", 40960, "GPU-bbbb")))
    backend = open_backend(GpuSource("auto"))
    try:
        first, second = backend.sample()
    finally:
        backend.close()
    assert first.utilization_pct == 73
    assert (first.memory_used_mb, first.memory_total_mb) == (1000, 81559)  # v2: reserved left out
    assert (first.temperature_c, first.power_w, first.power_limit_w) == (35, 70.0, 700.0)
    assert (first.sm_clock_mhz, first.fan_pct, first.throttle_reasons) == (1980, 40, ("idle",))
    assert first.ecc_errors == EccErrors(0, 0)
    assert first.processes == (GpuProcess(4242, 2048), GpuProcess(4243, None))
    assert first.error is None
    assert (second.model, second.uuid) == ("NVIDIA A100-SXM4-40GB", "GPU-bbbb")
    assert second.throttle_reasons == ("sw_power_cap", "hw_thermal", "0x1000")
    assert second.ecc_errors == EccErrors(3, 1)


def test_unsupported_fields_read_none_and_are_not_asked_again(install):
    gpu = StandinGpu(unsupported={"fan", "ecc", "power_limit", "temperature", "memory_v2", "event_reasons",
                                  "processes_v3"}, processes=[(7, 5 * MIB)])
    fake = install([gpu])
    backend = open_backend(GpuSource("nvml"))
    try:
        for _ in range(3):
            (sample,) = backend.sample()
            assert sample.error is None
            assert (sample.fan_pct, sample.ecc_errors, sample.power_limit_w, sample.temperature_c) == (None,) * 4
            assert sample.memory_used_mb == 1500  # the v1 figure, reserved included
            assert sample.throttle_reasons == ("idle",)  # from the older call
            assert sample.processes == (GpuProcess(7, 5),)  # from _v2
            assert sample.utilization_pct == 0 and sample.power_w == 70.0
    finally:
        backend.close()
    assert fake.calls["fan"] == fake.calls["ecc"] == fake.calls["memory_v2"] == fake.calls["processes_v3"] == 1
    assert fake.calls["utilization"] == 3


def test_no_process_call_at_all_means_no_processes(install):
    install([StandinGpu(unsupported={"processes_v3", "processes_v2", "processes"}, processes=[(7, 0)])])
    backend = open_backend(GpuSource("nvml"))
    try:
        assert backend.sample()[0].processes == ()
        assert backend.sample()[0].error is None
    finally:
        backend.close()


@pytest.mark.parametrize("code, name", [(pynvml.NVML_ERROR_GPU_IS_LOST, "NVMLError_GpuIsLost"),
                                        (pynvml.NVML_ERROR_UNKNOWN, "NVMLError_Unknown")])
def test_a_gpu_lost_mid_run_is_reported_and_retried(install, code, name):
    fake = install(two_gpus())
    backend = open_backend(GpuSource("nvml"))
    try:
        assert [s.error for s in backend.sample()] == [None, None]
        fake.gpus[1].fail_code = code
        lost_streak = [backend.sample() for _ in range(20)]
        for healthy, lost in lost_streak:
            assert healthy.error is None and healthy.utilization_pct == 73
            assert lost.error == f"gpu_lost: {name}: {pynvml.NVMLError(code)}"
            assert (lost.index, lost.uuid, lost.model) == (1, "GPU-bbbb", "NVIDIA A100-SXM4-40GB")
            assert lost.utilization_pct is None and lost.processes == ()
        # Looked up again with growing gaps, not on every sample.
        retries = fake.calls["handle"] - 2
        assert 3 <= retries < 10
        fake.gpus[1].fail_code = None
        for _ in range(40):
            back = backend.sample()[1]
            if back.error is None:
                break
        assert back.error is None and back.memory_total_mb == 40960
        assert backend.inventory()[1] == GpuInfo(1, "NVIDIA A100-SXM4-40GB", 40960, "GPU-bbbb")
    finally:
        backend.close()


def test_a_gpu_lost_at_start_is_left_out_of_the_inventory_but_sampled(install):
    fake = install(two_gpus())
    fake.gpus[0].fail_code = pynvml.NVML_ERROR_GPU_IS_LOST
    backend = open_backend(GpuSource("nvml"))
    try:
        assert [g.index for g in backend.inventory()] == [1]
        assert backend.note == "GPU 0 left out (gpu_lost: NVMLError_GpuIsLost: GPU is lost)"
        lost, fine = backend.sample()
        assert lost.model == "unknown" and lost.error.startswith("gpu_lost: NVMLError_GpuIsLost")
        assert fine.error is None
    finally:
        backend.close()


def test_one_init_per_process_however_many_backends(install):
    fake = install(two_gpus())
    first = open_backend(GpuSource("nvml"))
    second = open_backend(GpuSource("auto"))
    inventory(GpuSource("nvml"))
    assert fake.calls["init"] == 1 and fake.calls["shutdown"] == 0
    first.close()
    first.close()  # twice is once
    assert fake.calls["shutdown"] == 0
    assert len(second.sample()) == 2
    second.close()
    assert fake.calls["shutdown"] == 1 and fake.refcount == 0
    open_backend(GpuSource("nvml")).close()
    assert fake.calls["init"] == 2


def test_a_driver_that_fails_after_init_releases_it(install):
    fake = install(two_gpus(), count_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(RuntimeError, match="NVMLError_DriverNotLoaded"):
        open_backend(GpuSource("nvml"))
    assert fake.refcount == 0 and fake.calls["shutdown"] == 1


def test_reason_names():
    assert nvml.reason_names(0) == ()
    assert nvml.reason_names(0x8 | 0x20 | 0x80) == ("hw_slowdown", "sw_thermal", "hw_power_brake")
