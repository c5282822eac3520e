"""The runner actor under test: a FakeLauncher (or, with ``[node] runner = "slurm"``, a
FakeSlurm), a MemoryNodeLink, memory channels, trio time."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from types import SimpleNamespace

import attrs
import trio

from gpuplaned.actors import runner
from gpuplaned.config import Config, NodeConfig, SlurmConfig
from gpuplaned.node_context import LogsPort, NodeContext
from gpuplaned.protocol.agent import JobSpecWire
from gpuplaned.runtime.context import ActorContext
from gpuplaned.telemetry.backend import GpuSource
from gpuplaned.testing.launcher import FakeLauncher, inline
from gpuplaned.testing.node_link import MemoryNodeLink
from gpuplaned.testing.slurm import FakeSlurm


@attrs.define
class RunnerUnderTest:
    link: MemoryNodeLink
    launcher: FakeLauncher
    handle: runner.RunnerHandle
    logs: trio.MemoryReceiveChannel[object]
    config: Config
    shared: NodeContext | None = None
    slurm: FakeSlurm | None = None

    def logs_seen(self) -> list[object]:
        seen = []
        while True:
            try:
                seen.append(self.logs.receive_nowait())
            except trio.WouldBlock:
                return seen


def config(tmp_path: Path, gpus: int = 2, runner: str = "local", **slurm: object) -> Config:
    return Config(home=tmp_path / "home", runtime_dir=tmp_path / "run",
                  node=NodeConfig(name="node1", gpus=GpuSource("fake", gpus), runner=runner),
                  slurm=SlurmConfig(**slurm))  # type: ignore[arg-type]


# A Slurm node's settings in these tests: Slurm's defaults but the period, as the real fixture's tests set it.
SLURM = {"poll_interval_s": 2.0, "poll_max_s": 30.0, "command_timeout_s": 10.0, "lost_after_s": 60.0}


async def start_runner(nursery: trio.Nursery, tmp_path: Path, launcher: FakeLauncher,
                       link: MemoryNodeLink | None = None, gpus: int = 2, *, slurm: FakeSlurm | None = None,
                       **slurm_settings: object) -> RunnerUnderTest:
    """Start the runner actor in ``nursery``; returns once it has said hello. With ``slurm``
    the node's runner is Slurm's (``SLURM`` and ``slurm_settings`` its [slurm] section), its
    commands answered by ``slurm``, which is started in ``nursery`` unless it runs already."""
    link = link or MemoryNodeLink()
    if slurm is None:
        cfg = config(tmp_path, gpus)
    else:
        cfg = config(tmp_path, gpus, "slurm", **{**SLURM, "command_timeout_s": slurm.timeout_s, **slurm_settings})
        if not slurm.simulating:
            await nursery.start(slurm.simulate)
    send, inbox = trio.open_memory_channel[object](256)
    logs_send, logs = trio.open_memory_channel[object](math.inf)  # a recorder: never holds the runner up
    endpoint = SimpleNamespace(portfile=lambda: SimpleNamespace(endpoint="unix:/nonexistent/gpuplaned.sock"))
    shared = NodeContext(cfg, endpoint, link, LogsPort(logs_send))  # type: ignore[arg-type]
    ctx = ActorContext("runner", inbox, {"runner": send}, shared)
    handle = await nursery.start(functools.partial(runner.run, launcher=launcher.open, blocking=inline,
                                                   slurm_cli=slurm), ctx)
    return RunnerUnderTest(link, launcher, handle, logs, cfg, shared, slurm)


def job(job_id: str = "job_1", attempt: int = 1, *, gpus: tuple[int, ...] = (0,), timeout_s: float | None = None,
        argv: tuple[str, ...] = ("python", "train.py")) -> JobSpecWire:
    return JobSpecWire(job_id=job_id, run_id=f"run_{job_id}_{attempt}", attempt=attempt, name=job_id, argv=argv,
                       cwd="/", env={}, gpu_indexes=gpus, timeout_s=timeout_s, stop_grace_s=5.0)
