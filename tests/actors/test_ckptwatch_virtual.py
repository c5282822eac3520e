"""The ckptwatch actor in virtual time over a memory node link: real ``torch.save`` files in a
job's folders, the stability window in trio time (``autojump_clock``), file reads inline."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from types import SimpleNamespace

import attrs
import torch
import trio

from gpuplaned.actors import ckptwatch
from gpuplaned.config import CheckpointsConfig, Config
from gpuplaned.node_context import NodeContext
from gpuplaned.protocol.agent import CheckpointsFound
from gpuplaned.runtime.context import ActorContext
from gpuplaned.testing.launcher import inline
from gpuplaned.testing.node_link import MemoryNodeLink


@attrs.frozen
class Live:
    job_id: str
    attempt: int
    run_id: str | None
    cwd: str | None
    env: dict[str, str] = attrs.Factory(dict)
    pgid: int | None = None
    gpu_indexes: tuple[int, ...] = ()
    shim_pid: int = 0


@attrs.define
class Runner:
    node_id: str = "nd_test"
    live: dict[str, Live] = attrs.Factory(dict)


class FlakyLink(MemoryNodeLink):
    """Refuses the first ``failures`` finds, as a server that cannot take them now."""

    failures: int = 0

    async def checkpoints(self, node_id: str, found: CheckpointsFound) -> None:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("store unavailable")
        await super().checkpoints(node_id, found)


async def start(nursery, tmp_path, runner: Runner, link: MemoryNodeLink | None = None, stable_s: float = 10):
    link = link or MemoryNodeLink()
    cfg = Config(home=tmp_path / "home", runtime_dir=tmp_path / "run",
                 checkpoints=CheckpointsConfig(stable_s=stable_s, rescan_interval_s=2))
    endpoint = SimpleNamespace(portfile=lambda: None)
    shared = NodeContext(cfg, endpoint, link, runner=lambda: runner)  # type: ignore[arg-type]
    send, inbox = trio.open_memory_channel[object](1)
    ctx = ActorContext("ckptwatch", inbox, {"ckptwatch": send}, shared)
    handle = await nursery.start(functools.partial(ckptwatch.run, watch=False, blocking=inline), ctx)
    return link, handle


def found(link: MemoryNodeLink) -> list[tuple[str, int | None]]:
    return [(os.path.basename(c.path), c.step) for f in link.checkpoint_finds for c in f.checkpoints]


def save(path, step):
    torch.save({"step": step, "w": torch.full((256,), float(step))}, path)


def job(tmp_path, **kwargs) -> Live:
    cwd = tmp_path / "work"
    (cwd / "checkpoints").mkdir(parents=True, exist_ok=True)
    return Live("job_1", 1, "run_1", str(cwd), **kwargs)


async def test_each_checkpoint_is_registered_once_after_the_window(nursery, tmp_path, autojump_clock):
    live = job(tmp_path)
    runner = Runner(live={live.job_id: live})
    link, handle = await start(nursery, tmp_path, runner)
    folder = tmp_path / "work" / "checkpoints"
    save(folder / "step_100.pt", 100)
    await trio.sleep(9)
    assert found(link) == []  # not yet stable for 10 s
    await trio.sleep(4)
    assert found(link) == [("step_100.pt", 100)]
    (message,) = link.checkpoint_finds
    assert (message.job_id, message.attempt, message.run_id) == ("job_1", 1, "run_1")
    ck = message.checkpoints[0]
    assert ck.kind == "file" and ck.size_bytes == (folder / "step_100.pt").stat().st_size
    assert ck.fingerprint.startswith("sha1:")
    save(folder / "step_200.pt.tmp", 200)  # saved under a temporary name, then renamed
    await trio.sleep(15)
    assert found(link) == [("step_100.pt", 100)]
    os.rename(folder / "step_200.pt.tmp", folder / "step_200.pt")
    await trio.sleep(60)
    assert found(link) == [("step_100.pt", 100), ("step_200.pt", 200)]
    assert handle.statistics().registered == 2 and handle.statistics().pending == 0


async def test_a_file_still_growing_waits_and_a_rewrite_is_registered_again(nursery, tmp_path, autojump_clock):
    live = job(tmp_path)
    link, _ = await start(nursery, tmp_path, Runner(live={live.job_id: live}))
    path = tmp_path / "work" / "checkpoints" / "last.pt"
    with open(path, "wb") as f:
        for _ in range(10):  # a slow writer: a chunk every 5 s for 50 s
            f.write(b"x" * 4096)
            f.flush()
            await trio.sleep(5)
    assert found(link) == []
    await trio.sleep(12)
    assert found(link) == [("last.pt", None)]
    first = link.checkpoint_finds[0].checkpoints[0].fingerprint
    await trio.sleep(1)
    save(path, 7)  # saved anew (last.pt every epoch): a new fingerprint, registered again
    await trio.sleep(13)
    assert found(link) == [("last.pt", None), ("last.pt", None)]
    assert link.checkpoint_finds[1].checkpoints[0].fingerprint != first


async def test_a_file_the_job_holds_open_for_writing_waits_until_closed(nursery, tmp_path, autojump_clock):
    path = tmp_path / "work" / "checkpoints" / "step_5.pt"
    path.parent.mkdir(parents=True)
    with subprocess.Popen(
            [sys.executable, "-c", "import sys; f = open(sys.argv[1], 'wb'); f.write(b'x'); f.flush(); "
             "print('open', flush=True); sys.stdin.read()", str(path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True) as writer:
        assert writer.stdout.readline() == b"open\n"
        live = job(tmp_path, pgid=writer.pid)
        link, _ = await start(nursery, tmp_path, Runner(live={live.job_id: live}))
        await trio.sleep(60)  # size and mtime stable for a minute, but still open
        assert found(link) == []
        writer.stdin.close()
        writer.wait(10)
    await trio.sleep(13)
    assert found(link) == [("step_5.pt", 5)]


async def test_the_last_save_of_an_attempt_that_ended_still_counts(nursery, tmp_path, autojump_clock):
    live = job(tmp_path)
    runner = Runner(live={live.job_id: live})
    link, handle = await start(nursery, tmp_path, runner)
    save(tmp_path / "work" / "checkpoints" / "step_300.pt", 300)
    await trio.sleep(1)
    runner.live.clear()  # the job exits right after its save
    await trio.sleep(15)
    assert found(link) == [("step_300.pt", 300)]
    await trio.sleep(30)
    assert handle.statistics().attempts == 0  # then it is forgotten


async def test_a_find_the_server_could_not_take_is_offered_again(nursery, tmp_path, autojump_clock):
    live = job(tmp_path, env={"GPUPLANE_CKPT_DIR": "elsewhere"})
    (tmp_path / "work" / "elsewhere" / "checkpoint-40").mkdir(parents=True)
    save(tmp_path / "work" / "elsewhere" / "checkpoint-40" / "pytorch_model.bin", 40)
    link = FlakyLink()
    link.failures = 2
    link, _ = await start(nursery, tmp_path, Runner(live={live.job_id: live}), link)
    await trio.sleep(30)
    assert found(link) == [("checkpoint-40", 40)]
    assert link.checkpoint_finds[0].checkpoints[0].kind == "hf"
