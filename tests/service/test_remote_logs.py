"""A remote agent's log records on the server's live feed, and a remote follower's reads of the
stored tail while the agent is away (``gpuplaned.service.link.remote_logs``), over a real store actor
and SQLite file. The reads through a live agent: ``tests/e2e/test_e2e_remote_logs.py``."""

from __future__ import annotations

import pytest
from inprocess import passes_by_hand

from gpuplaned.logtail import LineSplitter
from gpuplaned.protocol.agent import LogChunk, LogLines
from gpuplaned.service.link.log_feeds import batches_of
from gpuplaned.service.link.nodes import LocalNodeLink, Once
from gpuplaned.service.link.remote_logs import RemoteReader, end_at_least
from gpuplaned.store import log_rows
from gpuplaned.store.writer import write


@pytest.fixture
async def shared(tmp_path, nursery):
    async with passes_by_hand(tmp_path, nursery, ready=False) as ctx:
        yield ctx


LINES = tuple((i * 10, f"line {i}") for i in range(1, 6))  # offsets 10..50, a line ends 10 bytes on


def test_a_chunk_of_only_the_last_lines_is_a_batch_of_just_those():
    batches = batches_of([
        LogChunk("job_a", 1, "stdout", 10, 60, LINES[-3:]),  # a tails-only pass: lines 1 and 2 are not in it
        LogChunk("job_a", 1, "stderr", 10, 60, LINES, complete=True),
        LogChunk("job_b", 1, "stdout", 60, 60, ()),
    ])
    assert list(batches) == [("job_a", 1)]
    tail, every = batches[("job_a", 1)]
    assert (tail.stream, tail.start, tail.end, tail.lines) == ("stdout", 30, 60, LINES[-3:])
    assert (every.stream, every.start, every.end) == ("stderr", 10, 60)


async def job_on_node(shared, job_id: str, node_id: str) -> None:
    """A job whose attempt 1 is on the node: a node's records may name only such (issue 29 item 5)."""
    def insert(conn):
        conn.execute("INSERT INTO nodes (id, name, status, created_at) VALUES (?, ?, 'ONLINE', 0)", (node_id, node_id))
        conn.execute("INSERT INTO jobs (id, name, type, status, command, created_at, node_id, attempt) "
                     "VALUES (?, 'j', 'train', 'RUNNING', '[]', 0, ?, 1)", (job_id, node_id))

    await write(shared.supervisor.ports["store"], insert)


async def test_a_remote_record_feeds_followers_after_its_commit_and_a_resend_does_not(shared):
    await job_on_node(shared, "job_r", "nd_r")
    link = LocalNodeLink(shared)
    record = LogLines(3, (LogChunk("job_r", 1, "stdout", 10, 60, LINES[-3:]),))
    async with shared.log_feeds.subscribe("job_r", 1, maxlen=10) as followed:
        await link.log_lines(record, once=Once("nd_r", "logs", 7))
        assert followed.pending == 1
        batch = await followed.__anext__()
        assert (batch.start, batch.end, batch.lines) == (30, 60, LINES[-3:])
        assert not shared.log_feeds.served_within(("job_r", 1), 1.0)  # not a pass for followers
        stored = await shared.readers.run(lambda conn: conn.execute(
            "SELECT offset FROM job_logs WHERE job_id = 'job_r' ORDER BY offset").fetchall())
        assert [row[0] for row in stored] == [30, 40, 50]  # committed before it was published

        await link.log_lines(record, once=Once("nd_r", "logs", 7))  # the agent resends it
        assert followed.pending == 0


async def store_tail(shared, job_id, lines):
    chunk = LogChunk(job_id, 1, "stdout", lines[0][0], lines[-1][0] + 10, lines)
    await write(shared.supervisor.ports["store"], lambda conn: log_rows.keep_tails(conn, [chunk], 2000))


async def test_with_the_agent_away_the_stored_tail_is_read_only_where_it_joins_up(shared):
    await store_tail(shared, "job_s", LINES[2:])  # lines 3 to 5: the older ones fell out of the window

    def reader(position):
        positions, after = [position], [max(position, 0)]
        return RemoteReader(shared, "nd_gone", ("job_s", 1), ("stdout",), positions, after), positions, after

    # Resumed after line 3: the stored tail has it, so the lines after it are the next ones.
    follower, positions, after = reader(30)
    assert await follower.read(False) == ([(0, 40, "line 4"), (0, 50, "line 5")], False)
    assert not follower.stuck
    assert 50 < after[0] <= 60  # at most where the next line starts: the stored tail keeps no ends

    # From the start: lines 1 and 2 are only on the agent's node. Nothing, until the attempt's end.
    follower, positions, after = reader(-1)
    assert await follower.read(False) == ([], False)
    assert follower.stuck and follower.quiet_for(shared.log_feeds, ("job_s", 1)) < 1
    lines, more = await follower.read(True)
    assert [offset for _, offset, _ in lines] == [30, 40, 50] and not more


@pytest.mark.parametrize("data", [
    b"plain\nlines\n\n",
    b"windows\r\nlines\r\n",
    b"bad \xff\xfe bytes\nand \xe9 latin\n",
    b"x" * 200_000 + b"\nafter a long line\n",  # pieces of 64 KiB with no newline between them
    "\u00e9\u4e2d\ufffd real\n".encode(),
])
def test_a_stored_lines_end_is_never_guessed_past_the_next_line(data):
    lines = LineSplitter().feed_lines(data)
    starts = [offset for offset, _ in lines[1:]] + [len(data)]
    for line, start in zip(lines, starts):
        assert end_at_least(line) <= start


def test_a_plain_stored_lines_end_is_exact():
    data = "plain\nlines \u00e9\u4e2d\n\nend\n".encode()
    lines = LineSplitter().feed_lines(data)
    assert [end_at_least(line) for line in lines] == [offset for offset, _ in lines[1:]] + [len(data)]
