"""A remote node's link in ``GET /api/v1/nodes`` and ``gpuplanectl node list|show|status``
(issue 18): one ``--role server`` daemon and one ``--role agent`` daemon (``tests/remote_cluster.py``,
heartbeats every 0.3 s). While the agent is up its node is ``remote`` with its link attached, a
recent heartbeat, a backlog and a clock skew; after a kill -9 of the agent the link is detached and
the node OFFLINE, its last heartbeat kept. The server's own node of a role-all daemon is not remote
and has no link."""

from __future__ import annotations

import json
import re
import time

import pytest
from helpers import wait_for
from remote_cluster import HEARTBEAT_S, Cluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("link"))
    try:
        cluster.agent("a1", cluster.token("agents", ["agent"]))
        yield cluster
    finally:
        cluster.close()


def _cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def _row(text: str, name: str) -> dict[str, str]:
    """The row of the node named ``name`` in a node table, by column."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("NODE  STATUS"))
    header = _cells(lines[start])
    row = next(_cells(line) for line in lines[start + 1:] if line.split()[:1] == [name])
    assert len(row) == len(header), (header, row)
    return dict(zip(header, row))


def _beaten(cluster: Cluster) -> dict | None:
    """The node once its link has a heartbeat (its backlog and skew come with one)."""
    node = cluster.node("a1")
    return node if node and (node.get("link") or {}).get("last_heartbeat_at") else None


def test_an_attached_link_then_a_detached_one(cluster):
    node = wait_for(lambda: _beaten(cluster), 15, what="a heartbeat on a1's link")
    link = node["link"]
    assert node["remote"] is True and node["status"] == "ONLINE"
    assert link["state"] == "attached"
    now_ms = time.time() * 1000
    assert now_ms - 10_000 < link["last_heartbeat_at"] <= link["last_heard_at"] <= now_ms + 1000
    # The same machine's clock: a skew of a few ms at most, and an idle agent has no backlog to speak of.
    assert isinstance(link["skew_ms"], int) and abs(link["skew_ms"]) < 2000
    assert link["backlog_records"] >= 0 and link["backlog_bytes"] >= 0
    # Heartbeats go on: the next one is newer.
    wait_for(lambda: cluster.node("a1")["link"]["last_heartbeat_at"] > link["last_heartbeat_at"], 10 * HEARTBEAT_S + 5,
             what="the next heartbeat")
    assert cluster.api.get(f"/api/v1/nodes/{node['id']}")["node"]["link"]["state"] == "attached"

    listed = cluster.server.run_ctl("node", "list")
    assert listed.returncode == 0, listed.stderr
    assert _cells(listed.stdout.splitlines()[0]) == ["NODE", "STATUS", "BACKEND", "GPUS", "FREE", "CPU JOBS", "LINK",
                                                     "HEARTBEAT", "BACKLOG", "SKEW", "CONDITIONS"]
    row = _row(listed.stdout, "a1")
    assert row["LINK"] == "attached" and row["STATUS"] == "ONLINE"
    assert re.fullmatch(r"\d+s ago", row["HEARTBEAT"]), row
    assert re.fullmatch(r"0|\S+ / \S+ \S+", row["BACKLOG"]), row
    assert re.fullmatch(r"[+-]\d+ ms", row["SKEW"]), row
    body = json.loads(cluster.server.run_ctl("node", "list", "--json").stdout)
    assert [n["link"]["state"] for n in body["nodes"] if n["name"] == "a1"] == ["attached"]

    shown = cluster.server.run_ctl("node", "show", "a1").stdout.splitlines()
    assert re.fullmatch(r"link:        attached, last heard \d+s ago", next(s for s in shown if s.startswith("link:")))
    assert re.fullmatch(r"clock skew:  [+-]\d+ ms", next(s for s in shown if s.startswith("clock skew:")))
    status = cluster.server.run_ctl("status")
    assert status.returncode == 0, status.stderr
    assert _row(status.stdout, "a1")["LINK"] == "attached"

    cluster.agents[0].daemon.kill()
    gone = wait_for(lambda: (n := cluster.node("a1")) and n["link"]["state"] == "detached" and n, 15,
                    what="a1's link to drop")
    wait_for(lambda: cluster.node("a1")["status"] == "OFFLINE", 15, what="a1 OFFLINE")
    assert gone["remote"] is True
    assert gone["link"]["last_heartbeat_at"] >= link["last_heartbeat_at"]  # what was last heard is kept
    row = _row(cluster.server.run_ctl("node", "list").stdout, "a1")
    assert (row["STATUS"], row["LINK"]) == ("OFFLINE", "detached")
    assert re.fullmatch(r"\d+s ago", row["HEARTBEAT"]), row


def test_the_servers_own_node_is_local(daemon_factory):
    daemon = daemon_factory("--gpus", "fake:1", "--node-name", "box").start()
    daemon.wait_ready()
    node = wait_for(lambda: next(iter(daemon.client().get("/api/v1/nodes")["nodes"]), None), what="the node")
    assert (node["remote"], node["link"]) == (False, None)
    # With no remote node the list keeps its narrow columns.
    listed = daemon.run_ctl("node", "list").stdout.splitlines()
    assert "LINK" not in _cells(listed[0])
    assert "link:        local" in daemon.run_ctl("node", "show", "box").stdout.splitlines()
