"""The live log feeds' registry: the first follower of an attempt, and its last one leaving,
are passed on (to the node, which wakes its logs actor)."""

from __future__ import annotations

from gpuplaned.actors.logs import FollowLogs, LogsHandle, _Tailer

from gpuplaned.service.link.log_feeds import LogFeeds


async def test_the_first_follower_of_an_attempt_and_the_last_one_leaving_call_on_change():
    feeds = LogFeeds()
    calls = []
    feeds.on_change = lambda key, live: calls.append((key, live))
    async with feeds.subscribe("job_a", 1):
        assert calls == [(("job_a", 1), True)]
        async with feeds.subscribe("job_a", 1):  # a second follower of the same attempt
            assert len(calls) == 1
        async with feeds.subscribe("job_a", 2):  # another attempt
            assert calls[1:] == [(("job_a", 2), True)]
        assert calls[2:] == [(("job_a", 2), False)]
    assert calls[3:] == [(("job_a", 1), False)]
    async with feeds.subscribe("job_a", 1):  # the feed was dropped with its last follower
        assert calls[4:] == [(("job_a", 1), True)]


async def test_the_tailer_wakes_for_a_follower_only_while_it_follows_jobs():
    class Ctx:
        shared = None

    tailer = _Tailer(Ctx(), LogsHandle(), keep=10)
    tailer.wake_up()
    assert not tailer.wake.is_set()  # nothing followed: its loop waits for a job, not a timer
    tailer.new.append(FollowLogs("job_a", 1, "/nowhere"))
    tailer.wake_up()
    assert tailer.wake.is_set()
