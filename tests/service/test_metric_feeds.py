"""The live metric feed: ids, resume points, what is kept, and reset when a resume would leave a gap."""

from __future__ import annotations

import json

import trio

from gpuplaned.service.link import metric_feeds
from gpuplaned.service.link.metric_feeds import MetricFeeds


def batch(step: int, n: int = 1) -> dict:
    return {"loss": {"step": list(range(step, step + n)), "ts": [0] * n, "value": [0.5] * n}}


async def frames(feeds: MetricFeeds, run_id: str, last_id: str | None, count: int) -> list[tuple[str, str, dict]]:
    out = []
    stream = feeds.follow(run_id, (), last_id)
    async for raw in stream:
        fields = dict(line.split(": ", 1) for line in raw.decode().strip().splitlines())
        out.append((fields["event"], fields["id"], json.loads(fields["data"])))
        if len(out) == count:
            break
    await stream.aclose()
    return out


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
