"""The control app in process (quart-trio test client) over a real supervisor and endpoint."""

from __future__ import annotations

import pytest
import trio

from inprocess import daemon_context

from gpuplaned.http.app import create_app
from gpuplaned.runtime.spec import ActorSpec


async def idle(ctx, *, task_status=trio.TASK_STATUS_IGNORED):
    task_status.started()
    await trio.sleep_forever()


@pytest.fixture
async def shared(tmp_path, nursery):
    async with daemon_context(tmp_path, nursery, [ActorSpec("worker", idle, frozenset({"all"}))]) as ctx:
        yield ctx


def error_of(body):
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    return body["error"]


async def test_not_ready_then_ready(shared):
    app, _ = create_app(shared)
    client = app.test_client()
    response = await client.get("/api/v1/daemon")
    assert response.status_code == 503
    assert error_of(await response.get_json())["code"] == "not_ready"
    shared.lifecycle.ready()
    response = await client.get("/api/v1/daemon")
    assert response.status_code == 200
    assert (await response.get_json())["state"] == "READY"


async def test_stopping_allows_only_the_daemon_read(shared):
    app, _ = create_app(shared)
    client = app.test_client()
    shared.lifecycle.ready()
    shared.request_shutdown("test")
    assert (await (await client.get("/api/v1/daemon")).get_json())["state"] == "STOPPING"
    response = await client.get("/api/v1/actors")
    assert response.status_code == 503
    assert error_of(await response.get_json())["code"] == "stopping"


async def test_unknown_routes_and_methods_are_json_errors(shared):
    app, stats = create_app(shared)
    client = app.test_client()
    shared.lifecycle.ready()
    response = await client.get("/api/v1/nothing")
    assert response.status_code == 404
    assert error_of(await response.get_json())["message"] == "no such endpoint: GET /api/v1/nothing"
    response = await client.delete("/api/v1/daemon")
    assert response.status_code == 405
    err = error_of(await response.get_json())
    assert err["code"] == "method_not_allowed" and "GET" in err["details"]["allowed"]
    response = await client.post("/api/v1/actors/worker/explode")
    assert response.status_code == 404
    assert error_of(await response.get_json())["details"]["verbs"] == ["start", "stop", "restart"]
    assert stats.errors == 3


async def test_actor_verbs(shared):
    app, _ = create_app(shared)
    client = app.test_client()
    shared.lifecycle.ready()
    response = await client.post("/api/v1/actors/worker/stop")
    assert (await response.get_json())["actor"]["state"] == "STOPPED"
    response = await client.post("/api/v1/actors/worker/start")
    assert (await response.get_json())["actor"]["state"] == "STARTING"
    response = await client.post("/api/v1/actors/ghost/start")
    err = error_of(await response.get_json())
    assert response.status_code == 404 and err["details"]["actors"] == ["worker"]


async def test_internal_errors_never_leak_a_traceback(shared, monkeypatch, caplog):
    app, _ = create_app(shared)
    client = app.test_client()
    shared.lifecycle.ready()

    def broken(_shared):
        raise ZeroDivisionError("secret internals")

    monkeypatch.setattr("gpuplaned.service.api.control.list_actors", broken)
    response = await client.get("/api/v1/actors")
    assert response.status_code == 500
    err = error_of(await response.get_json())
    assert err == {"code": "internal", "message": "internal error: ZeroDivisionError", "details": {}}
    assert "secret internals" not in (await response.get_data(as_text=True))
    assert "secret internals" in caplog.text  # but it is in the daemon's log


async def test_tcp_fallback_secret(shared):
    app, _ = create_app(shared, secret="s3cret")
    client = app.test_client()
    shared.lifecycle.ready()
    assert (await client.get("/api/v1/daemon")).status_code == 401
    bad = await client.get("/api/v1/daemon", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401
    good = await client.get("/api/v1/daemon", headers={"Authorization": "Bearer s3cret"})
    assert good.status_code == 200
