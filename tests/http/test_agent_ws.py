"""The server's side of the uplink: a real ``--role server`` daemon, and this test playing the
agent over a raw WebSocket (``/api/v1/agent/ws``, frames as ``gpuplaned.protocol.uplink_frames``).

One server for the module, with short timers (``[uplink] heartbeat_s``, ``dispatch_ack_s``); each
test uses its own node name (and agent id), so the tests do not see each other's jobs.
"""

from __future__ import annotations

import base64
import http.client
import itertools
import json
import sqlite3
import time
import uuid
from contextlib import asynccontextmanager, closing
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio
from helpers import DaemonProcess, kill_processes_with_env
from gpuplaned.protocol.errors import ApiError
from trio_websocket import ConnectionClosed, open_websocket_url

pytestmark = pytest.mark.e2e

HEARTBEAT_S = 0.5
DISPATCH_ACK_S = 1.0
GPU = {"index": 0, "model": "H100", "memory_mb": 81559}
_names = itertools.count(1)


class Server:
    def __init__(self, daemon: DaemonProcess) -> None:
        self.daemon = daemon
        self.client = daemon.client()
        self.ws_url = self.client.get("/api/v1/daemon")["endpoints"]["http"].replace("http://", "ws://") \
            + "/api/v1/agent/ws"
        self.agent_token = self.client.post("/api/v1/tokens", {"name": "agent", "scopes": ["agent"]})["secret"]
        self.read_token = self.client.post("/api/v1/tokens", {"name": "reader", "scopes": ["read"]})["secret"]

    def job(self, job_id: str) -> dict:
        return self.client.get(f"/api/v1/jobs/{job_id}")["job"]

    def events(self, **filters: str) -> list[dict]:
        query = "&".join(f"{k}={v}" for k, v in filters.items())
        return self.client.get(f"/api/v1/events?limit=500&{query}")["events"]

    def node(self, name: str) -> dict:
        return [n for n in self.client.get("/api/v1/nodes")["nodes"] if n["name"] == name][0]

    def submit(self, node: str, command: list[str] | None = None, **fields: Any) -> dict:
        body = {"command": command or ["true"], "cwd": "/", "node": node, "gpu": 1, **fields}
        return self.client.post("/api/v1/jobs", body)["job"]

    def query(self, sql: str, *args: Any) -> list[tuple]:
        with closing(sqlite3.connect(f"file:{self.daemon.home / 'gpuplane.db'}?mode=ro", uri=True)) as conn:
            return conn.execute(sql, args).fetchall()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("server")
    config = root / "config" / "gpuplane" / "gpuplaned.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f"[uplink]\nheartbeat_s = {HEARTBEAT_S}\ndispatch_ack_s = {DISPATCH_ACK_S}\n")
    daemon = DaemonProcess(root, "--role", "server", "--http", "127.0.0.1:0").start()
    try:
        info = daemon.wait_ready()
        assert info["role"] == "server"
        yield Server(daemon)
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


async def until(predicate, timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll without blocking the event loop (the fake agent's heartbeats go on meanwhile)."""
    deadline = trio.current_time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if trio.current_time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await trio.sleep(0.05)


class Agent:
    """The test's side of one connection: frames in arrive in ``inbox`` (heartbeat_ok aside)."""

    def __init__(self, ws, name: str, agent_id: str) -> None:
        self.ws = ws
        self.name = name
        self.agent_id = agent_id
        self.inbox: list[dict] = []
        self.heartbeats_ok = 0
        self.seq = dict.fromkeys(("status", "metrics", "events", "logs", "checkpoints"), 0)
        self.got = trio.Event()

    async def send(self, frame: dict) -> None:
        await self.ws.send_message(json.dumps(frame))

    async def record(self, stream: str, body: dict, seq: int | None = None) -> int:
        if seq is None:
            self.seq[stream] += 1
            seq = self.seq[stream]
        await self.send({"type": "record", "stream": stream, "seq": seq, "body": body})
        return seq

    async def next(self, kind: str, timeout: float = 10.0, **match: Any) -> dict:
        """The first frame of ``kind`` (and fields ``match``) not taken yet."""
        with trio.fail_after(timeout):
            while True:
                for i, frame in enumerate(self.inbox):
                    if frame["type"] == kind and all(frame.get(k) == v for k, v in match.items()):
                        return self.inbox.pop(i)
                self.got = trio.Event()
                await self.got.wait()

    async def reader(self) -> None:
        try:
            while True:
                frame = json.loads(await self.ws.get_message())
                if frame["type"] == "heartbeat_ok":
                    self.heartbeats_ok += 1
                else:
                    self.inbox.append(frame)
                self.got.set()
        except ConnectionClosed:
            self.got.set()

    async def heartbeats(self) -> None:
        with pytest.raises(ConnectionClosed):  # the only way this task ends, but for cancellation
            while True:
                await self.send({"type": "heartbeat", "ts_ms": int(time.time() * 1000), "backlog_records": 7,
                                 "backlog_bytes": 700})
                await trio.sleep(HEARTBEAT_S / 5)


@asynccontextmanager
async def connect(url: str, headers: list[tuple[str, str]]):
    """``open_websocket_url``, and its TCP socket closed at the end even when the server closed the
    WebSocket first (trio-websocket 0.12's client then waits for the server's TCP close and, leaving
    before it comes, never closes its own socket: a ResourceWarning)."""
    async with open_websocket_url(url, extra_headers=headers) as ws:
        try:
            yield ws
        finally:
            if ws.closed:
                await ws._stream.aclose()


@asynccontextmanager
async def agent(server: Server, name: str, agent_id: str | None = None, *, beat: bool = True, **hello: Any):
    """A connected fake agent that said hello (``agent.hello_ok``), heartbeating unless told not to;
    ``hello``: fields of its hello beside or instead of the usual ones."""
    agent_id = agent_id or str(uuid.uuid4())
    headers = [("Authorization", f"Bearer {server.agent_token}")]
    async with connect(server.ws_url, headers) as ws:
        me = Agent(ws, name, agent_id)
        await me.send({"type": "hello", "node_name": name, "agent_version": "0.1.0", "gpus": [GPU],
                       "agent_id": agent_id, "ts_ms": int(time.time() * 1000), **hello})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(me.reader)
            me.hello_ok = await me.next("hello_ok")
            if beat:
                nursery.start_soon(me.heartbeats)
            yield me
            nursery.cancel_scope.cancel()


def status(job: dict, state: str, **more: Any) -> dict:
    return {"type": "job_status", "job_id": job["job_id"], "attempt": job["attempt"], "status": state, **more}


def node_name() -> str:
    return f"agent-{next(_names)}"


async def test_a_server_role_runs_no_node_actors(server):
    actors = {a["name"] for a in server.client.get("/api/v1/actors")["actors"]}
    assert "store" in actors and "scheduler" in actors and "http" in actors
    assert not actors & {"runner", "logs", "monitor", "ckptwatch", "tbtail"}


async def test_a_job_runs_on_the_agent_and_each_record_is_applied_once(server):
    name, agent_id = node_name(), str(uuid.uuid4())
    async with agent(server, name, agent_id) as me:
        ok = me.hello_ok
        assert ok["node_id"].startswith("nd_") and ok["active"] == [] and ok["acked"] == {}
        assert ok["heartbeat_s"] == HEARTBEAT_S and abs(ok["ts_ms"] - time.time() * 1000) < 60_000
        submitted = server.submit(name, ["python", "train.py"])
        dispatch = (await me.next("dispatch"))["job"]
        assert dispatch["job_id"] == submitted["id"] and list(dispatch["argv"]) == ["python", "train.py"]
        assert server.job(submitted["id"])["status"] == "DISPATCHING"
        first = await me.record("status", status(dispatch, "RUNNING", pid=4242))
        assert await me.next("ack", stream="status") == {"type": "ack", "stream": "status", "seq": first}
        assert server.job(submitted["id"])["status"] == "RUNNING"
        events = {"type": "node_events", "events": [{"event_type": "DISK_LOW", "severity": "warning",
                                                     "message": "disk at 97%", "ts": int(time.time() * 1000)}]}
        ev_seq = await me.record("events", events)
        await me.next("ack", stream="events", seq=ev_seq)
        end = await me.record("status", status(dispatch, "SUCCEEDED", exit_code=0))
        await me.next("ack", stream="status", seq=end)
        assert server.job(submitted["id"])["status"] == "SUCCEEDED"
        await until(lambda: me.heartbeats_ok >= 2, what="heartbeat_ok answers")
        link = server.query("SELECT uplink, agent_id FROM nodes WHERE name = ?", name)
        assert link == [(1, agent_id)]

    node_id = ok["node_id"]
    async with agent(server, name, agent_id) as again:  # the same agent back: it resends all three
        assert again.hello_ok["node_id"] == node_id
        assert again.hello_ok["acked"] == {"status": end, "events": ev_seq}
        await again.record("status", status(dispatch, "RUNNING", pid=4242), seq=first)
        await again.record("events", events, seq=ev_seq)
        await again.record("status", status(dispatch, "SUCCEEDED", exit_code=0), seq=end)
        for stream, seq in (("status", first), ("events", ev_seq), ("status", end)):
            await again.next("ack", stream=stream, seq=seq)
        assert not [f for f in again.inbox if f["type"] == "error"]
    assert server.job(submitted["id"])["status"] == "SUCCEEDED"
    assert len(server.events(node_id=node_id, type="DISK_LOW")) == 1
    runs = server.query("SELECT count(*), min(status) FROM runs WHERE job_id = ?", submitted["id"])
    assert runs == [(1, "SUCCEEDED")]


async def test_a_metrics_record_sent_twice_is_stored_once(server):
    name = node_name()
    async with agent(server, name) as me:
        now = int(time.time() * 1000)
        body = {"type": "sys_metrics", "seq": 100, "points": [["gpu0.util", now, 50.0], ["gpu0.util", now + 1, 51.0],
                                                             ["host.cpu", now, 12.5]]}
        seq = await me.record("metrics", body)
        await me.next("ack", stream="metrics", seq=seq)
        # The same record (its seq) again, even with a batch seq the store has not seen: still once.
        await me.record("metrics", {**body, "seq": 101}, seq=seq)
        await me.next("ack", stream="metrics", seq=seq)
        node_id = me.hello_ok["node_id"]

    def points() -> int:
        rows = server.query("SELECT coalesce(sum(c.n), 0) FROM ts_chunks c JOIN ts_series s ON s.id = c.series_id "
                            "WHERE s.kind = 'node' AND s.owner = ? AND c.res = 0", node_id)
        return rows[0][0]

    assert points() == 3
    assert server.query("SELECT count(*) FROM ts_batches WHERE source = ?", node_id) == [(1,)]


async def test_a_records_batch_is_stored_once_and_acked_by_its_last_seq(server):
    name = node_name()
    async with agent(server, name) as me:
        now = int(time.time() * 1000)
        bodies = [{"type": "sys_metrics", "seq": now + i, "points": [["batch.m", now + i, float(i)]]}
                  for i in range(8)]
        # A gap (records the agent's spool dropped) is announced with a skip; the ack is the batch's last seq.
        await me.send({"type": "records", "stream": "metrics", "seqs": [1, 2, 3], "bodies": bodies[:3]})
        await me.send({"type": "skip", "stream": "metrics", "through": 4, "reason": "the spool dropped it"})
        await me.send({"type": "records", "stream": "metrics", "seqs": [5, 6], "bodies": bodies[3:5]})
        assert await me.next("ack", stream="metrics") == {"type": "ack", "stream": "metrics", "seq": 3}
        assert await me.next("ack", stream="metrics") == {"type": "ack", "stream": "metrics", "seq": 6}
        # A resend that overlaps what is stored: only seqs 7 and 8 are new.
        await me.send({"type": "records", "stream": "metrics", "seqs": [5, 6, 7, 8], "bodies": bodies[3:7]})
        await me.next("ack", stream="metrics", seq=8)
        # One body that is not plainly sys_metrics: the batch goes record by record, that one dropped.
        await me.send({"type": "records", "stream": "metrics", "seqs": [9, 10],
                       "bodies": [bodies[7], {"type": "sys_metrics", "seq": 1, "points": [["batch.m", "x", 1]]}]})
        await me.next("ack", stream="metrics", seq=10)
        assert "metrics/10" in (await me.next("error"))["message"]
        # Seqs that do not increase: refused whole, nothing acked, nothing stored.
        await me.send({"type": "records", "stream": "metrics", "seqs": [12, 11], "bodies": bodies[:2]})
        assert "seqs must increase" in (await me.next("error"))["message"]
        # Other kinds are applied one by one, acked once.
        events = [{"type": "node_events", "events": [{"event_type": "DISK_LOW", "severity": "warning",
                                                      "message": f"disk {i}", "ts": now}]} for i in range(3)]
        await me.send({"type": "records", "stream": "events", "seqs": [1, 2, 3], "bodies": events})
        await me.next("ack", stream="events", seq=3)
        await me.send({"type": "records", "stream": "events", "seqs": [2, 3], "bodies": events[1:]})
        await me.next("ack", stream="events", seq=3)
        # A body nested past the JSON depth bound is refused (its own error), the batch acked.
        deep: Any = "x"
        for _ in range(100):
            deep = [deep]
        nested = {"type": "node_events", "events": [{"event_type": "DISK_LOW", "severity": "warning",
                                                     "message": "deep", "ts": now, "context": {"d": deep}}]}
        frame = {"type": "records", "stream": "events", "seqs": [4], "bodies": [nested]}
        await me.ws.send_message(json.dumps(frame, separators=(",", ":")))  # as the agent writes it
        await me.next("ack", stream="events", seq=4)
        assert "events/4: nested too deeply" in (await me.next("error"))["message"]
        assert not [f for f in me.inbox if f["type"] == "ack"]
        node_id = me.hello_ok["node_id"]

    rows = server.query("SELECT coalesce(sum(c.n), 0) FROM ts_chunks c JOIN ts_series s ON s.id = c.series_id "
                        "WHERE s.kind = 'node' AND s.owner = ? AND s.name = 'batch.m' AND c.res = 0", node_id)
    assert rows == [(8,)]
    assert server.query("SELECT stream, seq FROM uplink_streams WHERE node_id = ? ORDER BY stream", node_id) == [
        ("events", 4), ("metrics", 10)]  # an invalid record is claimed too: the stream goes on after it
    assert len(server.events(node_id=node_id, type="DISK_LOW")) == 3


async def test_a_silent_agent_loses_its_jobs_and_gets_them_back(server):
    name, agent_id = node_name(), str(uuid.uuid4())
    async with agent(server, name, agent_id) as me:
        submitted = server.submit(name)
        dispatch = (await me.next("dispatch"))["job"]
        await me.record("status", status(dispatch, "RUNNING"))
        await me.next("ack", stream="status")
        node_id = me.hello_ok["node_id"]
        info = server.node(name)
        assert info["connected"] is True
    await until(lambda: server.job(submitted["id"])["status"] == "LOST", timeout=3 * HEARTBEAT_S + 5,
                what="the job to be LOST")
    lost = server.events(node_id=node_id, type="AGENT_DISCONNECTED")
    assert len(lost) == 1 and lost[0]["context"]["jobs"] == [submitted["id"]]
    assert server.node(name)["status"] == "OFFLINE"
    async with agent(server, name, agent_id) as back:
        active = back.hello_ok["active"]
        assert [(a["job_id"], a["attempt"]) for a in active] == [(dispatch["job_id"], dispatch["attempt"])]
        await back.record("status", status(dispatch, "RUNNING"), seq=me.seq["status"] + 1)
        await back.next("ack", stream="status")
        assert server.job(submitted["id"])["status"] == "RUNNING"
        assert len(server.events(node_id=node_id, type="AGENT_RECONNECTED")) == 1
        await back.record("status", status(dispatch, "SUCCEEDED", exit_code=0), seq=me.seq["status"] + 2)
        await back.next("ack", stream="status")
    assert len(server.events(node_id=node_id, type="AGENT_DISCONNECTED")) == 1  # one per disconnection


async def test_a_dispatch_never_started_is_requeued_three_times_then_fails(server):
    name = node_name()
    async with agent(server, name) as me:
        submitted = server.submit(name)
        attempts = []
        for _ in range(4):  # requeued 3 times, then given up
            attempts.append((await me.next("dispatch", timeout=DISPATCH_ACK_S + 10))["job"]["attempt"])
            await me.next("cancel", timeout=DISPATCH_ACK_S + 10)  # the unstarted attempt: never run it late
        job = await until(lambda: (j := server.job(submitted["id"]))["status"] == "FAILED" and j, timeout=10,
                          what="the job to fail")
        assert attempts == [1, 2, 3, 4]
        assert job["failure_reason"] == "DISPATCH_TIMEOUT" and "3 times" in job["failure_message"]
        assert server.query("SELECT count(*) FROM runs WHERE job_id = ? AND failure_reason = 'DISPATCH_TIMEOUT'",
                            submitted["id"]) == [(4,)]
        assert not [f for f in me.inbox if f["type"] == "dispatch"]


async def test_a_second_agent_with_the_same_name_is_refused(server):
    name = node_name()
    async with agent(server, name):
        headers = [("Authorization", f"Bearer {server.agent_token}")]
        async with connect(server.ws_url, headers) as ws:
            await ws.send_message(json.dumps({"type": "hello", "node_name": name, "agent_version": "0.1.0",
                                              "gpus": [], "agent_id": str(uuid.uuid4())}))
            refused = json.loads(await ws.get_message())
            assert refused["type"] == "hello_err" and "connected node" in refused["message"]
            with pytest.raises(ConnectionClosed):
                await ws.get_message()


async def test_the_same_agent_connecting_again_replaces_its_old_connection(server):
    name, agent_id = node_name(), str(uuid.uuid4())
    async with agent(server, name, agent_id, beat=False) as old:
        async with agent(server, name, agent_id) as new:
            assert new.hello_ok["node_id"] == old.hello_ok["node_id"]
            # Sooner than its silence would close it (3 heartbeats): the newer connection replaced it.
            await until(lambda: old.ws.closed, timeout=2 * HEARTBEAT_S, what="the old connection to be closed")
            assert server.node(name)["connected"] is True


def test_bad_and_read_scope_tokens_are_refused_at_the_handshake(server):
    parts = urlsplit(server.ws_url)
    for token, code in (("nope", 401), (server.read_token, 403)):
        # A plain handshake (trio-websocket leaves its socket open when it is rejected).
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        try:
            conn.request("GET", parts.path, headers={
                "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Authorization": f"Bearer {token}"})
            response = conn.getresponse()
            assert response.status == code
            assert json.loads(response.read())["error"]["code"] in ("unauthorized", "forbidden")
        finally:
            conn.close()


async def test_hostile_frames_get_an_error_and_change_nothing(server):
    name = node_name()
    async with agent(server, name) as me:
        hostile = [
            ("{not json", "not a JSON frame"),
            ("[" * 100_000, "nested deeper than 64"),
            (json.dumps({"type": "nope"}), "type: must be one of"),
            (json.dumps({"type": "record", "stream": "status", "seq": 0, "body": {}}), "bad record: seq"),
            (json.dumps({"type": "record", "stream": "gossip", "seq": 1, "body": {}}), "bad record: stream"),
            (json.dumps({"type": "heartbeat", "ts_ms": "soon", "backlog_records": 0, "backlog_bytes": 0}),
             "bad heartbeat: ts_ms"),
            (json.dumps({"type": "job_status", "job_id": "j", "attempt": 1, "status": "RUNNING"}),
             "not read by the server"),
        ]
        for raw, words in hostile:
            await me.ws.send_message(raw)
            error = await me.next("error")
            assert words in error["message"], (raw[:40], error)
        # A record whose body can never apply is acked (and said why), and stores nothing.
        seq = await me.record("status", {"type": "job_status", "job_id": "job_nope"})
        assert "bad body" in (await me.next("error"))["message"]
        await me.next("ack", stream="status", seq=seq)
        seq = await me.record("status", {"type": "sys_metrics", "seq": 1, "points": []})
        assert "belongs on stream 'metrics'" in (await me.next("error"))["message"]
        await me.next("ack", stream="status", seq=seq)
        await me.send({"type": "ping"})
        assert (await me.next("pong"))["type"] == "pong"  # the connection survived all of it
        await me.ws.send_message("x" * (4 << 20 | 1))
        assert "frame over" in (await me.next("error"))["message"]
        await until(lambda: me.ws.closed, what="an oversized frame to close the connection")
    # Only their seqs are claimed (the stream goes on after them, a reconnect too): nothing else stored.
    assert server.query("SELECT s.seq FROM uplink_streams s JOIN nodes n ON n.id = s.node_id WHERE n.name = ? "
                        "AND s.stream = 'status'", name) == [(2,)]


async def test_a_bad_hello_is_refused_and_closes(server):
    headers = [("Authorization", f"Bearer {server.agent_token}")]
    for first, kind in (({"type": "hello", "node_name": 5}, "hello_err"),
                        ({"type": "heartbeat", "ts_ms": 1, "backlog_records": 0, "backlog_bytes": 0}, "error")):
        async with connect(server.ws_url, headers) as ws:
            await ws.send_message(json.dumps({"type": "ping"}))
            assert json.loads(await ws.get_message())["type"] == "pong"  # answered before a hello too
            await ws.send_message(json.dumps(first))
            assert json.loads(await ws.get_message())["type"] == kind
            with pytest.raises(ConnectionClosed):
                await ws.get_message()


async def test_logs_full_reads_through_the_agent_and_says_when_it_cannot(server):
    name = node_name()
    text = "".join(f"line {i}\n" for i in range(3000))
    async with agent(server, name) as me:
        submitted = server.submit(name)
        dispatch = (await me.next("dispatch"))["job"]
        await me.record("status", status(dispatch, "RUNNING"))
        await me.next("ack", stream="status")

        async def serve_log_reads() -> None:
            while True:
                request = await me.next("request", timeout=30)
                body = request["body"]
                assert body["type"] == "log_read" and body["limit"] == 1 << 20
                data = text.encode()[body["offset"]:body["offset"] + 1000] if body["stream"] == "stdout" else b""
                await me.send({"type": "reply", "id": request["id"], "body": {
                    "type": "log_data", "job_id": body["job_id"], "attempt": body["attempt"],
                    "stream": body["stream"], "offset": body["offset"], "data": base64.b64encode(data).decode(),
                    "size": len(text) if body["stream"] == "stdout" else 0, "ended": False}})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_log_reads)
            page = await trio.to_thread.run_sync(
                lambda: server.client.get(f"/api/v1/jobs/{submitted['id']}/logs?stream=stdout&offset=0&limit=2500"))

            def one_line(offset: int) -> dict:
                return server.client.get(f"/api/v1/jobs/{submitted['id']}/logs?stream=stdout&offset={offset}&limit=1")

            # A page from a line's offset starts with that line; the next page goes on after the last.
            cited, following = await trio.to_thread.run_sync(
                lambda: (one_line(text.index("line 10\n")), one_line(page["next_offset"])))
            nursery.cancel_scope.cancel()
        assert [line["line"] for line in page["lines"]] == [f"line {i}" for i in range(2500)]
        assert page["lines"][10]["offset"] == text.index("line 10\n")
        assert page["next_offset"] == text.index("line 2500\n")
        assert [line["line"] for line in cited["lines"]] == ["line 10"]
        assert cited["next_offset"] == text.index("line 11\n")
        assert [line["line"] for line in following["lines"]] == ["line 2500"]
    await until(lambda: not server.node(name)["connected"], what="the agent to be gone")
    with pytest.raises(ApiError) as refused:
        server.client.get(f"/api/v1/jobs/{submitted['id']}/logs?stream=stdout&offset=0")
    assert refused.value.code.value == "unavailable"
    assert name in refused.value.message and "stored tail (0 lines)" in refused.value.message


async def test_a_slurm_agent_gets_jobs_by_gpu_count_and_a_bad_slurm_hello_is_refused_naming_its_field(server):
    """Issue 32: a pooled node's hello crosses the uplink, and each dispatch says how many GPUs its job
    asked for (Slurm places them: no index); a hello that mixes runner and capacity up registers nothing."""
    name = node_name()
    headers = [("Authorization", f"Bearer {server.agent_token}")]
    slurm = {"type": "hello", "node_name": name, "agent_version": "0.1.0", "gpus": [], "runner": "slurm",
             "pooled": {"gpus_per_job": 4, "max_jobs": 2}}
    for change, words in (({"runner": "bogus"}, "bad hello: runner: must be 'local' or 'slurm', got 'bogus'"),
                          ({"pooled": None}, "bad hello: pooled: required for runner 'slurm'"),
                          ({"pooled": {"gpus_per_job": -1, "max_jobs": 2}},
                           "bad hello: pooled.gpus_per_job: must be 0 or more, got -1"),
                          ({"runner": "local"}, "bad hello: pooled: only a node with runner 'slurm'")):
        async with connect(server.ws_url, headers) as ws:
            await ws.send_message(json.dumps(slurm | change))
            refused = json.loads(await ws.get_message())
            assert refused["type"] == "hello_err" and refused["message"].startswith(words), refused
            with pytest.raises(ConnectionClosed):
                await ws.get_message()
    assert server.query("SELECT count(*) FROM nodes WHERE name = ?", name) == [(0,)]

    async with agent(server, name, gpus=[], runner="slurm", pooled={"gpus_per_job": 4, "max_jobs": 2}) as me:
        submitted = server.submit(name, gpu=3)
        dispatch = (await me.next("dispatch"))["job"]
        assert (dispatch["job_id"], dispatch["gpus"], dispatch["gpu_indexes"]) == (submitted["id"], 3, [])
        node = server.node(name)
        assert (node["runner"], node["pooled"], node["gpus"]) == (
            "slurm", {"gpus_per_job": 4, "max_jobs": 2, "jobs_in_flight": 1}, [])


async def test_a_waiting_report_and_a_condition_from_the_agent_are_stored_once(server):
    """Issue 32: a Slurm agent's WAITING report keeps its job DISPATCHING past the dispatch's ack
    timeout, with its reason, one JOB_WAITING event however often it is resent; its monitor's
    condition (event record, snapshot frame) stops new work on the node until cleared."""
    name = node_name()
    async with agent(server, name) as me:
        node_id = me.hello_ok["node_id"]
        submitted = server.submit(name)
        dispatch = (await me.next("dispatch"))["job"]
        waiting = await me.record("status", status(dispatch, "WAITING", message="Slurm: Resources"))
        await me.next("ack", stream="status", seq=waiting)
        await me.record("status", status(dispatch, "WAITING", message="Slurm: Resources"), seq=waiting)  # a resend
        await me.next("ack", stream="status", seq=waiting)
        await trio.sleep(DISPATCH_ACK_S * 2.5)  # the liveness sweep (every heartbeat_s) leaves it alone
        job = server.job(submitted["id"])
        assert (job["status"], job["attempt"], job["wait_reason"]) == ("DISPATCHING", 1, "Slurm: Resources")
        assert not [f for f in me.inbox if f["type"] in ("cancel", "dispatch")]
        assert [e["context"]["reason"] for e in server.events(job_id=submitted["id"], type="JOB_WAITING")] == [
            "Slurm: Resources"]
        await me.next("ack", stream="status", seq=await me.record("status", status(dispatch, "RUNNING")))
        job = server.job(submitted["id"])
        assert (job["status"], job["wait_reason"]) == ("RUNNING", None)

        message = "slurmctld did not answer squeue within 10 s: timed out"
        raised = {"type": "node_events", "events": [{
            "event_type": "NODE_CONDITION_RAISED", "severity": "warning", "message": f"slurm_unreachable: {message}",
            "ts": int(time.time() * 1000), "context": {"name": "slurm_unreachable", "message": message}}]}
        await me.next("ack", stream="events", seq=await me.record("events", raised))
        await me.send({"type": "node_snapshot", "ts": int(time.time() * 1000), "backend": "fake",
                       "conditions": ["slurm_unreachable"], "accepting": False,
                       "condition_messages": {"slurm_unreachable": message}})
        shown = await until(lambda: (n := server.node(name))["condition_messages"] and n, what="the condition")
        assert (shown["status"], shown["accepting"]) == ("UNHEALTHY", False)
        assert shown["condition_messages"] == {"slurm_unreachable": message}
        assert [e["context"] for e in server.events(node_id=node_id, type="NODE_CONDITION_RAISED")] == [
            {"name": "slurm_unreachable", "message": message}]
