"""What every daemon's control API says of itself and does to its actors (the server's app and a
remote agent's both answer from ``gpuplaned.runtime.actor_control``), over a real supervisor."""

from __future__ import annotations

import pytest
import trio
from inprocess import daemon_context

from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.runtime import actor_control
from gpuplaned.runtime.spec import ActorSpec
from gpuplaned.runtime.supervisor import Supervisor

ROLES = frozenset({"all"})


async def idle(ctx, *, task_status=trio.TASK_STATUS_IGNORED):
    task_status.started()
    await trio.sleep_forever()


@pytest.fixture
async def supervisor(nursery) -> Supervisor:
    sup = Supervisor([ActorSpec("api", idle, ROLES, stoppable=False), ActorSpec("worker", idle, ROLES)])
    await nursery.start(sup.run)
    return sup


async def refused(call) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await call
    return caught.value


async def test_actors_are_listed_and_shown(supervisor, autojump_clock):
    await trio.sleep(5)
    listed = actor_control.list_actors(supervisor)
    assert [(a.name, a.state, a.uptime_s, a.restarts) for a in listed] == [
        ("api", "RUNNING", 5.0, 0), ("worker", "RUNNING", 5.0, 0)]
    assert actor_control.get_actor(supervisor, "worker") == listed[1]
    with pytest.raises(ApiError) as caught:
        actor_control.get_actor(supervisor, "nope")
    assert caught.value.code is ErrorCode.NOT_FOUND and caught.value.message == "no actor named 'nope'"
    assert caught.value.details == {"actor": "nope", "actors": ["api", "worker"]}


async def test_commands_and_their_refusals(supervisor, autojump_clock):
    stopped = await actor_control.command_actor(supervisor, "worker", "stop", running=True)
    assert stopped.name == "worker" and stopped.state == "STOPPED"
    assert (await actor_control.command_actor(supervisor, "worker", "start", running=True)).state == "STARTING"

    # An unknown verb is named first, whatever the daemon's state; then a daemon not running
    # refuses; then the actor must exist, and the API's own actor may not stop.
    error = await refused(actor_control.command_actor(supervisor, "nope", "frob", running=False))
    assert error.code is ErrorCode.NOT_FOUND and error.details == {"verbs": ["start", "stop", "restart"]}
    error = await refused(actor_control.command_actor(supervisor, "worker", "stop", running=False))
    assert error.code is ErrorCode.STOPPING and error.message == "the daemon is not running its actors now"
    assert supervisor.snapshot("worker").state.value == "STARTING"  # untouched
    error = await refused(actor_control.command_actor(supervisor, "nope", "restart", running=True))
    assert error.code is ErrorCode.NOT_FOUND and error.details["actors"] == ["api", "worker"]
    error = await refused(actor_control.command_actor(supervisor, "api", "stop", running=True))
    assert error.code is ErrorCode.CONFLICT and error.details == {"actor": "api"}


async def test_the_daemon_says_its_version_endpoints_and_tasks(tmp_path, nursery):
    async with daemon_context(tmp_path, nursery, [ActorSpec("worker", idle, ROLES)]) as ctx:
        info = actor_control.daemon_info(ctx, "9.8.7", "http://127.0.0.1:8765")
        assert (info.version, info.role, info.state) == ("9.8.7", "all", "NOT_READY")
        assert info.endpoints.unix == ctx.endpoint.unix_path and info.endpoints.http == "http://127.0.0.1:8765"
        assert info.home == str(ctx.config.home) and info.config_file is None
        assert info.tasks == actor_control.count_tasks() > 3  # the test's, the supervisor's, the worker's...
        assert actor_control.daemon_info(ctx, "9.8.7").endpoints.http is None  # an agent has no HTTP front
