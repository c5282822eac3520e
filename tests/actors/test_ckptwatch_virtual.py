"""The ckptwatch actor in virtual time over a memory node link: real ``torch.save`` files in a
job's folders, the stability window in trio time (``autojump_clock``), file reads inline; the
final pass of an attempt that ended (a job shorter than a rescan, or one that ended while
the daemon was away)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import attrs
import torch
import trio

from gpuplaned.actors import ckptwatch
from gpuplaned.config import CheckpointsConfig, Config
from gpuplaned.node_context import ENDS_KEPT, NodeContext
from gpuplaned.protocol.agent import CheckpointsFound
from gpuplaned.runtime.context import ActorContext
from gpuplaned.testing.launcher import inline
from gpuplaned.testing.node_link import MemoryNodeLink
from gpuplaned.testing.runner import LiveJob, MemoryRunner


Live = LiveJob
Runner = MemoryRunner


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


async def test_a_job_shorter_than_a_rescan_has_its_saves_registered_by_a_final_pass(nursery, tmp_path,
                                                                                   autojump_clock):
    live = job(tmp_path)
    runner = Runner()
    link, handle = await start(nursery, tmp_path, runner)
    await trio.sleep(0.5)  # just after a pass; the next rescan is 2 s away
    save(tmp_path / "work" / "checkpoints" / "step_9.pt", 9)
    runner.recent_ends[("job_1", 1)] = live  # it started, saved and exited in between: never seen live
    await trio.sleep(3)  # one rescan, far less than the 10 s window: its writer is gone
    assert found(link) == [("step_9.pt", 9)]
    assert handle.statistics().attempts == 0  # forgotten once its final pass registered everything
    await trio.sleep(30)
    assert found(link) == [("step_9.pt", 9)]  # once: not taken in again from the runner's list


async def test_an_attempt_that_ended_while_the_daemon_was_away_gets_its_last_saves_registered(tmp_path,
                                                                                             autojump_clock):
    live = job(tmp_path)
    link = MemoryNodeLink()
    async with trio.open_nursery() as daemon:
        await start(daemon, tmp_path, Runner(live={live.job_id: live}), link)
        save(tmp_path / "work" / "checkpoints" / "step_1.pt", 1)
        await trio.sleep(15)
        daemon.cancel_scope.cancel()  # the daemon is killed ...
    assert found(link) == [("step_1.pt", 1)]
    save(tmp_path / "work" / "checkpoints" / "step_2.pt", 2)  # ... the job saves once more and ends
    async with trio.open_nursery() as daemon:
        # The restarted runner found it ended (exit.json) on adoption: never live again.
        ended = Runner(recent_ends={("job_1", 1): attrs.evolve(live, env={})})
        _, handle = await start(daemon, tmp_path, ended, link)
        await trio.sleep(3)
        assert handle.statistics().attempts == 0
        daemon.cancel_scope.cancel()
    # step_1.pt is offered again (a restarted watcher forgets what it sent; the server
    # registers a (run, path) once per fingerprint), step_2.pt for the first time.
    assert sorted(set(found(link))) == [("step_1.pt", 1), ("step_2.pt", 2)]


async def test_a_save_cut_short_by_a_killed_job_is_never_registered(nursery, tmp_path, autojump_clock):
    live = job(tmp_path)
    runner = Runner()
    link, _ = await start(nursery, tmp_path, runner)
    folder = tmp_path / "work" / "checkpoints"
    save(folder / "step_1.pt", 1)
    whole = (folder / "step_1.pt").read_bytes()
    (folder / "step_2.pt").write_bytes(whole[: len(whole) // 2])  # torch.save killed half-way
    runner.recent_ends[("job_1", 1)] = live
    await trio.sleep(60)  # the final pass and every retry of it
    assert found(link) == [("step_1.pt", 1)]


async def test_two_jobs_saving_into_one_folder_take_only_what_they_were_seen_writing(nursery, tmp_path,
                                                                                    autojump_clock):
    """Issue 28 item 2: each job registered every checkpoint of the folder they share."""
    folder = tmp_path / "work" / "checkpoints"
    folder.mkdir(parents=True)
    with subprocess.Popen(
            [sys.executable, "-c", "import sys; f = open(sys.argv[1], 'wb'); f.write(b'x' * 64); f.flush(); "
             "print('open', flush=True); sys.stdin.read()", str(folder / "step_5.pt")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True) as writer:
        assert writer.stdout.readline() == b"open\n"
        first = job(tmp_path)
        second = Live("job_2", 1, "run_2", first.cwd, pgid=writer.pid)  # both started from one folder
        runner = Runner(live={"job_1": first, "job_2": second})
        link, _ = await start(nursery, tmp_path, runner)
        save(folder / "step_1.pt", 1)  # saved by this test's process: neither job's
        await trio.sleep(5)  # job_2's process seen holding step_5.pt
        writer.stdin.close()
        writer.wait(10)
    await trio.sleep(20)
    assert [(f.job_id, [os.path.basename(c.path) for c in f.checkpoints]) for f in link.checkpoint_finds] == [
        ("job_2", ["step_5.pt"])]
    [reported] = link.node_events  # once, though both jobs saw it
    assert (reported.type, reported.context["path"], reported.context["kind"]) == (
        "UNATTRIBUTED_FILE", str(folder / "step_1.pt"), "checkpoint")

    runner.live.pop("job_2")
    runner.touch()
    await trio.sleep(30)  # job_2 ended, and its final pass is made: job_1 is alone in the folder now
    save(folder / "step_9.pt", 9)
    await trio.sleep(15)
    assert [(f.job_id, [os.path.basename(c.path) for c in f.checkpoints]) for f in link.checkpoint_finds] == [
        ("job_2", ["step_5.pt"]), ("job_1", ["step_9.pt"])]


async def test_the_runners_word_on_when_a_job_started_dates_it_without_its_runtime_json(
        nursery, tmp_path, autojump_clock):
    """A job this runner started comes with what its shim reported: with no runtime.json to
    read, its start still tells a checkpoint of an earlier run (older) from its own."""
    now = time.time()
    live = job(tmp_path, started_here=True, pid=os.getpid(), pgid=os.getpgrp(), shim_pid=os.getpid(), started_at=now)
    folder = tmp_path / "work" / "checkpoints"
    save(folder / "earlier.pt", 1)
    os.utime(folder / "earlier.pt", (now - 3600, now - 3600))  # an hour before the job started
    save(folder / "step_2.pt", 2)
    link, _ = await start(nursery, tmp_path, Runner(live={live.job_id: live}))
    await trio.sleep(30)
    assert found(link) == [("step_2.pt", 2)]
    assert not (tmp_path / "home" / "jobs").exists()  # no attempt folder, no runtime.json


async def test_a_burst_of_short_jobs_longer_than_the_runners_list_of_ends_is_watched_whole(
        nursery, tmp_path, autojump_clock):
    """Far more short jobs end between two rescans than the runner lists (ENDS_KEPT): each one's
    checkpoint is still registered (a pass every rescan saw only the last ENDS_KEPT ends, and the
    others' checkpoints were never looked for)."""
    runner = Runner(kept=ENDS_KEPT)
    link, _ = await start(nursery, tmp_path, runner, stable_s=1)
    await trio.sleep(0.1)  # just after a pass: the next rescan is 2 s away
    jobs = 3 * ENDS_KEPT
    for n in range(jobs):
        folder = tmp_path / f"w{n}" / "checkpoints"
        folder.mkdir(parents=True)
        (folder / f"step_{n}.pt").write_bytes(b"w" * 64)
        live = Live(f"job_{n}", 1, f"run_{n}", str(tmp_path / f"w{n}"))
        runner.live[live.job_id] = live
        runner.touch()
        await trio.sleep(0.001)
        runner.end(live)  # a job of a millisecond: 768 of them end within a rescan
        await trio.sleep(0.001)
    await trio.sleep(30)
    assert sorted(step for _, step in found(link)) == list(range(jobs))


async def test_ends_faster_than_any_pass_could_take_in_are_said_missed(nursery, tmp_path, autojump_clock, caplog):
    runner = Runner(kept=ENDS_KEPT)
    await start(nursery, tmp_path, runner)
    await trio.sleep(0.1)  # a pass has taken in the runner's (empty) list
    for n in range(ENDS_KEPT + 40):  # all at once: no pass runs between them
        runner.end(Live(f"job_{n}", 1, f"run_{n}", str(tmp_path)))
    await trio.sleep(5)
    assert "40 attempts ended and left the runner's list of the last 256 before a pass took them in" in caplog.text
