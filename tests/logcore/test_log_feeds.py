"""The live log feeds' registry: the first follower of an attempt wakes the logs actor."""

from __future__ import annotations

from gpuplaned.actors.logs import FollowLogs, LogsHandle, _Tailer

from gpuplaned.service.log_feeds import LogFeeds


async def test_the_first_follower_of_an_attempt_calls_on_new_feed():
    feeds = LogFeeds()
    calls = []
    feeds.on_new_feed = lambda: calls.append(1)
    async with feeds.subscribe("job_a", 1):
        assert calls == [1]
        async with feeds.subscribe("job_a", 1):  # a second follower of the same attempt
            assert calls == [1]
        async with feeds.subscribe("job_a", 2):  # another attempt
            assert calls == [1, 1]
    async with feeds.subscribe("job_a", 1):  # the feed was dropped with its last follower
        assert calls == [1, 1, 1]


async def test_the_tailer_wakes_for_a_follower_only_while_it_follows_jobs():
    class Ctx:
        shared = None

    tailer = _Tailer(Ctx(), LogsHandle(), keep=10)
    tailer.wake_up()
    assert not tailer.wake.is_set()  # nothing followed: its loop waits for a job, not a timer
    tailer.new.append(FollowLogs("job_a", 1, "/nowhere"))
    tailer.wake_up()
    assert tailer.wake.is_set()
