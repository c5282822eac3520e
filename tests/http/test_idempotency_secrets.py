"""``Idempotency-Key`` on replies that carry a secret, and on public routes: a real daemon,
its HTTP front and its SQLite file."""

from __future__ import annotations

import sqlite3

import httpx
import pytest

from gpuplaned.service.api.ui_sessions import COOKIE

pytestmark = pytest.mark.e2e

KEY = {"Idempotency-Key": "once-k1"}


@pytest.fixture
def front(daemon_factory):
    """The daemon and an admin's client on its HTTP front."""
    daemon = daemon_factory("--gpus=none").start()
    daemon.wait_ready()
    url = daemon.client().get("/api/v1/daemon")["endpoints"]["http"]
    admin = daemon.client().post("/api/v1/tokens", {"name": "admin", "scopes": ["admin"]})["secret"]
    with httpx.Client(base_url=url, timeout=10, headers={"Authorization": f"Bearer {admin}"}) as client:
        yield daemon, client


def kept_keys(daemon) -> list[tuple[str, int | None]]:
    conn = sqlite3.connect(f"file:{daemon.home / 'gpuplane.db'}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT key, status FROM idempotency_keys").fetchall()
    finally:
        conn.close()


def store_bytes(daemon) -> bytes:
    """The database and its write-ahead log, as another process would find them on disk."""
    return b"".join(p.read_bytes() for p in daemon.home.glob("gpuplane.db*"))


@pytest.mark.parametrize(("path", "body", "secret_of"), [
    ("/api/v1/tokens", {"name": "ci", "scopes": ["read"]}, lambda reply: reply["secret"]),
    ("/api/v1/auth/login-links", {}, lambda reply: reply["code"]),
])
def test_a_repeat_is_refused_naming_what_was_made_and_the_secret_is_never_kept(front, path, body, secret_of):
    daemon, client = front
    first = client.post(path, json=body, headers=KEY)
    assert first.status_code == 201 and first.headers["Cache-Control"] == "no-store"
    secret = secret_of(first.json())

    again = client.post(path, json=body, headers=KEY)
    assert again.status_code == 409 and again.headers["Idempotent-Replayed"] == "true"
    assert secret not in again.text
    error = again.json()["error"]
    assert error["code"] == "conflict" and error["details"]["field"] == "Idempotency-Key"
    assert "shown only once and never kept" in error["message"] and "new Idempotency-Key" in error["message"]
    assert kept_keys(daemon) == [("once-k1", 409)]
    assert secret.encode() not in store_bytes(daemon)


def test_a_repeated_token_create_makes_no_second_token_and_names_the_first(front):
    daemon, client = front
    made = client.post("/api/v1/tokens", json={"name": "ci", "scopes": ["read"]}, headers=KEY).json()["token"]
    error = client.post("/api/v1/tokens", json={"name": "ci", "scopes": ["read"]}, headers=KEY).json()["error"]
    assert error["details"]["token_id"] == made["id"]
    assert f"gpuplanectl token revoke {made['id']}" in error["message"]
    assert [t["name"] for t in client.get("/api/v1/tokens").json()["tokens"]].count("ci") == 1


def test_signing_in_reserves_no_key(front):
    daemon, client = front
    read = daemon.client().post("/api/v1/tokens", {"name": "reader", "scopes": ["read"]})["secret"]
    with httpx.Client(base_url=client.base_url, timeout=10) as anonymous:
        replies = [anonymous.post("/api/v1/auth/login", json={"token": read}, headers=KEY) for _ in range(2)]
        wrong = anonymous.post("/api/v1/auth/login", json={"token": "gpp_nope"}, headers=KEY)
    assert [r.status_code for r in replies] == [200, 200] and wrong.status_code == 401
    assert not any("Idempotent-Replayed" in r.headers for r in (*replies, wrong))
    assert len({r.cookies[COOKIE] for r in replies}) == 2  # two sign-ins, two sessions
    assert kept_keys(daemon) == []
