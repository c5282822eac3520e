"""``GET /api/v1/changes/stream`` on the HTTP front and the control socket: a caller hears only
the topics of the lists it may read, and its ``ready`` says which; a job submitted to a real
daemon is heard as ``jobs``."""

from __future__ import annotations

import contextlib
import json
import time

import pytest
import trio
from inprocess import daemon_context

from gpuplaned.actors import store
from gpuplaned.http.app import create_app
from gpuplaned.http.changes_routes import LIST_ROUTES
from gpuplaned.protocol.change_replies import TOPICS
from gpuplaned.runtime.spec import ActorSpec
from gpuplaned.service.api.tokens import create_token
from gpuplaned.store.writer import write

PATH = "/api/v1/changes/stream"
ADMIN_ONLY = {"audit", "tokens", "webhooks"}


class Stream:
    """One stream through the app's test client: its events, (event, topics), as they come."""

    def __init__(self, conn) -> None:
        self.conn, self.buffer = conn, b""

    async def next(self) -> tuple[str, list[str]]:
        while b"\n\n" not in self.buffer:
            self.buffer += await self.conn.receive()
        frame, self.buffer = self.buffer.split(b"\n\n", 1)
        fields = dict(line.split(": ", 1) for line in frame.decode().split("\n"))
        assert set(fields) == {"event", "data"}, frame  # no ids: nothing to resume
        return fields["event"], json.loads(fields["data"])["topics"]

    async def until(self, topic: str) -> set[str]:
        """Every topic heard up to the ``changes`` event that names ``topic``."""
        heard: set[str] = set()
        while topic not in heard:
            event, topics = await self.next()
            assert event == "changes" and topics == sorted(set(topics)) and topics
            heard |= set(topics)
        return heard


def test_every_topic_has_a_list_whose_scope_decides_who_hears_it():
    assert set(LIST_ROUTES) == set(TOPICS)
    assert all(route.method == "GET" for route in LIST_ROUTES.values())


async def test_a_read_token_hears_no_admin_topic_and_its_ready_lists_its_topics(tmp_path, nursery):
    spec = ActorSpec("store", store.run, frozenset({"all"}), graceful_stop=True, inbox_size=1024)
    async with daemon_context(tmp_path, nursery, [spec], readers=True) as shared:
        shared.lifecycle.ready()
        client = create_app(shared, tokens=True)[0].test_client()
        secrets = {scope: (await create_token(shared, scope, [scope])).secret for scope in ("read", "admin")}
        with trio.fail_after(20):
            async with client.request(PATH, headers={"Authorization": f"Bearer {secrets['read']}"}) as read_conn, \
                    client.request(PATH, headers={"Authorization": f"Bearer {secrets['admin']}"}) as admin_conn:
                await read_conn.send_complete()
                await admin_conn.send_complete()
                reader, admin = Stream(read_conn), Stream(admin_conn)
                assert await reader.next() == ("ready", sorted(set(TOPICS) - ADMIN_ONLY))
                assert await admin.next() == ("ready", list(TOPICS))
                assert read_conn.status_code == 200

                await create_token(shared, "another", ["read"])  # tokens
                port = shared.supervisor.ports["store"]
                await write(port, lambda conn: conn.execute("INSERT INTO job_groups (name) VALUES ('g')"))
                assert "tokens" in await admin.until("groups")
                assert ADMIN_ONLY.isdisjoint(await reader.until("groups"))
                shared.changes.close()  # the test client cannot hang up: the server ends the streams


async def test_a_hostile_query_or_body_widens_nothing_and_the_stream_opens_as_ever(tmp_path, nursery):
    """The stream takes no parameters: control characters, a deep query and a big body are ignored,
    never read as topics; a read token still hears only its own."""
    spec = ActorSpec("store", store.run, frozenset({"all"}), graceful_stop=True, inbox_size=1024)
    async with daemon_context(tmp_path, nursery, [spec], readers=True) as shared:
        shared.lifecycle.ready()
        client = create_app(shared, tokens=True)[0].test_client()
        secret = (await create_token(shared, "reader", ["read"])).secret
        hostile = {"topics": "audit,tokens\x00\x1b[2J", "a[b][c][d][e][f]": "x" * 10_000, "\x7f": "\n\r"}
        with trio.fail_after(20):
            async with client.request(PATH, query_string=hostile, headers={"Authorization": f"Bearer {secret}"}) as conn:
                await conn.send(json.dumps({"topics": ["audit"]} | {"deep": [[[[[[[[[[]]]]]]]]]]}).encode() * 20_000)
                await conn.send_complete()
                assert await Stream(conn).next() == ("ready", sorted(set(TOPICS) - ADMIN_ONLY))
                assert conn.status_code == 200
                shared.changes.close()


def test_a_job_submitted_to_a_real_daemon_is_heard_as_jobs(jobs):
    with contextlib.closing(jobs.client.events(PATH, read_timeout=15)) as stream:
        ready = next(stream)
        assert (ready.event, json.loads(ready.data), ready.id) == ("ready", {"topics": list(TOPICS)}, None)
        job = jobs.submit(["true"], gpu=0)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            event = next(stream)
            assert event.event == "changes"
            if "jobs" in json.loads(event.data)["topics"]:
                break
        else:
            pytest.fail("no changes event named jobs")
    jobs.wait(job["id"])
