"""The tbtail actor in virtual time over a memory node link: real ``SummaryWriter`` files in a
job's folders (both scalar forms, ``add_scalars`` subfolders, a declared folder), read pass by
pass (``autojump_clock``, file reads inline), each point sent once, a restart and a refused
pass read again from the stored cursors, an attempt that ended while the daemon was away
read to its end after the restart."""

from __future__ import annotations

import base64
import functools
import json
import os
import time
from types import SimpleNamespace

import attrs
import numpy as np
import trio
from torch.utils.tensorboard import SummaryWriter

from gpuplaned.actors import tbtail
from gpuplaned.config import Config, TensorboardConfig
from gpuplaned.home import attempt_dir
from gpuplaned.node_context import NodeContext
from gpuplaned.protocol.tb_frames import TbPoints, TbStored
from gpuplaned.runtime.context import ActorContext
from gpuplaned.testing.launcher import inline
from gpuplaned.testing.node_link import MemoryNodeLink
from gpuplaned.testing.runner import LiveJob, MemoryRunner

POLL = 0.5


Live = functools.partial(LiveJob, env={"PATH": "/bin"})  # a job's variables as submitted
Runner = MemoryRunner


class FlakyLink(MemoryNodeLink):
    """Refuses the first ``failures`` passes, as a server that cannot take them now."""

    failures: int = 0

    async def tb_points(self, node_id: str, points: TbPoints) -> TbStored:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("store unavailable")
        return await super().tb_points(node_id, points)


def job(tmp_path, home, env: dict[str, str] | None = None, started_at: float | None = None, job_id: str = "job_1",
        pid: int | None = None) -> Live:
    """A live job in ``tmp_path/work`` whose main process is this test's (``pid``: another one's)."""
    cwd = tmp_path / "work"
    cwd.mkdir(exist_ok=True)
    live = Live(job_id, 1, job_id.replace("job", "run"), str(cwd), **({"env": env} if env else {}))
    folder = attempt_dir(home, live.job_id, live.attempt)
    folder.mkdir(parents=True)
    (folder / "runtime.json").write_text(json.dumps({
        "id": f"{job_id}/1", "shim_pid": 1 << 22, "shim_start_time": 1, "pid": pid or os.getpid(),
        "pgid": (1 << 22) + 1, "start_time": 1, "argv": ["x"], "cwd": str(cwd), "env_keys": [], "job_id": job_id,
        "attempt": 1, "started_at": time.time() if started_at is None else started_at, "timeout_s": None,
        "grace_s": 1.0}))
    return live


def losses(folder: str, steps: range) -> SummaryWriter:
    """A ``SummaryWriter`` in ``folder`` that has written ``loss`` = step at each of ``steps``, flushed."""
    writer = SummaryWriter(folder)
    for step in steps:
        writer.add_scalar("loss", float(step), step)
    writer.flush()
    return writer


async def start(nursery, tmp_path, runner: Runner, link: MemoryNodeLink | None = None):
    link = link or MemoryNodeLink()
    cfg = Config(home=tmp_path / "home", runtime_dir=tmp_path / "run",
                 tensorboard=TensorboardConfig(poll_interval_s=POLL))
    endpoint = SimpleNamespace(portfile=lambda: None)
    shared = NodeContext(cfg, endpoint, link, runner=lambda: runner)  # type: ignore[arg-type]
    send, inbox = trio.open_memory_channel[object](1)
    ctx = ActorContext("tbtail", inbox, {"tbtail": send}, shared)
    cancel = trio.CancelScope()

    async def actor(task_status=trio.TASK_STATUS_IGNORED):
        with cancel:
            await tbtail.run(ctx, task_status=task_status, blocking=inline)

    handle = await nursery.start(actor)
    return link, handle, cancel


def sent(link: MemoryNodeLink) -> dict[str, list[tuple[int, float]]]:
    """Every (step, value) the node sent, per series, in order."""
    out: dict[str, list[tuple[int, float]]] = {}
    for message in link.tb_passes:
        for part in message.files:
            for s in part.series:
                steps = np.frombuffer(base64.b64decode(s.step), "<i8")
                values = np.frombuffer(base64.b64decode(s.value), "<f8")
                out.setdefault(s.name, []).extend(zip(steps.tolist(), values.tolist()))
    return out


async def test_both_scalar_forms_and_add_scalars_folders_are_sent_once_as_they_grow(nursery, tmp_path, autojump_clock):
    live = job(tmp_path, tmp_path / "home")
    writer = SummaryWriter(os.path.join(live.cwd, "runs", "exp"))
    for step in range(5):
        writer.add_scalar("train/loss", 1.0 / (step + 1), step)
        writer.add_scalar("train/lr", 0.1, step, new_style=True)
        writer.add_scalars("acc", {"train": step / 10, "val": step / 20}, step)
    writer.flush()
    link, handle, _ = await start(nursery, tmp_path, Runner(live={"job_1": live}))
    await trio.sleep(3 * POLL)
    got = sent(link)
    assert sorted(got) == ["acc/train", "acc/val", "train/loss", "train/lr"]
    assert got["train/loss"] == [(s, np.float32(1.0 / (s + 1)).item()) for s in range(5)]
    assert got["acc/val"] == [(s, np.float32(s / 20).item()) for s in range(5)]
    assert [s for s, _ in got["train/lr"]] == list(range(5))
    passes = len(link.tb_passes)
    await trio.sleep(4 * POLL)
    assert len(link.tb_passes) == passes  # nothing grew: nothing sent
    for step in range(5, 8):
        writer.add_scalar("train/loss", 0.5, step)
    writer.flush()
    await trio.sleep(2 * POLL)
    assert [s for s, _ in sent(link)["train/loss"]] == list(range(8))  # only the new ones, once
    [last] = link.tb_passes[passes:]
    [part] = last.files
    assert part.after is not None and part.after.offset < part.cursor.offset == os.path.getsize(part.path)
    assert handle.statistics().points == 5 * 4 + 3
    writer.close()


async def test_a_restarted_tailer_starts_from_the_stored_cursors(nursery, tmp_path, autojump_clock):
    live = job(tmp_path, tmp_path / "home")
    writer = losses(os.path.join(live.cwd, "logs"), range(10))
    runner = Runner(live={"job_1": live})
    link, _, cancel = await start(nursery, tmp_path, runner)
    await trio.sleep(2 * POLL)
    cancel.cancel()
    for step in range(10, 15):
        writer.add_scalar("loss", float(step), step)
    writer.close()
    link, _, _ = await start(nursery, tmp_path, runner, link)  # the same "server": its cursors are kept
    await trio.sleep(2 * POLL)
    assert [s for s, _ in sent(link)["loss"]] == list(range(15))


async def test_a_pass_the_server_could_not_take_is_read_again_from_what_it_stored(nursery, tmp_path, autojump_clock):
    live = job(tmp_path, tmp_path / "home", env={"GPUPLANE_TB_DIR": "tb"})
    writer = losses(os.path.join(live.cwd, "tb"), range(4))  # a declared folder
    flaky = FlakyLink()
    flaky.failures = 1
    link, handle, _ = await start(nursery, tmp_path, Runner(live={"job_1": live}), flaky)
    await trio.sleep(3 * POLL)
    assert len(link.tb_passes) == 1 and handle.statistics().resets == 1
    [part] = link.tb_passes[0].files
    assert part.after is None  # the refused pass was read again from the start
    assert [s for s, _ in sent(link)["loss"]] == [0, 1, 2, 3]
    writer.close()


async def test_older_runs_files_are_left_alone_and_an_ended_attempt_is_read_to_its_end(nursery, tmp_path,
                                                                                       autojump_clock):
    started = time.time()
    live = job(tmp_path, tmp_path / "home", started_at=started)
    old = os.path.join(live.cwd, "runs", f"events.out.tfevents.{int(started) - 3600}.{os.uname().nodename}.1.0")
    os.makedirs(os.path.dirname(old))
    with open(old, "wb") as f:
        f.write(b"not even events")  # an earlier run's, by the time in its name: never opened
    runner = Runner(live={"job_1": live})
    link, handle, _ = await start(nursery, tmp_path, runner)
    await trio.sleep(2 * POLL)
    assert link.tb_passes == [] and handle.statistics().attempts == 1
    writer = SummaryWriter(os.path.join(live.cwd, "runs"))
    writer.add_scalar("loss", 2.0, 7)
    writer.close()
    runner.live.clear()  # the job ended as it closed its file
    runner.touch()
    await trio.sleep(4 * POLL)
    assert sent(link) == {"loss": [(7, 2.0)]}
    assert handle.statistics().attempts == 0  # read to its end, then forgotten


class LostAnswerLink(MemoryNodeLink):
    """Stores the first pass, then loses its answer: the node cannot know it was stored."""

    lost: bool = False

    async def tb_points(self, node_id: str, points: TbPoints) -> TbStored:
        answer = await super().tb_points(node_id, points)
        if not self.lost:
            self.lost = True
            raise RuntimeError("connection lost")
        return answer


async def test_a_pass_stored_but_not_answered_is_not_sent_again(nursery, tmp_path, autojump_clock):
    live = job(tmp_path, tmp_path / "home")
    writer = losses(os.path.join(live.cwd, "runs"), range(3))
    link, handle, _ = await start(nursery, tmp_path, Runner(live={"job_1": live}), LostAnswerLink())
    await trio.sleep(3 * POLL)
    writer.add_scalar("loss", 3.0, 3)
    writer.close()
    await trio.sleep(2 * POLL)
    assert [s for s, _ in sent(link)["loss"]] == [0, 1, 2, 3]  # the tail was made again from what was stored
    assert handle.statistics().resets == 1


async def test_a_job_that_lives_less_than_a_pass_is_still_read(nursery, tmp_path, autojump_clock):
    live = job(tmp_path, tmp_path / "home")
    runner = Runner()
    link, handle, _ = await start(nursery, tmp_path, runner)
    await trio.sleep(POLL / 4)  # just after a pass
    runner.live["job_1"] = live
    runner.touch()  # as the runner's handle does on each change
    writer = SummaryWriter(os.path.join(live.cwd, "runs"))
    writer.add_scalar("loss", 1.0, 3)
    writer.close()
    await trio.sleep(POLL / 4)
    runner.live.clear()  # gone before the next pass
    runner.touch()
    await trio.sleep(4 * POLL)
    assert sent(link) == {"loss": [(3, 1.0)]}
    assert handle.statistics().attempts == 0


async def test_an_attempt_that_ended_while_the_daemon_was_away_is_read_to_its_end_once(nursery, tmp_path,
                                                                                      autojump_clock):
    live = job(tmp_path, tmp_path / "home", env={"GPUPLANE_TB_DIR": "tb"})
    writer = losses(os.path.join(live.cwd, "tb"), range(5))  # a declared folder
    link, _, cancel = await start(nursery, tmp_path, Runner(live={"job_1": live}))
    await trio.sleep(2 * POLL)
    cancel.cancel()  # the daemon is killed
    for step in range(5, 9):
        writer.add_scalar("loss", float(step), step)
    writer.close()  # and the job ends before it is back
    # The restarted runner found it ended (exit.json) on adoption: never live, its variables
    # the job's as submitted (its process is gone: reading /proc/<pid>/environ would be wrong).
    ended = Runner(recent_ends={("job_1", 1): live})
    link, handle, _ = await start(nursery, tmp_path, ended, link)
    await trio.sleep(6 * POLL)
    assert [s for s, _ in sent(link)["loss"]] == list(range(9))  # to its end, each step once
    assert handle.statistics().attempts == 0  # then forgotten, and not taken in again
    passes = len(link.tb_passes)
    await trio.sleep(6 * POLL)
    assert len(link.tb_passes) == passes and handle.statistics().attempts == 0


async def test_a_file_is_read_by_the_job_whose_process_wrote_it_and_one_of_no_job_is_reported_once(
        nursery, tmp_path, autojump_clock):
    """Issue 28 item 2: two jobs from one folder each read every file named in their first 10 s."""
    home = tmp_path / "home"
    writer_job = job(tmp_path, home)  # its main process: this test's
    silent = job(tmp_path, home, job_id="job_2", pid=(1 << 22) + 2)  # its main process: long gone
    writer = SummaryWriter(os.path.join(writer_job.cwd, "runs"))
    for step in range(3):
        writer.add_scalar("loss", 0.5, step)
    writer.flush()
    # Named by pid 1 (init: a process of no job), in the same second.
    stray = os.path.join(writer_job.cwd, "runs", f"events.out.tfevents.{int(time.time())}.{os.uname().nodename}.1.0")
    with open(stray, "wb"):
        pass
    link, _, _ = await start(nursery, tmp_path, Runner(live={"job_1": writer_job, "job_2": silent}))
    await trio.sleep(4 * POLL)
    assert {m.job_id for m in link.tb_passes} == {"job_1"}  # the silent job got nothing
    assert sent(link) == {"loss": [(0, 0.5), (1, 0.5), (2, 0.5)]}
    writer.add_scalar("loss", 0.25, 3)
    writer.close()
    await trio.sleep(4 * POLL)
    assert {m.job_id for m in link.tb_passes} == {"job_1"} and len(sent(link)["loss"]) == 4
    [reported] = link.node_events  # once, though both jobs' folders hold it and many passes saw it
    assert (reported.type, reported.severity, reported.context["path"], reported.context["pid"]) == (
        "UNATTRIBUTED_FILE", "info", stray, 1)


class CountingLink(MemoryNodeLink):
    """Counts the stored-cursor questions, per attempt."""

    asked: list[tuple[str, int]] = []

    async def tb_cursors(self, request):  # type: ignore[no-untyped-def]
        self.asked = [*self.asked, (request.job_id, request.attempt)]
        return await super().tb_cursors(request)


async def test_a_job_that_starts_after_the_tailer_looked_is_read_without_asking_for_its_cursors(
        nursery, tmp_path, autojump_clock):
    runner = Runner()
    link, handle, _ = await start(nursery, tmp_path, runner, CountingLink())
    await trio.sleep(POLL)  # the tailer has looked: no job yet
    live = attrs.evolve(job(tmp_path, tmp_path / "home"), started_here=True)
    writer = losses(os.path.join(live.cwd, "runs"), range(4))
    runner.live["job_1"] = live
    runner.touch()
    await trio.sleep(3 * POLL)
    assert link.asked == []  # a new attempt has nothing stored: not asked
    assert [s for s, _ in sent(link)["loss"]] == [0, 1, 2, 3]
    writer.close()
    adopted = job(tmp_path, tmp_path / "home", job_id="job_2")  # re-adopted by a restarted runner: asked
    runner.live["job_2"] = adopted
    runner.touch()
    await trio.sleep(2 * POLL)
    assert link.asked == [("job_2", 1)]


async def test_a_wrong_guess_that_nothing_is_stored_costs_one_pass_and_sends_nothing_twice(
        nursery, tmp_path, autojump_clock):
    live = job(tmp_path, tmp_path / "home")
    writer = losses(os.path.join(live.cwd, "runs"), range(3))
    runner = Runner(live={"job_1": live})
    link, _, cancel = await start(nursery, tmp_path, runner, CountingLink())
    await trio.sleep(2 * POLL)  # the first tailer stored steps 0-2
    cancel.cancel()
    stored = dict(link.tb_stored)
    runner.live.clear()  # the restarted tailer's first look misses the job (a runner restarting meanwhile)
    link, handle, _ = await start(nursery, tmp_path, runner, link)
    await trio.sleep(POLL)
    for step in range(3, 5):
        writer.add_scalar("loss", float(step), step)
    writer.close()
    runner.live["job_1"] = attrs.evolve(live, started_here=True)  # back, and (wrongly) a new attempt: not asked
    runner.touch()
    await trio.sleep(4 * POLL)
    assert handle.statistics().resets == 1  # the server named the file stale: the tail was made again
    assert link.asked == [("job_1", 1)] * 2  # the first tailer's start, then after the stale pass
    last = link.tb_passes[-1]
    [part] = last.files
    assert part.after == stored[("job_1", 1, part.path)].cursor  # read on from what the server had
    assert part.cursor.offset == os.path.getsize(part.path)
    steps = [s for s in last.files[0].series if s.name == "loss"]
    assert np.frombuffer(base64.b64decode(steps[0].step), "<i8").tolist() == [3, 4]  # each step stored once


async def test_the_runners_word_on_how_a_job_started_stands_for_its_runtime_json(nursery, tmp_path, autojump_clock):
    """A job this runner started comes with what its shim reported (its start, its processes):
    its files are read without its runtime.json, which is not read at all. One without that
    word (adopted after a restart) waits for its runtime.json."""
    runner = Runner()
    link, _, _ = await start(nursery, tmp_path, runner)
    await trio.sleep(POLL)
    cwd = tmp_path / "work"
    cwd.mkdir()
    told = Live("job_1", 1, "run_1", str(cwd), started_here=True, pid=os.getpid(), pgid=(1 << 22) + 1,
                shim_pid=1 << 22, started_at=time.time())
    writer = losses(os.path.join(cwd, "runs"), range(3))
    writer.close()
    runner.live["job_1"] = told  # no runtime.json in its attempt folder (none made)
    runner.touch()
    await trio.sleep(3 * POLL)
    assert [s for s, _ in sent(link)["loss"]] == [0, 1, 2]
    assert not attempt_dir(tmp_path / "home", "job_1", 1).exists()
    runner.live["job_2"] = attrs.evolve(told, job_id="job_2", run_id="run_2", started_here=False)
    runner.touch()
    await trio.sleep(3 * POLL)
    assert [p.job_id for p in link.tb_passes] == ["job_1"]  # job_2: its start not known yet, nothing read
