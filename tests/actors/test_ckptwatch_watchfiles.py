"""The ckptwatch actor's file watcher (watchfiles under trio, real time): with rescans a
whole hour apart, a checkpoint saved into a watched folder is still registered at once,
woken by the file event."""

from __future__ import annotations

from types import SimpleNamespace

import torch
import trio

from gpuplaned.actors import ckptwatch
from gpuplaned.config import CheckpointsConfig, Config
from gpuplaned.node_context import NodeContext
from gpuplaned.runtime.context import ActorContext
from gpuplaned.testing.node_link import MemoryNodeLink
from test_ckptwatch_virtual import Live, Runner


async def test_a_save_wakes_a_pass_long_before_the_rescan(nursery, tmp_path):
    cwd = tmp_path / "work"
    (cwd / "checkpoints").mkdir(parents=True)
    live = Live("job_1", 1, "run_1", str(cwd))
    link = MemoryNodeLink()
    cfg = Config(home=tmp_path / "home", runtime_dir=tmp_path / "run",
                 checkpoints=CheckpointsConfig(stable_s=0.2, rescan_interval_s=3600))
    shared = NodeContext(cfg, SimpleNamespace(), link, runner=lambda: Runner(live={live.job_id: live}))  # type: ignore[arg-type]
    send, inbox = trio.open_memory_channel[object](1)
    handle = await nursery.start(ckptwatch.run, ActorContext("ckptwatch", inbox, {}, shared))
    with trio.fail_after(10):
        while handle.statistics().watching != 1:  # the first pass found the job and its one folder
            await trio.sleep(0.01)
        await trio.to_thread.run_sync(torch.save, {"w": torch.ones(4)}, str(cwd / "checkpoints" / "step_3.pt"))
        while not link.checkpoint_finds:
            await trio.sleep(0.01)
    assert [c.step for c in link.checkpoint_finds[0].checkpoints] == [3]
