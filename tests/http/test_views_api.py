"""Views and the workspace runs over a real daemon's HTTP front, with tokens of each scope: short
links that a read token may make (same state, same id; 64 KiB at most), saved views listed newest
first, deletes held to the creator for a read token; and POST /api/v1/workspace/runs for a read
token, refused to a job's SDK scope, naming an unknown project."""

from __future__ import annotations

import http.client
import json
import re
from urllib.parse import urlsplit

import pytest
from helpers import DaemonProcess, kill_processes_with_env

pytestmark = pytest.mark.e2e


class Front:
    def __init__(self, daemon) -> None:
        self.daemon = daemon
        parts = urlsplit(daemon.client().get("/api/v1/daemon")["endpoints"]["http"])
        self.host, self.port = parts.hostname, parts.port

    def call(self, method: str, path: str, token: str, body=None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.request(method, path, None if body is None else json.dumps(body),
                         {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"{}")
        finally:
            conn.close()

    def token(self, name: str, scopes: list[str]) -> str:
        return self.daemon.client().post("/api/v1/tokens", {"name": name, "scopes": scopes})["secret"]


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    root = tmp_path_factory.mktemp("views")
    daemon = DaemonProcess(root / "d", "--gpus=none").start()
    try:
        daemon.wait_ready()
        yield Front(daemon)
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


@pytest.fixture(scope="module")
def read_token(front) -> str:
    return front.token("bad-bodies", ["read"])


def test_short_links_and_saved_views(front):
    reader, other, writer = (front.token(n, [s]) for n, s in (("r1", "read"), ("r2", "read"), ("w", "write")))
    state = "sel=p:vision&cols=optim.lr,metric:val/loss&smooth=0.6&zoom=100,2000"
    status, made = front.call("POST", "/api/v1/views", reader, {"state": state})
    assert status == 201
    view = made["view"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{8,}", view["id"]) and view["page"] == "experiments" and view["name"] is None
    again = front.call("POST", "/api/v1/views", other, {"state": state})
    assert again == (200, made)  # the same state: the same id, whoever asks
    assert front.call("GET", f"/api/v1/views/{view['id']}", other) == (200, made)

    ids = set()
    for i in range(3):
        status, saved = front.call("POST", "/api/v1/views", reader, {"state": f"{state}&n={i}", "name": f"v{i}"})
        assert status == 201 and saved["view"]["id"] not in ids | {view["id"]}
        ids.add(saved["view"]["id"])
    named = front.call("POST", "/api/v1/views", reader, {"state": state, "name": "mine"})[1]["view"]
    assert named["id"] != view["id"]  # a saved view is its own, though a link has its state
    status, listed = front.call("GET", "/api/v1/views?saved=true", other)
    assert status == 200 and [v["name"] for v in listed["views"]] == ["mine", "v2", "v1", "v0"]

    at_limit = front.call("POST", "/api/v1/views", reader, {"state": "a=" + "x" * (64 * 1024 - 2)})
    assert at_limit[0] == 201 and len(at_limit[1]["view"]["state"]) == 64 * 1024

    status, refused = front.call("DELETE", f"/api/v1/views/{named['id']}", other)
    assert status == 403 and refused["error"]["details"]["view_id"] == named["id"]
    assert front.call("DELETE", f"/api/v1/views/{named['id']}", reader)[0] == 200  # its creator may
    assert front.call("DELETE", f"/api/v1/views/{view['id']}", writer)[0] == 200  # a write scope any
    status, gone = front.call("GET", f"/api/v1/views/{view['id']}", reader)
    assert status == 404 and gone["error"]["details"] == {"view_id": view["id"]}


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"state": "a=" + "x" * (64 * 1024)}, "state", "64 KiB"),
    ({"state": "a=" + "é" * (32 * 1024)}, "state", "64 KiB"),  # bytes of UTF-8, not characters
    ({"state": "?a=1"}, "state", "'?'"),
    ({"state": ""}, "state", ""),
    ({"state": "a=1", "page": "Experiments!"}, "page", "page"),
    ({"state": "a=1", "name": ""}, "name", ""),
    ({"state": "a=1", "colour": "red"}, "colour", ""),
])
def test_bad_views_are_refused_naming_the_field(front, read_token, body, field, words):
    status, reply = front.call("POST", "/api/v1/views", read_token, body)
    assert status == 400 and reply["error"]["details"]["field"] == field, reply
    assert words in reply["error"]["message"]


def test_workspace_runs_for_a_read_token(front):
    client = front.daemon.client()
    opened = client.post("/api/v1/sessions", {"project": "ws", "config": {"optim": {"lr": 0.1}, "seed": None}})
    client.post(f"/api/v1/sessions/{opened['session_id']}/batches", {"seq": 0, "metrics": {
        "val/loss": {"step": [0, 1, 2], "ts": [1, 2, 3], "value": [0.9, 0.4, 0.6]}}})
    reader = front.token("ws-read", ["read"])
    status, reply = front.call("POST", "/api/v1/workspace/runs", reader, {"projects": ["ws"]})
    assert status == 200, reply
    (run,) = reply["runs"]
    assert run["id"] == opened["run_id"] and run["config"] == {"optim.lr": 0.1, "seed": None}
    assert run["metrics"]["val/loss"] == {"count": 3, "last": {"step": 2, "value": 0.6},
                                          "min": {"step": 1, "value": 0.4}, "max": {"step": 0, "value": 0.9},
                                          "best": {"step": 1, "value": 0.4}}
    status, refused = front.call("POST", "/api/v1/workspace/runs", reader, {"projects": ["ws", "gone"]})
    assert status == 400 and refused["error"]["details"]["field"] == "projects[1]"
    assert "gone" in refused["error"]["message"]
    status, refused = front.call("POST", "/api/v1/workspace/runs", reader, {})
    assert status == 400 and refused["error"]["details"]["field"] == "projects"
    sdk = front.token("ws-sdk", ["sdk"])
    assert front.call("POST", "/api/v1/workspace/runs", sdk, {"projects": ["ws"]})[0] == 403


def test_several_runs_on_one_metrics_stream(front):
    client = front.daemon.client()
    opened = [client.post("/api/v1/sessions", {"project": "live"}) for _ in range(2)]
    a, b = (o["run_id"] for o in opened)
    reader = front.token("stream-read", ["read"])
    status, refused = front.call("GET", f"/api/v1/runs/metrics/stream?run_ids={a},run_nope", reader)
    assert status == 404 and refused["error"]["details"]["field"] == "run_ids[1]"

    conn = http.client.HTTPConnection(front.host, front.port, timeout=10)
    try:
        conn.request("GET", f"/api/v1/runs/metrics/stream?run_ids={a},{b}&names=val/*",
                     headers={"Authorization": f"Bearer {reader}"})
        response = conn.getresponse()
        assert response.status == 200 and response.getheader("Content-Type").startswith("text/event-stream")

        def event() -> tuple[str, dict]:
            fields: dict[str, str] = {}
            while (line := response.readline().decode().rstrip("\n")) or not fields:
                if line and not line.startswith(":"):
                    key, _, value = line.partition(": ")
                    fields[key] = value
            return fields["event"], json.loads(fields["data"])

        assert event()[0] == "ready"
        client.post(f"/api/v1/sessions/{opened[1]['session_id']}/batches", {"seq": 0, "metrics": {
            "train/loss": {"step": [0], "ts": [1], "value": [1.0]}, "val/acc": {"step": [0], "ts": [1], "value": [0.5]}}})
        kind, data = event()
        assert kind == "points" and data["run_id"] == b and list(data["series"]) == ["val/acc"]
    finally:
        conn.close()
