"""The live metric feed: ids, resume points, what is kept, and reset when a resume would leave a gap;
and several runs on one stream (``MetricFeeds.follow_many``, behind ``GET /api/v1/runs/metrics/stream``):
only the followed runs' batches, each naming its run, in seq order across runs; a resume replays
every followed run's batches after the id once; a gone resume point of any run is a reset."""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

from gpuplaned.service.link import metric_feeds
from gpuplaned.service.link.metric_feeds import MetricFeeds


def batch(step: int, n: int = 1, name: str = "loss") -> dict:
    return {name: {"step": list(range(step, step + n)), "ts": [0] * n, "value": [0.5] * n}}


async def frames(feeds: MetricFeeds, runs: str | list[str], last_id: str | None, count: int,
                 names: tuple[str, ...] = ()) -> list[tuple[str, str, dict]]:
    """The first ``count`` events of one run's stream (``runs`` a run id) or several runs' (a list)."""
    out = []
    stream = feeds.follow(runs, names, last_id) if isinstance(runs, str) else feeds.follow_many(runs, names, last_id)
    with trio.fail_after(5):  # a missing frame fails the test instead of hanging it
        async for raw in stream:
            out.extend(parse(raw))
            if len(out) >= count:
                break
    await stream.aclose()
    return out


def parse(raw: bytes) -> list[tuple[str, str, dict]]:
    """The events of one write (follow_many gathers several into one)."""
    events = []
    for text in raw.decode().strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in text.splitlines())
        events.append((fields["event"], fields["id"], json.loads(fields["data"])))
    return events


async def test_a_resume_sends_each_batch_after_the_id_once_then_live_ones():
    feeds = MetricFeeds()
    for step in range(3):
        feeds.publish("run_a", batch(step))
    feeds.publish("run_b", batch(100))
    got = await frames(feeds, "run_a", feeds.event_id(1), 2)
    assert [(kind, data["series"]["loss"]["step"]) for kind, _, data in got] == [("points", [1]), ("points", [2])]
    assert got[-1][1] == feeds.event_id(3)  # run_b's batch took seq 4 and is not run_a's

    async with trio.open_nursery() as nursery:
        seen: list = []

        async def follow() -> None:
            seen.extend(await frames(feeds, "run_a", None, 2))

        nursery.start_soon(follow)
        await trio.testing.wait_all_tasks_blocked()
        feeds.publish("run_a", batch(3))
    assert [kind for kind, _, _ in seen] == ["ready", "points"] and seen[1][2]["series"]["loss"]["step"] == [3]


async def test_a_resume_point_that_is_gone_gets_reset(monkeypatch):
    monkeypatch.setattr(metric_feeds, "KEEP_POINTS", 10)
    feeds = MetricFeeds()
    for step in range(0, 30, 5):
        feeds.publish("run_a", batch(step, 5))  # 5 points each: only the last two batches are kept
    assert (await frames(feeds, "run_a", feeds.event_id(1), 1))[0][0] == "reset"
    kept = await frames(feeds, "run_a", feeds.event_id(4), 2)
    assert [d["series"]["loss"]["step"][0] for _, _, d in kept] == [20, 25]
    assert (await frames(feeds, "run_a", "ffffffff-1", 1))[0][0] == "reset"  # another daemon's id
    assert (await frames(feeds, "run_a", feeds.event_id(99), 1))[0][0] == "reset"  # from the future


async def test_nonfinite_values_are_null_with_their_indexes():
    feeds = MetricFeeds()
    feeds.publish("run_a", {"x": {"step": [1, 2, 3], "ts": [0, 0, 0], "value": [float("nan"), 1.0, float("-inf")]}})
    (_, _, data), = await frames(feeds, "run_a", feeds.event_id(0), 1)
    assert data["series"]["x"]["value"] == [None, 1.0, None]
    assert data["series"]["x"]["nonfinite"] == {"NaN": [0], "Infinity": [], "-Infinity": [2]}


async def test_the_followed_runs_batches_in_seq_order_each_naming_its_run():
    feeds = MetricFeeds()
    feeds.publish("run_a", batch(0))  # seq 1
    feeds.publish("run_b", batch(10))  # 2 (its feed begins at 1: a resume from 1 on misses nothing of it)
    feeds.publish("run_c", batch(0))  # 3: not followed
    feeds.publish("run_b", batch(11))  # 4
    feeds.publish("run_a", batch(1))  # 5
    got = await frames(feeds, ["run_a", "run_b"], feeds.event_id(1), 3)
    assert [(d["run_id"], d["seq"], d["series"]["loss"]["step"]) for _, _, d in got] == [
        ("run_b", 2, [10]), ("run_b", 4, [11]), ("run_a", 5, [1])]
    assert [event_id for _, event_id, _ in got] == [feeds.event_id(s) for s in (2, 4, 5)]
    again = await frames(feeds, ["run_a", "run_b"], feeds.event_id(4), 1)  # resumed: each batch once
    assert [(d["run_id"], d["seq"]) for _, _, d in again] == [("run_a", 5)]

    async with trio.open_nursery() as nursery:
        seen: list = []

        async def follow() -> None:
            seen.extend(await frames(feeds, ["run_b", "run_a"], None, 3, ("acc",)))

        nursery.start_soon(follow)
        await trio.testing.wait_all_tasks_blocked()
        feeds.publish("run_c", batch(1, name="acc"))
        feeds.publish("run_b", batch(13))  # no wanted series: no event
        feeds.publish("run_b", batch(12, name="acc"))
        feeds.publish("run_a", batch(2, name="acc"))
    assert [kind for kind, _, _ in seen] == ["ready", "points", "points"]
    assert [(d["run_id"], d["series"]["acc"]["step"]) for _, _, d in seen[1:]] == [("run_b", [12]), ("run_a", [2])]


async def test_a_resume_point_gone_for_any_run_is_a_reset(monkeypatch):
    monkeypatch.setattr(metric_feeds, "KEEP_POINTS", 10)
    feeds = MetricFeeds()
    feeds.publish("run_a", batch(0, 1))  # seq 1
    for step in range(0, 30, 5):
        feeds.publish("run_b", batch(step, 5))  # run_b keeps its last two batches only
    (kind, _, _), = await frames(feeds, ["run_a", "run_b"], feeds.event_id(1), 1)
    assert kind == "reset"  # run_b's batches 2 to 5 are gone
    kept = await frames(feeds, ["run_a", "run_b"], feeds.event_id(5), 2)
    assert [(d["run_id"], d["series"]["loss"]["step"][0]) for _, _, d in kept] == [("run_b", 20), ("run_b", 25)]


async def test_several_runs_live_batches_leave_together_a_lone_one_at_most_the_window_late(autojump_clock):
    feeds = MetricFeeds(gather_s=0.25)
    writes: list[tuple[float, list]] = []

    async def follow() -> None:
        stream = feeds.follow_many(["run_a", "run_b"], (), None)
        async for raw in stream:
            writes.append((trio.current_time(), parse(raw)))
            if sum(len(events) for _, events in writes) == 6:
                break
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        for step in range(4):  # a burst over 0.15 s, both runs
            feeds.publish("run_a" if step % 2 else "run_b", batch(step))
            await trio.sleep(0.05)
        await trio.sleep(1)
        feeds.publish("run_a", batch(10))  # a lone one, long after
    (ready_at, ready), (burst_at, burst), (lone_at, lone) = writes
    assert [kind for kind, _, _ in ready] == ["ready"]
    assert [(d["run_id"], d["series"]["loss"]["step"]) for _, _, d in burst] == \
        [("run_b", [0]), ("run_a", [1]), ("run_b", [2]), ("run_a", [3])]
    assert burst_at - start == pytest.approx(0.25)  # the window opens with the first batch
    assert [d["series"]["loss"]["step"] for _, _, d in lone] == [[10]]
    assert lone_at - (start + 0.2 + 1) == pytest.approx(0.25)
