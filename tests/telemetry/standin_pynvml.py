"""A stand-in for nvidia-ml-py's ``pynvml`` module, with GPUs whose state a test controls.

It returns what the real binding returns (its own ctypes structs for memory and utilization,
its friendly objects for processes, ints in mW for power, ``str`` or ``bytes`` names) and
raises the real binding's exception classes, so ``except pynvml.NVMLError`` and
``exc.value`` behave as on a real machine. Install it with
``monkeypatch.setitem(sys.modules, "pynvml", module)``.
"""

from __future__ import annotations

import types
from collections import Counter

import attrs
import pynvml as real

MIB = 1024 * 1024


@attrs.define
class StandinGpu:
    name: str | bytes = "NVIDIA H100 80GB HBM3"
    uuid: str | bytes = "GPU-00000000-0000-0000-0000-000000000000"
    total_mb: int = 81559
    used_mb: int = 1000
    reserved_mb: int = 500  # counted in v1 "used", left out of v2
    utilization: int = 0
    temperature: int = 35
    power_mw: int = 70_000
    power_limit_mw: int = 700_000
    sm_clock: int = 1980
    fan: int = 40
    reasons: int = 0x1
    ecc: tuple[int, int] = (0, 0)
    processes: list[tuple[int, int | None]] = attrs.Factory(list)  # (pid, bytes or None)
    # Calls that answer NOT_SUPPORTED (FUNCTION_NOT_FOUND for the versioned entry points),
    # by short name: fan, ecc, power_limit, temperature, event_reasons, memory_v2, processes_v3...
    unsupported: set[str] = attrs.Factory(set)
    fail_code: int | None = None  # every call on this GPU fails with it (15: GPU_IS_LOST)


class StandinNvml(types.ModuleType):
    # The real binding's exception classes and constants.
    NVMLError = real.NVMLError
    NVMLLibraryMismatchError = real.NVMLLibraryMismatchError
    NVMLError_LibraryNotFound = real.NVMLError_LibraryNotFound
    NVMLError_NotSupported = real.NVMLError_NotSupported
    NVMLError_GpuIsLost = real.NVMLError_GpuIsLost
    NVMLError_Uninitialized = real.NVMLError_Uninitialized
    nvmlMemory_v2 = real.nvmlMemory_v2
    NVML_TEMPERATURE_GPU = real.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = real.NVML_CLOCK_SM

    def __init__(self, gpus: list[StandinGpu], *, driver: bool = True, count_error: int | None = None) -> None:
        super().__init__("pynvml")
        self.gpus = gpus
        self.driver = driver
        self.count_error = count_error
        self.refcount = 0  # the real library's own count of init - shutdown
        self.calls: Counter[str] = Counter()

    # --- library ---

    def nvmlInit(self) -> None:
        self.calls["init"] += 1
        if not self.driver:
            raise real.NVMLError(real.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.refcount += 1

    def nvmlShutdown(self) -> None:
        self.calls["shutdown"] += 1
        self._initialized()
        self.refcount -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._initialized()
        if self.count_error is not None:
            raise real.NVMLError(self.count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[str, int]:
        self.calls["handle"] += 1
        self._initialized()
        if not 0 <= index < len(self.gpus):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        self._check(index, "handle")
        return ("handle", index)

    # --- identity ---

    def nvmlDeviceGetName(self, handle):
        return self._gpu(handle, "name").name

    def nvmlDeviceGetUUID(self, handle):
        return self._gpu(handle, "uuid").uuid

    # --- readings ---

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        if version is None:
            gpu = self._gpu(handle, "memory")
            used = (gpu.used_mb + gpu.reserved_mb) * MIB
            return real.c_nvmlMemory_t(total=gpu.total_mb * MIB, free=gpu.total_mb * MIB - used, used=used)
        gpu = self._gpu(handle, "memory_v2", absent=True)
        used, reserved = gpu.used_mb * MIB, gpu.reserved_mb * MIB
        return real.c_nvmlMemory_v2_t(version=version, total=gpu.total_mb * MIB, reserved=reserved,
                                      free=gpu.total_mb * MIB - used - reserved, used=used)

    def nvmlDeviceGetUtilizationRates(self, handle):
        gpu = self._gpu(handle, "utilization")
        return real.c_nvmlUtilization_t(gpu=gpu.utilization, memory=gpu.utilization // 2)

    def nvmlDeviceGetTemperature(self, handle, sensor):
        assert sensor == real.NVML_TEMPERATURE_GPU
        return self._gpu(handle, "temperature").temperature

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._gpu(handle, "power").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return self._gpu(handle, "power_limit").power_limit_mw

    def nvmlDeviceGetClockInfo(self, handle, clock_type):
        assert clock_type == real.NVML_CLOCK_SM
        return self._gpu(handle, "sm_clock").sm_clock

    def nvmlDeviceGetFanSpeed(self, handle):
        return self._gpu(handle, "fan").fan

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self._gpu(handle, "event_reasons", absent=True).reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self._gpu(handle, "throttle_reasons").reasons

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type):
        assert counter_type == real.NVML_VOLATILE_ECC
        return self._gpu(handle, "ecc").ecc[error_type]

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle):
        return self._processes(self._gpu(handle, "processes_v3", absent=True))

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle):
        return self._processes(self._gpu(handle, "processes_v2", absent=True))

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        # Unversioned: the real one turns FUNCTION_NOT_FOUND into NVMLLibraryMismatchError.
        gpu = self.gpus[handle[1]]
        if "processes" in gpu.unsupported:
            raise real.NVMLLibraryMismatchError("Unversioned function called ...")
        return self._processes(self._gpu(handle, "processes"))

    # --- plumbing ---

    def _processes(self, gpu: StandinGpu) -> list:
        found = []
        for pid, used in gpu.processes:
            obj = real.nvmlStructToFriendlyObject(real.c_nvmlProcessInfo_v2_t(pid=pid, usedGpuMemory=used or 0))
            if used is None:  # as the real call does for NVML_VALUE_NOT_AVAILABLE
                obj.usedGpuMemory = None
            found.append(obj)
        return found

    def _initialized(self) -> None:
        if self.refcount <= 0:
            raise real.NVMLError(real.NVML_ERROR_UNINITIALIZED)

    def _check(self, index: int, what: str, absent: bool = False) -> StandinGpu:
        gpu = self.gpus[index]
        if gpu.fail_code is not None:
            raise real.NVMLError(gpu.fail_code)
        if what in gpu.unsupported:
            raise real.NVMLError(real.NVML_ERROR_FUNCTION_NOT_FOUND if absent else real.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _gpu(self, handle, what: str, absent: bool = False) -> StandinGpu:
        self.calls[what] += 1
        self._initialized()
        assert handle[0] == "handle"
        return self._check(handle[1], what, absent)
