"""The changes stream's server side (``gpuplaned.service.api.changes``): pacing per follower in
virtual time over a real ``Broadcast``, and what reaches it from a real store actor and SQLite
file (committed topics, nothing of a write rolled back) and from the node registry (``nodes``)."""

from __future__ import annotations

import json

import pytest
import trio
from inprocess import daemon_context

from gpuplaned.actors import store
from gpuplaned.domain.change_pacing import ChangePacing
from gpuplaned.protocol.agent import NodeSnapshot
from gpuplaned.protocol.change_replies import TOPICS
from gpuplaned.runtime.broadcast import Broadcast
from gpuplaned.runtime.spec import ActorSpec
from gpuplaned.service.api import changes
from gpuplaned.service.link.registry import NodeRegistry
from gpuplaned.store.writer import write

ALL = frozenset(TOPICS)
JOBS, RUNS, NODES = frozenset({"jobs"}), frozenset({"runs"}), frozenset({"nodes"})


def parse(frame: bytes) -> tuple[str, list[str]]:
    """(event, topics) of one frame; the stream's frames carry no id."""
    fields = dict(line.split(": ", 1) for line in frame.decode().strip().split("\n"))
    assert set(fields) == {"event", "data"}, frame
    return fields["event"], json.loads(fields["data"])["topics"]


class Follower:
    """``changes.follow`` read by a task of its own: each event with the virtual time it came."""

    def __init__(self, feed: Broadcast[frozenset[str]], allowed: frozenset[str] = ALL) -> None:
        self.feed, self.allowed = feed, allowed
        self.events: list[tuple[float, str, list[str]]] = []

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        frames = changes.follow(self.feed, self.allowed)
        self.events.append((trio.current_time(), *parse(await frames.__anext__())))
        task_status.started()
        async for frame in frames:
            self.events.append((trio.current_time(), *parse(frame)))

    def changes(self) -> list[tuple[float, list[str]]]:
        return [(at, topics) for at, event, topics in self.events if event == "changes"]


async def follower(nursery, feed, allowed=ALL) -> Follower:
    one = Follower(feed, allowed)
    await nursery.start(one.run)
    return one


def test_pacing_sends_a_lone_change_at_once_and_the_rest_at_the_window_s_end():
    pacing = ChangePacing(0.5)
    assert pacing.due() is None
    pacing.add(JOBS)
    assert pacing.due() <= 10.0
    assert pacing.take(10.0) == ["jobs"]
    pacing.add(RUNS)
    pacing.add(JOBS | NODES)
    assert pacing.due() == 10.5
    assert pacing.take(10.5) == ["jobs", "nodes", "runs"]
    assert pacing.due() is None
    with pytest.raises(ValueError, match="window_s must be positive"):
        ChangePacing(0)


async def test_ready_lists_the_caller_s_topics_then_a_lone_change_goes_out_at_once(nursery, autojump_clock):
    feed: Broadcast[frozenset[str]] = Broadcast()
    one = await follower(nursery, feed, frozenset({"runs", "jobs"}))
    assert one.events == [(0.0, "ready", ["jobs", "runs"])]
    await trio.sleep(7)
    feed.publish(JOBS)
    await trio.sleep(0.001)
    assert one.changes() == [(7.0, ["jobs"])]


async def test_a_burst_of_1000_writes_is_two_events_at_most_naming_the_union(nursery, autojump_clock):
    feed: Broadcast[frozenset[str]] = Broadcast()
    one = await follower(nursery, feed)
    await trio.sleep(1)
    for n in range(1000):  # 1,000 commits over 0.4 s
        feed.publish(RUNS if n == 500 else JOBS)
        await trio.sleep(0.0004)
    await trio.sleep(2)
    assert one.changes() == [(1.0, ["jobs"]), (1.5, ["jobs", "runs"])]


async def test_changes_in_a_window_go_out_together_at_its_end_then_the_next_waits_its_window(nursery,
                                                                                                  autojump_clock):
    feed: Broadcast[frozenset[str]] = Broadcast()
    one = await follower(nursery, feed)
    feed.publish(JOBS)
    await trio.sleep(0.1)
    feed.publish(RUNS)
    await trio.sleep(0.1)
    feed.publish(NODES)
    await trio.sleep(0.6)  # 0.8: past the window's end at 0.5
    feed.publish(JOBS)  # in the window the trailing event opened: at its end, 1.0
    await trio.sleep(1)
    feed.publish(RUNS)  # the window is long over: at once
    await trio.sleep(1)
    assert one.changes() == [(0.0, ["jobs"]), (0.5, ["nodes", "runs"]), (1.0, ["jobs"]), (1.8, ["runs"])]


async def test_a_follower_hears_only_its_topics_and_one_that_fell_behind_gets_all_of_them(nursery, autojump_clock):
    feed: Broadcast[frozenset[str]] = Broadcast()
    allowed = frozenset({"jobs", "runs", "nodes"})
    one = await follower(nursery, feed, allowed)
    feed.publish(frozenset({"audit", "tokens"}))
    await trio.sleep(1)
    assert one.changes() == []  # not its topics: not even an empty event
    feed.publish(frozenset({"audit", "runs"}))
    await trio.sleep(1)
    for _ in range(changes.QUEUE + 10):  # more than its queue holds before it runs again
        feed.publish(JOBS)
    await trio.sleep(1)
    assert one.changes() == [(1.0, ["runs"]), (2.0, ["jobs", "nodes", "runs"])]


async def test_committed_writes_of_a_real_store_reach_a_follower_and_rolled_back_ones_do_not(tmp_path, nursery):
    spec = ActorSpec("store", store.run, frozenset({"all"}), graceful_stop=True, inbox_size=1024)
    async with daemon_context(tmp_path, nursery, [spec]) as shared:
        port = shared.supervisor.ports["store"]
        async with shared.changes.subscribe() as heard:

            def refused(conn):
                conn.execute("INSERT INTO projects (id, name, created_at) VALUES ('p0', 'p0', 1)")
                raise ValueError("no")

            with pytest.raises(ValueError):
                await write(port, refused)
            await write(port, lambda conn: conn.execute(
                "INSERT INTO job_groups (name, parallel) VALUES ('g', 2)"), small=True)
            with trio.fail_after(5):
                assert await heard.__anext__() == {"groups"}  # the refused write came to nothing
            assert heard.pending == 0


async def test_the_registry_marks_nodes_with_each_live_snapshot_and_as_a_node_comes_and_goes():
    feed: Broadcast[frozenset[str]] = Broadcast()
    registry = NodeRegistry(feed)
    async with feed.subscribe() as heard:
        registry.update_snapshot("nd_gone", NodeSnapshot(1, "fake", ()))  # not connected: not kept
        assert heard.pending == 0
        registry.attach("nd_1", trio.open_memory_channel(1)[0])  # online
        registry.update_snapshot("nd_1", NodeSnapshot(1, "fake", ()))
        registry.update_snapshot("nd_1", NodeSnapshot(2, "fake", ()))
        registry.detach("nd_1")  # offline
        assert [await heard.__anext__() for _ in range(4)] == [NODES] * 4
        assert heard.pending == 0
