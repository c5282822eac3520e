"""The runner actor under test: a FakeLauncher, a MemoryNodeLink, memory channels, trio time."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from types import SimpleNamespace

import attrs
import trio

from gpuplaned.actors import runner
from gpuplaned.config import Config, NodeConfig
from gpuplaned.node_context import LogsPort, NodeContext
from gpuplaned.protocol.agent import JobSpecWire
from gpuplaned.runtime.context import ActorContext
from gpuplaned.telemetry.backend import GpuSource
from gpuplaned.testing.launcher import FakeLauncher, inline
from gpuplaned.testing.node_link import MemoryNodeLink


@attrs.define
class RunnerUnderTest:
    link: MemoryNodeLink
    launcher: FakeLauncher
    handle: runner.RunnerHandle
    logs: trio.MemoryReceiveChannel[object]
    config: Config

    def logs_seen(self) -> list[object]:
        seen = []
        while True:
            try:
                seen.append(self.logs.receive_nowait())
            except trio.WouldBlock:
                return seen


def config(tmp_path: Path, gpus: int = 2) -> Config:
    return Config(home=tmp_path / "home", runtime_dir=tmp_path / "run",
                  node=NodeConfig(name="node1", gpus=GpuSource("fake", gpus)))


async def start_runner(nursery: trio.Nursery, tmp_path: Path, launcher: FakeLauncher,
                       link: MemoryNodeLink | None = None, gpus: int = 2) -> RunnerUnderTest:
    """Start the runner actor in ``nursery``; returns once it has said hello."""
    link = link or MemoryNodeLink()
    cfg = config(tmp_path, gpus)
    send, inbox = trio.open_memory_channel[object](256)
    logs_send, logs = trio.open_memory_channel[object](math.inf)  # a recorder: never holds the runner up
    endpoint = SimpleNamespace(portfile=lambda: SimpleNamespace(endpoint="unix:/nonexistent/gpuplaned.sock"))
    shared = NodeContext(cfg, endpoint, link, LogsPort(logs_send))  # type: ignore[arg-type]
    ctx = ActorContext("runner", inbox, {"runner": send}, shared)
    handle = await nursery.start(functools.partial(runner.run, launcher=launcher.open, blocking=inline), ctx)
    return RunnerUnderTest(link, launcher, handle, logs, cfg)


def job(job_id: str = "job_1", attempt: int = 1, *, gpus: tuple[int, ...] = (0,), timeout_s: float | None = None,
        argv: tuple[str, ...] = ("python", "train.py")) -> JobSpecWire:
    return JobSpecWire(job_id=job_id, run_id=f"run_{job_id}_{attempt}", attempt=attempt, name=job_id, argv=argv,
                       cwd="/", env={}, gpu_indexes=gpus, timeout_s=timeout_s, stop_grace_s=5.0)
