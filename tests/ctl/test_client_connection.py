"""The CLI's client on the control socket keeps one connection for its requests (a new one
costs the daemon ~0.4 ms of CPU, a quarter of a submit), never reuses one the daemon may be
closing, and is safe from several threads. Real daemons, the real socket."""

from __future__ import annotations

import signal
import threading
import time

import gpuplanectl.client as client_module
import pytest
from helpers import wait_for


def test_a_clients_requests_share_one_connection(daemon):
    with daemon.client() as client:
        assert client.get("/api/v1/daemon")["state"] == "READY"
        sock = client._kept.sock
        assert client.post("/api/v1/queue/pause")["paused"] is True
        for _ in range(5):
            client.get("/api/v1/jobs")
        assert client._kept.sock is sock and sock.fileno() >= 0
    assert sock.fileno() == -1  # closed with the client


def test_a_connection_idle_for_half_the_daemons_keep_alive_is_not_reused(daemon_factory, tmp_path):
    config = tmp_path / "gpuplaned.toml"
    config.write_text("[http]\nkeep_alive_timeout_s = 4\n")
    daemon = daemon_factory("--config", str(config))
    daemon.start()
    daemon.wait_ready()
    with daemon.client() as client:
        client.get("/api/v1/daemon")
        assert client._kept_idle_s == 2.0  # its "Keep-Alive: timeout=4", halved
        first = client._kept.sock
        client.get("/api/v1/daemon")
        assert client._kept.sock is first
        time.sleep(2.5)  # past the half, before the daemon closes it
        assert client.post("/api/v1/queue/pause")["paused"] is True
        assert client._kept.sock is not first and first.fileno() == -1
        second = client._kept.sock
        time.sleep(4.5)  # the daemon has closed it: a POST still goes, on a fresh connection
        assert client.post("/api/v1/queue/resume")["paused"] is False
        assert client._kept.sock is not second


@pytest.mark.parametrize(("header", "seconds"), [
    ("timeout=5, max=1000", 5.0), ("max=1000, Timeout = 2", 2.0), ("timeout=0", 0.0), (None, None), ("", None),
    ("max=3", None), ("timeout=soon", None), ("timeout=-1", None), ("timeout=nan", None), ("timeout=inf", None),
])
def test_the_keep_alive_header_is_read_or_ignored(header, seconds):
    assert client_module._keep_alive_s(header) == seconds


def test_a_kept_connection_to_a_daemon_that_restarted_gives_way_to_one_to_the_new_daemon(daemon_factory):
    old = daemon_factory()
    old.start()
    old.wait_ready()
    with old.client() as client:
        client.get("/api/v1/daemon")
        kept = client._kept.sock
        old.signal(signal.SIGTERM)
        assert old.wait_exit() == 0
        new = daemon_factory()  # the same runtime dir, so the same socket path
        new.start()
        new.wait_ready()
        # The old connection was closed with its daemon: seen before use, so even a POST,
        # which is never sent twice, goes on a fresh connection.
        assert client.post("/api/v1/queue/pause")["paused"] is True
        assert client._kept.sock is not kept
        assert client.get("/api/v1/daemon")["pid"] == new.pid


def test_a_request_while_another_thread_holds_the_connection_gets_its_own(daemon):
    with daemon.client() as client:
        client.get("/api/v1/daemon")
        kept = client._kept.sock
        answers = []
        with client._kept_lock:  # another thread's request is under way on it
            thread = threading.Thread(target=lambda: answers.append(client.get("/api/v1/daemon")))
            thread.start()
            thread.join(10)
        assert answers and answers[0]["state"] == "READY"
        assert client._kept.sock is kept


def test_threads_sharing_a_client_each_get_their_own_answers(daemon):
    paths = ["/api/v1/daemon", "/api/v1/queue", "/api/v1/jobs?limit=1", "/api/v1/nodes"]
    keys = ["state", "paused", "jobs", "nodes"]
    wrong: list[str] = []
    with daemon.client() as client:

        def ask(path: str, key: str) -> None:
            for _ in range(40):
                answer = client.get(path)
                if key not in answer:
                    wrong.append(f"{path}: {sorted(answer)}")

        threads = [threading.Thread(target=ask, args=pair) for pair in zip(paths, keys, strict=True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads)
    assert wrong == []


def test_a_client_dropped_without_close_closes_its_connection(daemon):
    client = daemon.client()
    client.get("/api/v1/daemon")
    sock = client._kept.sock
    del client  # no ResourceWarning (pytest turns those into errors here)
    wait_for(lambda: sock.fileno() == -1, what="the dropped client's socket to close")


def test_the_connection_the_daemon_ends_after_its_request_limit_is_replaced(daemon):
    # Hypercorn ends a connection with "Connection: close" on its 1,000th reply
    # (keep_alive_max_requests); the next request, a POST here, goes on a new one.
    with daemon.client() as client:
        client.get("/api/v1/daemon")
        first = client._kept.sock
        for _ in range(999):
            client.get("/api/v1/queue")
        assert client._kept.sock is None  # closed as that reply said
        assert client.post("/api/v1/queue/pause")["paused"] is True
        assert client._kept.sock is not None and client._kept.sock is not first


def test_a_request_goes_to_the_daemon_in_one_write_head_and_body_together(daemon, tmp_path, monkeypatch):
    """http.client writes a request's head and its body apart: the daemon woke twice for one
    request (~0.5 ms of a submit's way to its job's start)."""
    writes: list[bytes] = []
    sendall = client_module.socket.socket.sendall

    def recorded(sock, data, *args):
        writes.append(bytes(data))
        return sendall(sock, data, *args)

    with daemon.client() as client:
        client.get("/api/v1/daemon")  # connected
        monkeypatch.setattr(client_module.socket.socket, "sendall", recorded)
        job = client.post("/api/v1/jobs", {"command": ["true"], "cwd": str(tmp_path), "gpu": 0})["job"]
        assert len(writes) == 1 and writes[0].startswith(b"POST /api/v1/jobs ")
        assert writes[0].endswith(b'"gpu": 0}')  # the body, whole
        writes.clear()
        assert client.get(f"/api/v1/jobs/{job['id']}")["job"]["id"] == job["id"]
        assert len(writes) == 1 and writes[0].startswith(b"GET ") and writes[0].endswith(b"\r\n\r\n")
