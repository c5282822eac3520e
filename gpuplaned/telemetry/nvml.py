"""The NVIDIA driver through nvidia-ml-py (``import pynvml``).

- One ``nvmlInit`` per process however many backends are open (inventory at start-up, the
  monitor later): a refcount under a lock, ``nvmlShutdown`` when the last one closes.
- Handles are looked up once and kept.
- A field the card does not support reads ``None`` and is not asked for again; the rest of
  the sample stands.
- Any other error on a GPU (``GpuIsLost``, ``Unknown``, ``ResetRequired`` ...) makes that
  GPU's sample ``error="gpu_lost: ..."``; the others still sample. The lost GPU's handle is
  dropped and looked up again later, after 0, 1, 3, 7 ... up to 31 skipped samples (about a
  minute at 2 s), so a GPU off the bus is neither hammered nor given up on.

pynvml is imported when a backend opens, not with this module: the CLI must not load it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from gpuplaned.protocol.agent import GpuInfo
from gpuplaned.telemetry.samples import Busy, EccErrors, GpuProcess, GpuSample

log = logging.getLogger("gpuplaned.telemetry.nvml")

_MIB = 1024 * 1024
_NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE_ulonglong

# nvml.h constants: C ABI, fixed for good.
_TEMPERATURE_GPU = 0
_CLOCK_SM = 1
_ECC_CORRECTED, _ECC_UNCORRECTED = 0, 1
_ECC_VOLATILE = 0

# Error codes (NVMLError.value) that say "this card or driver cannot tell you that": the
# field reads None and is not asked for again until the handle is looked up anew.
_UNSUPPORTED = frozenset({
    2,   # INVALID_ARGUMENT (e.g. a sensor the board does not have)
    3,   # NOT_SUPPORTED
    13,  # FUNCTION_NOT_FOUND (driver older than the binding)
    22,  # VGPU_ECC_NOT_SUPPORTED
    25,  # ARGUMENT_VERSION_MISMATCH
    26,  # DEPRECATED
})
# Codes that mean "not now": None this time, asked again next time.
_NOT_NOW = frozenset({4, 6, 21, 27})  # NO_PERMISSION, NOT_FOUND, NO_DATA, NOT_READY
# Any other code is the GPU failing as a whole.

# Clock event ("throttle") reason bits, nvml.h nvmlClocksEventReason*.
_REASONS = (
    (0x001, "idle"),
    (0x002, "applications_clocks"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal"),
    (0x040, "hw_thermal"),
    (0x080, "hw_power_brake"),
    (0x100, "display_clocks"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
_KNOWN_REASONS = sum(bit for bit, _ in _REASONS)

_MAX_SKIPPED = 31


def reason_names(mask: int) -> tuple[str, ...]:
    """Clock event reason bits as names; bits this table does not know come out as hex."""
    names = [name for bit, name in _REASONS if mask & bit]
    if mask & ~_KNOWN_REASONS:
        names.append(hex(mask & ~_KNOWN_REASONS))
    return tuple(names)


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine; the message says why (error class and text)."""


# --- one nvmlInit per process --------------------------------------------------------------

_init_lock = threading.Lock()
_users = 0


def _acquire(nvml: Any) -> None:
    global _users
    with _init_lock:
        if _users == 0:
            nvml.nvmlInit()
        _users += 1


def _release(nvml: Any) -> None:
    global _users
    with _init_lock:
        _users -= 1
        if _users == 0:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError as exc:
                log.debug("nvmlShutdown: %s", _describe(exc))


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _text(value: bytes | str) -> str:
    # Older bindings return bytes, newer ones str.
    return value.decode() if isinstance(value, bytes) else str(value)


# --- the backend ---------------------------------------------------------------------------


class _Gpu:
    """One GPU by index: who it is (once known) and its handle while it answers."""

    __slots__ = ("index", "info", "handle", "unsupported", "error", "failures", "skip")

    def __init__(self, index: int) -> None:
        self.index = index
        self.info: GpuInfo | None = None
        self.handle: Any = None
        self.unsupported: set[str] = set()
        self.error: str | None = None
        self.failures = 0  # in a row
        self.skip = 0  # samples to pass over before looking the handle up again


def open_nvml() -> NvmlGpus:
    """Init NVML (once per process) and identify the GPUs.

    Raises:
        NvmlUnavailable: no binding, no driver, or the driver does not answer.
    """
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(f"nvidia-ml-py is not installed ({exc})") from None
    try:
        _acquire(pynvml)
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(_describe(exc)) from None
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        _release(pynvml)
        raise NvmlUnavailable(_describe(exc)) from None
    return NvmlGpus(pynvml, count)


class NvmlGpus:
    kind = "nvml"

    def __init__(self, nvml: Any, count: int) -> None:
        self._nvml = nvml
        self._closed = False
        # The unversioned process call raises this instead of FUNCTION_NOT_FOUND.
        self._mismatch = getattr(nvml, "NVMLLibraryMismatchError", nvml.NVMLError)
        self._gpus = [_Gpu(index) for index in range(count)]
        for gpu in self._gpus:
            try:
                self._identify(gpu)
            except nvml.NVMLError as exc:
                self._failed(gpu, exc)
        # A GPU that fails at start stays out of the inventory (nothing is scheduled on it)
        # but is still sampled, so it shows up as lost.
        self.note = "; ".join(f"GPU {gpu.index} left out ({gpu.error})" for gpu in self._gpus if gpu.error)

    def inventory(self) -> tuple[GpuInfo, ...]:
        return tuple(gpu.info for gpu in self._gpus if gpu.info is not None and gpu.error is None)

    def sample(self, busy: Busy = frozenset()) -> tuple[GpuSample, ...]:
        return tuple(self._sample(gpu) for gpu in self._gpus)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _release(self._nvml)

    # --- one GPU ---

    def _identify(self, gpu: _Gpu) -> None:
        nvml = self._nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
        name = _text(nvml.nvmlDeviceGetName(handle))
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        total = nvml.nvmlDeviceGetMemoryInfo(handle).total
        gpu.info = GpuInfo(gpu.index, name, int(total // _MIB), uuid)
        gpu.handle = handle
        gpu.unsupported.clear()

    def _failed(self, gpu: _Gpu, exc: BaseException) -> None:
        if gpu.error is None:
            log.warning("GPU %d lost: %s", gpu.index, _describe(exc))
        gpu.handle = None
        gpu.error = f"gpu_lost: {_describe(exc)}"
        gpu.failures += 1
        gpu.skip = min(2 ** (gpu.failures - 1), _MAX_SKIPPED + 1) - 1

    def _sample(self, gpu: _Gpu) -> GpuSample:
        try:
            if gpu.handle is None:
                if gpu.skip > 0:
                    gpu.skip -= 1
                    return self._lost(gpu)
                self._identify(gpu)
            sample = self._read(gpu)
        except self._nvml.NVMLError as exc:
            self._failed(gpu, exc)
            return self._lost(gpu)
        if gpu.error is not None:
            log.warning("GPU %d is back", gpu.index)
            gpu.error, gpu.failures = None, 0
        return sample

    def _lost(self, gpu: _Gpu) -> GpuSample:
        info = gpu.info
        return GpuSample(gpu.index, info.uuid if info else None, info.model if info else "unknown",
                         memory_total_mb=info.memory_mb if info else None, error=gpu.error)

    def _read(self, gpu: _Gpu) -> GpuSample:
        get, h = self._get, gpu.handle
        assert gpu.info is not None
        utilization = get(gpu, "nvmlDeviceGetUtilizationRates", h)
        memory = self._memory(gpu)
        power = get(gpu, "nvmlDeviceGetPowerUsage", h)
        limit = get(gpu, "nvmlDeviceGetEnforcedPowerLimit", h)
        reasons = get(gpu, "nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None:
            reasons = get(gpu, "nvmlDeviceGetCurrentClocksThrottleReasons", h)
        corrected = get(gpu, "nvmlDeviceGetTotalEccErrors", h, _ECC_CORRECTED, _ECC_VOLATILE)
        uncorrected = get(gpu, "nvmlDeviceGetTotalEccErrors", h, _ECC_UNCORRECTED, _ECC_VOLATILE)
        return GpuSample(
            gpu.index, gpu.info.uuid, gpu.info.model,
            utilization_pct=utilization.gpu if utilization is not None else None,
            memory_used_mb=memory.used // _MIB if memory is not None else None,
            memory_total_mb=memory.total // _MIB if memory is not None else gpu.info.memory_mb,
            temperature_c=get(gpu, "nvmlDeviceGetTemperature", h, _TEMPERATURE_GPU),
            power_w=power / 1000 if power is not None else None,
            power_limit_w=limit / 1000 if limit is not None else None,
            sm_clock_mhz=get(gpu, "nvmlDeviceGetClockInfo", h, _CLOCK_SM),
            fan_pct=get(gpu, "nvmlDeviceGetFanSpeed", h),
            throttle_reasons=reason_names(reasons) if reasons else (),
            ecc_errors=None if corrected is None and uncorrected is None else EccErrors(corrected, uncorrected),
            processes=self._processes(gpu),
        )

    def _memory(self, gpu: _Gpu) -> Any:
        # v2 leaves the driver's reserved memory out of "used", as nvidia-smi does.
        version = getattr(self._nvml, "nvmlMemory_v2", None)
        if version is not None:
            memory = self._get(gpu, "nvmlDeviceGetMemoryInfo", gpu.handle, key="memory_v2", version=version)
            if memory is not None:
                return memory
        return self._get(gpu, "nvmlDeviceGetMemoryInfo", gpu.handle)

    def _processes(self, gpu: _Gpu) -> tuple[GpuProcess, ...]:
        # Newest first; a driver older than the binding lacks the newer entry points.
        for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                     "nvmlDeviceGetComputeRunningProcesses"):
            found = self._get(gpu, name, gpu.handle)
            if found is not None:
                return tuple(GpuProcess(int(p.pid), _memory_mb(p.usedGpuMemory)) for p in found)
        return ()

    def _get(self, gpu: _Gpu, name: str, *args: Any, key: str | None = None, **kwargs: Any) -> Any:
        """One NVML call; None when the GPU cannot tell. Raises NVMLError when the GPU fails."""
        key = key or name
        if key in gpu.unsupported:
            return None
        call: Callable[..., Any] | None = getattr(self._nvml, name, None)
        if call is None:  # a binding older than the call
            gpu.unsupported.add(key)
            return None
        try:
            return call(*args, **kwargs)
        except self._nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in _UNSUPPORTED:
                gpu.unsupported.add(key)
                return None
            if code in _NOT_NOW:
                return None
            raise
        except self._mismatch:
            gpu.unsupported.add(key)
            return None


def _memory_mb(used: int | None) -> int | None:
    return None if used is None or used >= _NOT_AVAILABLE else int(used // _MIB)
