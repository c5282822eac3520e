"""Webhooks in process: a real store actor and SQLite file, the delivery actor, the routes
through the quart-trio test client, and a real HTTP receiver on loopback."""

from __future__ import annotations

import json

import pytest
import trio
from inprocess import daemon_context
from webhook_receiver import Receiver, free_port, signature_ok

from gpuplaned.actors import store, webhooks
from gpuplaned.domain import webhooks as formats
from gpuplaned.http.app import create_app
from gpuplaned.protocol.ids import new_id
from gpuplaned.runtime.spec import ActorSpec
from gpuplaned.service.link.registry import now_ms
from gpuplaned.store import event_rows
from gpuplaned.store.event_rows import EventRow
from gpuplaned.store.writer import write

SECRET = "s3cret-for-the-test"


@pytest.fixture
async def shared(tmp_path, nursery, monkeypatch):
    monkeypatch.setattr(formats, "FIRST_RETRY_S", 0.05)  # retries in tens of ms, not seconds
    specs = [ActorSpec("store", store.run, frozenset({"all"}), graceful_stop=True, inbox_size=1024),
             ActorSpec("webhooks", webhooks.run, frozenset({"all"}), depends_on=("store",))]
    async with daemon_context(tmp_path, nursery, specs, readers=True) as ctx:
        ctx.lifecycle.ready()
        yield ctx


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


async def record(shared, type_: str = "JOB_FAILED", severity: str = "critical") -> EventRow:
    row = EventRow(new_id("ev"), now_ms(), type_, severity, None, "job_1", None, None, f"{type_} happened", {"x": 1})
    await write(shared.supervisor.ports["store"], lambda conn: event_rows.insert_events(conn, [row]))
    shared.event_feed.publish(row)
    return row


async def until(predicate, what: str, timeout: float = 10.0):
    with trio.fail_after(timeout):
        while not (found := predicate()):
            await trio.sleep(0.01)
    return found


async def add(client, url: str, **more) -> dict:
    response = await client.post("/api/v1/webhooks", json={"url": url, **more})
    assert response.status_code == 201, await response.get_data()
    return (await response.get_json())["webhook"]


async def test_signed_bodies_reach_a_receiver_and_the_secret_is_never_shown_or_stored(shared, receiver, tmp_path):
    client = create_app(shared)[0].test_client()
    hook = await add(client, receiver.url, events=["JOB_FAILED", "OOM"], severity="warning", secret=SECRET)
    assert hook["signed"] is True and "secret" not in hook and hook["events"] == ["JOB_FAILED", "OOM"]

    await record(shared, "DISK_OK", "critical")  # not subscribed
    await record(shared, "OOM", "info")  # below the severity
    sent = await record(shared, "JOB_FAILED", "critical")
    await until(lambda: receiver.received, "a delivery")
    headers, body = receiver.received[0]
    assert signature_ok(SECRET, headers, body)
    assert not signature_ok("another secret", headers, body)
    assert json.loads(body)["event"]["id"] == sent.id and headers["X-GPUPlane-Delivery"] == sent.id

    listed = (await (await client.get("/api/v1/webhooks")).get_json())["webhooks"]
    assert SECRET not in json.dumps(listed)
    for path in (tmp_path / "home").glob("gpuplane.db*"):
        assert SECRET.encode() not in path.read_bytes()
    assert len(receiver.received) == 1  # the two that did not match were never queued


async def test_a_receiver_down_then_up_gets_the_notification_after_retries(shared):
    client = create_app(shared)[0].test_client()
    port = free_port()
    later = Receiver(port)
    hook = await add(client, later.url, events=["*"], format="slack")
    await record(shared)

    async def attempts() -> int:
        listed = (await (await client.get("/api/v1/webhooks")).get_json())["webhooks"]
        return listed[0]["pending"], listed[0]["last_error"]

    with trio.fail_after(10):
        while (await attempts())[1] is None:
            await trio.sleep(0.01)
    assert (await attempts())[0] == 1  # failed, still pending
    later.start()
    try:
        await until(lambda: later.received, "the retried delivery")
        assert json.loads(later.received[0][1])["text"].startswith(":rotating_light: *GPUPlane JOB_FAILED")
        with trio.fail_after(10):
            while (await attempts())[0]:
                await trio.sleep(0.01)
        listed = (await (await client.get("/api/v1/webhooks")).get_json())["webhooks"]
        assert listed[0]["delivered"] == 1 and listed[0]["id"] == hook["id"]
    finally:
        later.stop()


async def test_a_dead_endpoint_does_not_hold_up_another(shared, receiver):
    client = create_app(shared)[0].test_client()
    await add(client, f"http://127.0.0.1:{free_port()}/dead", events=["*"])
    await add(client, receiver.url, events=["*"], format="ntfy")
    for _ in range(5):
        await record(shared)
    await until(lambda: len(receiver.received) == 5, "five deliveries to the live endpoint")
    headers, body = receiver.received[0]
    assert headers["Priority"] == "5" and headers["Title"] == "GPUPlane JOB_FAILED (job_1)" and body == b"JOB_FAILED happened"


async def test_test_and_delete_routes(shared, receiver):
    client = create_app(shared)[0].test_client()
    hook = await add(client, receiver.url, events=["JOB_FAILED"], format="bark",
                     secret=SECRET)
    response = await client.post(f"/api/v1/webhooks/{hook['id']}/test")
    assert (await response.get_json())["result"] == {"delivered": True, "status": 200, "error": None}
    headers, body = receiver.received[0]
    assert signature_ok(SECRET, headers, body) and json.loads(body)["title"] == "GPUPlane WEBHOOK_TEST"

    dead = await add(client, f"http://127.0.0.1:{free_port()}/", events=["*"])
    result = (await (await client.post(f"/api/v1/webhooks/{dead['id']}/test")).get_json())["result"]
    assert result["delivered"] is False and result["status"] is None and "ConnectError" in result["error"]

    assert (await client.delete(f"/api/v1/webhooks/{dead['id']}")).status_code == 200
    assert (await client.delete(f"/api/v1/webhooks/{dead['id']}")).status_code == 404
    assert (await client.post("/api/v1/webhooks/wh_nope/test")).status_code == 404
    listed = (await (await client.get("/api/v1/webhooks")).get_json())["webhooks"]
    assert [h["id"] for h in listed] == [hook["id"]]


@pytest.mark.parametrize(("body", "field"), [
    ({"url": "ftp://x/", "events": ["*"]}, "url"),
    ({"url": "http://x/", "events": ["NOPE"]}, "events"),
    ({"url": "http://x/", "events": []}, "events"),
    ({"url": "http://x/", "events": ["*"], "format": "xml"}, "format"),
    ({"url": "http://x/", "events": ["*"], "severity": "loud"}, "severity"),
    ({"url": "http://x/", "events": ["*"], "secret": "short"}, "secret"),
])
async def test_bad_bodies_are_400_naming_the_field(shared, body, field):
    response = await create_app(shared)[0].test_client().post("/api/v1/webhooks", json=body)
    assert response.status_code == 400
    assert (await response.get_json())["error"]["details"]["field"] == field
