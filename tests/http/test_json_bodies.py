"""Request bodies: a lone surrogate is refused however it is written, and only a body that
could hold one is walked (a metric batch is not); JSON nested too deeply is a 400 wherever it
comes in (bodies, cursors, agent frames), never a ``RecursionError``."""

from __future__ import annotations

import base64
import http.client
import json
from urllib.parse import urlsplit

import pytest
from helpers import running_jobs
from unixhttp import BASE_URL, unix_session

from gpuplaned.http.bodies import _may_hold_surrogates
from gpuplaned.protocol import agent
from gpuplaned.protocol import bounded_json
from gpuplaned.service.link import agent_link

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(("raw", "walked"), [
    (b'{"name": "\\ud800"}', True),
    (b'{"name": "\\uDFFF"}', True),  # either case
    (b'{"name": "\\uDbFf"}', True),
    (b'{"name": "\xed\xa0\x80"}', True),  # the surrogate's own UTF-8 bytes: json.loads passes them through
    (b'{"name": "\\ud83d\\ude00"}', True),  # a pair: walked, and it passes
    (b'{"name": "\\ud7ff \xed\x9f\xbf \\\\ud800"}', True),  # an escaped backslash: walked for nothing, harmless
    (b'{"name": "\\ud7ff \xed\x9f\xbf \\u00e9"}', False),  # the code points just below, other escapes
    (b'{"seq": 0, "metrics": {"loss": {"step": [1], "ts": [2], "value": [0.5]}}}', False),
    ('{"name": "x"}'.encode("utf-16"), True),  # UTF-16 and UTF-32 are always walked
    ('{"name": "x"}'.encode("utf-32"), True),
])
def test_which_bodies_are_walked(raw, walked):
    assert _may_hold_surrogates(raw) is walked


@pytest.fixture(scope="module")
def refusals_session(tmp_path_factory):
    """One daemon for the refused bodies: none opens a session, so none needs a fresh daemon,
    whose start was most of such a case's time. A ``requests`` session on its Unix socket."""
    with running_jobs(tmp_path_factory.mktemp("refusals"), "--gpus=fake:2") as jobs:
        session = unix_session(str(jobs.daemon.socket_path))
        yield session
        session.close()


@pytest.mark.parametrize("raw", [
    b'{"name": "\\ud800"}',
    b'{"name": "a\\uDC00b"}',
    b'{"name": "\xed\xa0\x80"}',
    b'{"name": "ok", "tags": ["\\uDBFF"]}',
    '{"name": "\\ud800"}'.encode("utf-16"),
    '{"name": "x", "config": {"\\udfff": 1}}'.encode("utf-8-sig"),
])
def test_a_lone_surrogate_is_refused_however_it_is_written(refusals_session, raw):
    response = refusals_session.post(f"{BASE_URL}/api/v1/sessions", data=raw, timeout=10)
    assert response.status_code == 400, response.text
    assert "lone surrogate" in response.json()["error"]["message"]


def test_a_surrogate_pair_and_a_batch_without_escapes_pass(api_session):
    response = api_session.post(f"{BASE_URL}/api/v1/sessions", data=b'{"name": "run \\ud83d\\ude00"}', timeout=10)
    assert response.status_code == 201, response.text
    opened = response.json()
    assert opened["session"]["id"] == opened["session_id"]
    batch = b'{"seq": 0, "metrics": {"loss": {"step": [0, 1], "ts": [1, 2], "value": [0.5, 0.25]}}}'
    stored = api_session.post(f"{BASE_URL}/api/v1/sessions/{opened['session_id']}/batches", data=batch, timeout=10)
    assert stored.status_code == 200 and stored.json()["points"] == 2
    bad = b'{"seq": 1, "metrics": {"loss\\ud800": {"step": [2], "ts": [3], "value": [0.1]}}}'
    refused = api_session.post(f"{BASE_URL}/api/v1/sessions/{opened['session_id']}/batches", data=bad, timeout=10)
    assert refused.status_code == 400 and "lone surrogate" in refused.json()["error"]["message"]


# ------------------------------------------------------------------ nesting: refused before it recurses

DEEP = b"[" * 100_000 + b"]" * 100_000  # json.loads raises RecursionError, no ValueError


def nested(depth: int) -> bytes:
    """A JSON object ``depth`` levels deep."""
    return b'{"a": ' * depth + b"1" + b"}" * depth


def session_body(config_depth: int) -> bytes:
    return b'{"name": "deep", "config": ' + nested(config_depth) + b"}"


@pytest.mark.parametrize(("raw", "deeper"), [
    (b"[]", False), (b"[" * 64 + b"]" * 64, False), (b"[" * 65 + b"]" * 65, True),
    (nested(64), False), (nested(65), True), (b"[{}, [[]], " + nested(63) + b"]", False),
    (b"[" + nested(64) + b"]", True),
    (b'["' + b"]" * 70 + b'", ' + b"[" * 65 + b"]" * 65 + b', "' + b"[" * 70 + b'"]', True),  # brackets in strings
    (b'["\\\\", "\\"[[[[", ' + b"[" * 63 + b"]" * 63 + b"]", False),  # escaped backslash, escaped quote
    (b'["\\\\\\"' + b"[" * 70 + b'", []]', False),
])
def test_the_depth_counts_only_brackets_outside_strings(raw, deeper):
    assert json.loads(raw) is not None
    assert bounded_json.nested_deeper(raw, 64) is deeper


def test_too_deep_is_a_value_error_however_deep():
    for raw in (DEEP, nested(65), nested(65).decode(), nested(65).decode().encode("utf-16")):
        with pytest.raises(ValueError, match="nested deeper than 64 levels"):
            bounded_json.loads(raw)
    assert bounded_json.loads(nested(64).decode().encode("utf-32")) is not None


def test_deep_json_is_a_400_on_the_socket_and_what_is_accepted_reads_back(api_session):
    for path in ("/api/v1/jobs", "/api/v1/sessions", "/api/v1/projects"):
        for raw in (DEEP, b'{"name": "x", "labels": ' + b"[" * 5000 + b"]" * 5000 + b"}", session_body(64)):
            response = api_session.post(f"{BASE_URL}{path}", data=raw, timeout=10)
            assert response.status_code == 400, (path, response.text)
            error = response.json()["error"]
            assert error["code"] == "bad_request" and "nested deeper than 64 levels" in error["message"]
    opened = api_session.post(f"{BASE_URL}/api/v1/sessions", data=session_body(63), timeout=10)
    assert opened.status_code == 201, opened.text  # 64 levels with the body itself: the most there may be
    run_id = opened.json()["run_id"]
    for path in (f"/api/v1/runs/{run_id}", "/api/v1/runs"):  # a deeper config made these 500s for good
        assert api_session.get(f"{BASE_URL}{path}", timeout=10).status_code == 200


def test_a_deep_cursor_is_a_400(api_session):
    for deep in (b'["jobs", ' + b"[" * 3000 + b"]" * 3000 + b"]", b'["jobs", ' + nested(70) + b"]"):
        cursor = base64.urlsafe_b64encode(deep).decode().rstrip("=")
        for path in ("/api/v1/jobs", "/api/v1/runs", "/api/v1/events"):
            response = api_session.get(f"{BASE_URL}{path}", params={"cursor": cursor}, timeout=10)
            assert response.status_code == 400, (path, response.text)
            assert response.json()["error"]["details"] == {"field": "cursor"}


def test_deep_json_on_the_tcp_front_is_a_400_with_or_without_a_token(api_jobs):
    client = api_jobs.client
    front = urlsplit(client.get("/api/v1/daemon")["endpoints"]["http"])
    write = client.post("/api/v1/tokens", {"name": "deep", "scopes": ["write"]})["secret"]

    def post(path: str, token: str | None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection(front.hostname, front.port, timeout=10)
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        try:
            conn.request("POST", path, DEEP, headers)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    # Signing in needs no credentials, so its body is read before any token: it was an anonymous 500.
    for path, token, status in (("/api/v1/auth/login", None, 400), ("/api/v1/jobs", write, 400),
                                ("/api/v1/jobs", None, 401)):
        got, body = post(path, token)
        assert got == status, (path, body)
        if status == 400:
            assert "nested deeper than 64 levels" in body["error"]["message"]
    assert "RecursionError" not in api_jobs.daemon.log()


def test_a_deep_agent_frame_is_answered_as_bad_json():
    reply = agent.FRAMES.unstructure(agent_link.read_frame(DEEP))  # as it goes on the wire
    assert reply == {"type": "error", "message": "not a JSON frame: nested deeper than 64 levels"}
