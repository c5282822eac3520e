"""A job's own SDK token (issue 32 item 5; ``gpuplaned.service.api.job_tokens``), in process: a real
store actor and SQLite file, the server's half of the node link, the scheduling pass, and the HTTP
front's app (tokens on) through the quart-trio test client.

A Slurm node whose hello names an SDK server gets, with each dispatch, GPUPLANE_SERVER and a token
held to its job's runs exactly as a job's process is on the control socket, revoked in the
transaction that records the attempt's end; a retry gets a fresh one."""

from __future__ import annotations

import logging
import re
import sqlite3

import pytest
import trio
from inprocess import passes_by_hand

from gpuplaned.http.app import create_app
from gpuplaned.protocol.agent import Hello, JobSpecWire, JobStatus, PooledCapacity
from gpuplaned.protocol.converter import FieldInvalid
from gpuplaned.service.api import job_tokens
from gpuplaned.service.link.nodes import LocalNodeLink
from gpuplaned.service.passes.dispatch import deliver, run_pass
from gpuplaned.store.writer import write

SERVER = "http://login1:8765"
TOKEN = re.compile(r"gpp_[0-9A-HJKMNP-TV-Z]{26}_[A-Za-z0-9_-]{43}")


@pytest.fixture
async def shared(tmp_path, nursery):
    async with passes_by_hand(tmp_path, nursery) as ctx:
        yield ctx


class Node:
    """A pooled node's hello through the server's link, and what its runner is sent."""

    def __init__(self, shared, sdk_server: str | None) -> None:
        self.shared, self.sdk_server = shared, sdk_server
        self.link = LocalNodeLink(shared)
        self.send, self.inbox = trio.open_memory_channel(10)
        self.node_id = ""

    async def hello(self) -> None:
        hello = Hello("hpc", "0", (), (), runner="slurm", pooled=PooledCapacity(1, 8), sdk_server=self.sdk_server)
        self.node_id = (await self.link.hello(hello, self.send)).node_id

    async def dispatch(self) -> list[JobSpecWire]:
        placed = await write(self.shared.supervisor.ports["store"], lambda conn: run_pass(self.shared.nodes, conn))
        assert await deliver(self.shared, placed) == len(placed)
        return [self.inbox.receive_nowait().job for _ in placed]

    async def report(self, job: JobSpecWire, status: str, **more) -> None:
        await self.link.report(self.node_id, JobStatus(job.job_id, job.attempt, status, **more))


async def submit(client, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        response = await client.post("/api/v1/jobs", json={"command": ["true"], "cwd": "/", "gpu": 1})
        assert response.status_code == 201, await response.get_json()
        ids.append((await response.get_json())["job"]["id"])
    return ids


class Front:
    """The HTTP front's app (tokens on), called with one bearer token."""

    def __init__(self, shared) -> None:
        self.client = create_app(shared, tokens=True)[0].test_client()

    async def call(self, token: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        response = await self.client.open(path, method=method, json=body,
                                          headers={"Authorization": f"Bearer {token}"})
        return response.status_code, await response.get_json()


def rows(shared) -> list[tuple]:
    with sqlite3.connect(shared.config.db_path) as conn:
        return conn.execute("SELECT name, scopes, job_id, secret_hash, expires_at - created_at, revoked_at "
                            "FROM api_tokens ORDER BY id").fetchall()


async def test_a_dispatch_to_a_slurm_node_with_a_server_carries_a_token_held_to_its_job(shared, caplog):
    caplog.set_level(logging.DEBUG)
    node = Node(shared, SERVER)
    await node.hello()
    control = create_app(shared)[0].test_client()  # the user, on the control socket
    ids = await submit(control, 2)
    mine, other = await node.dispatch()
    assert [mine.job_id, other.job_id] == ids
    token = mine.env[job_tokens.TOKEN_VAR]
    assert TOKEN.fullmatch(token) and mine.env[job_tokens.SERVER_VAR] == SERVER
    assert other.env[job_tokens.TOKEN_VAR] != token  # each job its own
    assert token not in repr(mine)  # a logged dispatch shows the env's names only
    [(name, scopes, job_id, secret_hash, lifetime, revoked), _] = rows(shared)
    assert (name, scopes, job_id, revoked) == (f"job:{mine.job_id}:attempt-1", '["sdk"]', mine.job_id, None)
    assert lifetime == job_tokens.UNTIMED_S * 1000  # no timeout: the bound
    assert token.split("_", 2)[2] not in secret_hash  # its hash only, as every token

    front = Front(shared)
    # Its job's run: a session, a batch and the run's summary.
    status, opened = await front.call(token, "POST", "/api/v1/sessions", {"job_id": mine.job_id,
                                                                          "run_id": mine.run_id})
    assert status == 201, opened
    session = opened["session_id"]
    batch = {"seq": 0, "metrics": {"loss": {"step": [1], "ts": [1], "value": [0.5]}}}
    status, stored = await front.call(token, "POST", f"/api/v1/sessions/{session}/batches", batch)
    assert (status, stored["points"]) == (200, 1)
    status, summary = await front.call(token, "GET", f"/api/v1/runs/{mine.run_id}/summary")
    assert (status, summary["summary"]["metrics"]["loss"]["count"]) == (200, 1)
    # A run it creates is its own too.
    status, made = await front.call(token, "POST", "/api/v1/sessions", {"name": "eval"})
    assert status == 201
    assert (await front.call(token, "GET", f"/api/v1/runs/{made['run_id']}/summary"))[0] == 200

    # Nothing else: another job's run, a token, a submit, a listing.
    refused = {
        "other run's session": await front.call(token, "POST", "/api/v1/sessions", {"run_id": other.run_id}),
        "other job": await front.call(token, "POST", "/api/v1/sessions", {"job_id": other.job_id}),
        "other run's summary": await front.call(token, "GET", f"/api/v1/runs/{other.run_id}/summary"),
        "token create": await front.call(token, "POST", "/api/v1/tokens", {"name": "x", "scopes": ["admin"]}),
        "job submit": await front.call(token, "POST", "/api/v1/jobs", {"command": ["true"], "cwd": "/"}),
        "job list": await front.call(token, "GET", "/api/v1/jobs"),
    }
    assert {what: status for what, (status, _) in refused.items()} == dict.fromkeys(refused, 403), refused
    assert "SDK token" in refused["job submit"][1]["error"]["message"]

    # Its attempt's end revokes it in the same transaction: refused at once (it is never cached).
    await node.report(mine, "SUCCEEDED", exit_code=0)
    status, body = await front.call(token, "GET", f"/api/v1/runs/{mine.run_id}/summary")
    assert status == 401 and "revoked" in body["error"]["message"]
    assert rows(shared)[0][5] is not None and rows(shared)[1][5] is None  # the other job's lives on
    assert (await front.call(other.env[job_tokens.TOKEN_VAR], "GET",
                             f"/api/v1/runs/{other.run_id}/summary"))[0] == 200
    listed = (await (await control.get("/api/v1/tokens")).get_json())["tokens"]
    assert {t["job_id"] for t in listed} == set(ids)
    assert not any(token in record.getMessage() or token.split("_", 2)[2] in record.getMessage()
                   for record in caplog.records)


async def test_a_retry_gets_a_fresh_token_and_the_old_one_is_dead(shared):
    node = Node(shared, SERVER)
    await node.hello()
    control = create_app(shared)[0].test_client()
    [job_id] = await submit(control, 1)
    [first] = await node.dispatch()
    await node.report(first, "RUNNING")
    # A LOST job may still run: its token lives on until the job is retried.
    await node.report(first, "LOST")
    front = Front(shared)
    old = first.env[job_tokens.TOKEN_VAR]
    assert (await front.call(old, "GET", f"/api/v1/runs/{first.run_id}/summary"))[0] == 200
    assert (await control.post(f"/api/v1/jobs/{job_id}/retry", json={})).status_code == 200
    [second] = await node.dispatch()
    new = second.env[job_tokens.TOKEN_VAR]
    assert second.attempt == 2 and new != old
    assert (await front.call(old, "GET", f"/api/v1/runs/{first.run_id}/summary"))[0] == 401
    assert (await front.call(new, "GET", f"/api/v1/runs/{second.run_id}/summary"))[0] == 200
    assert (await front.call(new, "GET", f"/api/v1/runs/{first.run_id}/summary"))[0] == 200  # its job's runs
    assert [(r[0], r[5] is None) for r in rows(shared)] == [(f"job:{job_id}:attempt-1", False),
                                                            (f"job:{job_id}:attempt-2", True)]


async def test_a_slurm_node_without_a_server_gets_no_token(shared):
    node = Node(shared, None)
    await node.hello()
    await submit(create_app(shared)[0].test_client(), 1)
    [job] = await node.dispatch()
    assert job_tokens.TOKEN_VAR not in job.env and job_tokens.SERVER_VAR not in job.env
    assert rows(shared) == []


def test_a_token_expires_after_the_jobs_timeout_grace_and_a_queue_wait_at_the_latest():
    job = JobSpecWire("job_1", "run_1", 1, "j", ("true",), "/", {}, (), 3600.0, 30.0)
    assert job_tokens.lifetime_ms(job) == (3600 + 30 + job_tokens.QUEUE_WAIT_S) * 1000


def test_a_hello_refuses_an_sdk_server_that_is_no_http_url():
    with pytest.raises(FieldInvalid, match="must be an http") as caught:
        Hello("hpc", "0", (), runner="slurm", pooled=PooledCapacity(1, 1), sdk_server="login1:8765")
    assert caught.value.field == "sdk_server"
