"""The logs actor over a memory node link: it reaches the server only through the link
(tails to keep, every line of a followed attempt, where stored tails end), never the store."""

from __future__ import annotations

import attrs
import pytest
import trio
from gpuplaned.actors import logs

from gpuplaned.config import Config
from gpuplaned.endpoint import claim_endpoint
from gpuplaned.node_context import FollowLogs, LogsEnded, NodeContext
from gpuplaned.protocol.agent import LogFollow, LogLines, LogOffsets
from gpuplaned.runtime.context import ActorContext
from gpuplaned.testing.node_link import MemoryNodeLink


class Recorder(MemoryNodeLink):
    """Each pass also on a channel, to wait for; stored tails said to end at ``stored``."""

    def __init__(self, stored: tuple[tuple[str, int, str, int], ...] = ()) -> None:
        super().__init__()
        self.stored = stored
        self.passes_send, self.passes = trio.open_memory_channel[LogLines](100)

    async def log_lines(self, lines: LogLines) -> None:
        await super().log_lines(lines)
        self.passes_send.send_nowait(lines)

    async def log_offsets(self, request: LogOffsets) -> LogOffsets:
        await trio.lowlevel.checkpoint()
        return LogOffsets(request.attempts, self.stored)


@pytest.fixture
async def started(tmp_path, nursery):
    cfg = Config(home=tmp_path / "home", runtime_dir=tmp_path / "run")
    endpoint = claim_endpoint(cfg.runtime_dir, None)
    cfg = attrs.evolve(cfg, node=attrs.evolve(cfg.node, log_tail_lines=3))

    async def start(link: Recorder):
        send, inbox = trio.open_memory_channel(100)
        ctx = ActorContext("logs", inbox, {"logs": send}, NodeContext(cfg, endpoint, link))
        await nursery.start(logs.run, ctx)
        return send

    yield start
    endpoint.release()


async def next_pass(link: Recorder) -> LogLines:
    with trio.fail_after(10):
        return await link.passes.receive()


def job_dir(tmp_path, lines: int):
    folder = tmp_path / "job_a" / "attempt-1"
    folder.mkdir(parents=True)
    (folder / "stdout.log").write_text("".join(f"line {i}\n" for i in range(1, lines + 1)))
    (folder / "stderr.log").write_text("")
    return folder


async def test_tails_go_through_the_link_and_a_live_follower_gets_every_line(tmp_path, started):
    link = Recorder()
    inbox = await started(link)
    folder = job_dir(tmp_path, 300)
    assert link.log_inbox is not None  # the actor asked to hear who follows
    await inbox.send(FollowLogs("job_a", 1, str(folder), resume=False))
    first = await next_pass(link)
    (chunk,) = first.chunks
    assert (chunk.job_id, chunk.attempt, chunk.stream, chunk.start, chunk.complete) == ("job_a", 1, "stdout", 0, False)
    assert [text for _, text in chunk.lines][-1] == "line 300"
    assert len(chunk.lines) == first.tail_lines == 3  # only what the store keeps
    assert first.served == ()
    # Someone follows it live: from now on every new line, and the attempt is marked served.
    link.log_inbox.send_nowait(LogFollow("job_a", 1, True))
    with (folder / "stdout.log").open("a") as out:
        out.write("".join(f"more {i}\n" for i in range(1, 6)))
    while True:
        lines = await next_pass(link)
        if lines.chunks:
            break
        assert lines.served == (("job_a", 1),)  # a pass with nothing new still tells followers
    (chunk,) = lines.chunks
    assert chunk.complete and chunk.start == first.chunks[0].end
    assert [text for _, text in chunk.lines] == [f"more {i}" for i in range(1, 6)]
    # The end: the unterminated last line is flushed, and the attempt is dropped.
    with (folder / "stdout.log").open("a") as out:
        out.write("no newline")
    await inbox.send(LogsEnded("job_a", 1))
    while True:
        lines = await next_pass(link)
        if lines.chunks:
            break
    assert [text for _, text in lines.chunks[0].lines] == ["no newline"]


async def test_a_resumed_attempt_starts_where_the_stored_tail_ends(tmp_path, started):
    folder = job_dir(tmp_path, 5)
    line_4_at = len("".join(f"line {i}\n" for i in range(1, 4)))  # a line's offset is where it starts
    link = Recorder(stored=(("job_a", 1, "stdout", line_4_at),))  # the last line stored: line 4
    inbox = await started(link)
    await inbox.send(FollowLogs("job_a", 1, str(folder), resume=True))
    (chunk,) = (await next_pass(link)).chunks
    assert [text for _, text in chunk.lines] == ["line 4", "line 5"]  # line 4 again: the store ignores it
