"""``fake:N``: synthetic GPUs for tests, demos and machines without a GPU.

Deterministic: the readings depend only on the sequence of ``busy`` sets passed to
``sample`` (no clock, no randomness). A busy GPU's load eases toward its target (half the gap
each sample), so utilization climbs to ~90 % and memory to ~60 % within a few samples and
falls back the same way once idle; a small wobble keeps the charts honest-looking.
Temperature, power, clock and fan follow the load.

Fake compute processes: a process claims a fake GPU by creating the file
``<claims_dir>/<gpu index>/<pid>`` (empty, or holding the MiB of GPU memory it uses; see
``claim``). Each sample lists the claims, deletes those whose process is gone, and reports
the rest as that GPU's ``processes``, so attribution can be tested with real processes.

A fake GPU "falls off the bus" while the file ``<claims_dir>/<gpu index>/lost`` exists: its
sample then carries only ``error`` (as a real lost GPU's does), and it reads again once the
file is gone. While ``<claims_dir>/<gpu index>/util`` holds a percent, the GPU's utilization
reads that (someone else's work on it, for ``[scheduler] max_free_util``); see ``plant_util``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

from gpuplaned.protocol.agent import GpuInfo
from gpuplaned.protocol.discovery import pid_alive
from gpuplaned.telemetry.samples import Busy, EccErrors, GpuProcess, GpuSample

_BASE_MEMORY_MB = 420  # what an idle card shows in use (driver, context)
_POWER_IDLE_W, _POWER_LIMIT_W = 70.0, 700.0
_CLOCK_IDLE_MHZ, _CLOCK_MAX_MHZ = 345, 1980


def claim(claims_dir: Path, gpu_index: int, pid: int, memory_mb: int | None = None) -> Path:
    """Claim fake GPU ``gpu_index`` for ``pid`` (what a job does; here for tests and demos)."""
    folder = Path(claims_dir) / str(gpu_index)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / str(pid)
    # Written aside and renamed, so the backend never reads half a file.
    scratch = folder / f".{pid}.tmp"
    scratch.write_text("" if memory_mb is None else str(memory_mb))
    os.replace(scratch, path)
    return path


def plant_util(claims_dir: Path, gpu_index: int, percent: float | None) -> None:
    """Make fake GPU ``gpu_index`` read ``percent`` utilization (None: its own load again)."""
    folder = Path(claims_dir) / str(gpu_index)
    folder.mkdir(parents=True, exist_ok=True)
    if percent is None:
        _unlink(str(folder / "util"))
        return
    scratch = folder / ".util.tmp"
    scratch.write_text(str(percent))
    os.replace(scratch, folder / "util")


class FakeGpus:
    kind = "fake"
    note = ""

    def __init__(self, count: int, model: str, memory_mb: int, *, claims_dir: Path | None = None) -> None:
        self._gpus = tuple(GpuInfo(i, model, memory_mb, f"GPU-fake-{i:04d}") for i in range(count))
        self._load = [0.0] * count
        self._ticks = 0
        self._claims_dir = claims_dir
        if claims_dir is not None:
            for i in range(count):  # so a job only has to create its file
                (claims_dir / str(i)).mkdir(parents=True, exist_ok=True)

    def inventory(self) -> tuple[GpuInfo, ...]:
        return self._gpus

    def sample(self, busy: Busy = frozenset()) -> tuple[GpuSample, ...]:
        self._ticks += 1
        claims, lost, planted = self._claims()
        loads = busy if isinstance(busy, Mapping) else dict.fromkeys(busy, 1.0)
        samples = []
        for info in self._gpus:
            i = info.index
            if i in lost:
                samples.append(GpuSample(i, info.uuid, info.model, error=f"gpu_lost: fake GPU {i} is marked lost"))
                continue
            target = min(max(loads.get(i, 0.0), 0.0), 1.0)
            load = self._load[i] = self._load[i] + (target - self._load[i]) / 2
            wobble = math.sin(self._ticks * 0.9 + i * 1.7)  # -1..1, deterministic
            utilization = min(100.0, max(0.0, planted.get(i, load * (90.0 + 6.0 * wobble))))
            memory = min(info.memory_mb, _BASE_MEMORY_MB + int(info.memory_mb * 0.6 * load))
            samples.append(GpuSample(
                i, info.uuid, info.model,
                utilization_pct=round(utilization, 1),
                memory_used_mb=memory,
                memory_total_mb=info.memory_mb,
                temperature_c=round(32.0 + 40.0 * load + wobble * load, 1),
                power_w=round(_POWER_IDLE_W + (_POWER_LIMIT_W * 0.85 - _POWER_IDLE_W) * utilization / 100, 1),
                power_limit_w=_POWER_LIMIT_W,
                sm_clock_mhz=int(_CLOCK_IDLE_MHZ + (_CLOCK_MAX_MHZ - _CLOCK_IDLE_MHZ) * min(1.0, load * 1.5)),
                fan_pct=round(30.0 + 50.0 * load, 1),
                throttle_reasons=("idle",) if utilization < 1.0 else (),
                ecc_errors=EccErrors(0, 0),
                processes=claims.get(i, ()),
            ))
        return tuple(samples)

    def close(self) -> None:
        pass

    def _claims(self) -> tuple[dict[int, tuple[GpuProcess, ...]], set[int], dict[int, float]]:
        """Live claims per GPU, the GPUs marked lost, and the utilization planted on GPUs."""
        found: dict[int, tuple[GpuProcess, ...]] = {}
        lost: set[int] = set()
        planted: dict[int, float] = {}
        if self._claims_dir is None:
            return found, lost, planted
        try:
            folders = [e for e in os.scandir(self._claims_dir) if e.name.isdigit()]
        except OSError:
            return found, lost, planted
        for folder in folders:
            processes = []
            try:
                entries = list(os.scandir(folder.path))
            except OSError:
                continue
            if any(e.name == "lost" for e in entries):
                lost.add(int(folder.name))
            util = next((e.path for e in entries if e.name == "util"), None)
            if util is not None and (percent := _read_number(util)) is not None:
                planted[int(folder.name)] = percent
            for entry in entries:
                if not entry.name.isdigit():
                    continue
                pid = int(entry.name)
                if not pid_alive(pid):
                    _unlink(entry.path)
                    continue
                processes.append(GpuProcess(pid, _read_mb(entry.path)))
            if processes:
                found[int(folder.name)] = tuple(sorted(processes, key=lambda p: p.pid))
        return found, lost, planted


def _read_number(path: str) -> float | None:
    try:
        with open(path, "rb") as f:
            return float(f.read(32).strip())
    except (OSError, ValueError):
        return None


def _read_mb(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            text = f.read(32).strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
