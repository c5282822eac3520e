"""Webhooks end to end: real daemon processes, gpuplanectl webhook, a job that fails, and a real
HTTP receiver on loopback that is down until after a kill -9 and restart."""

from __future__ import annotations

import json
import signal
import sqlite3

import pytest
from helpers import Jobs, wait_for
from webhook_receiver import Receiver, signature_ok

pytestmark = pytest.mark.e2e

SECRET = "daemon-test-secret"


def ctl_json(daemon, *args: str) -> dict:
    done = daemon.run_ctl(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_pending_notification_survives_kill_9_and_arrives_once(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    receiver = Receiver()  # not listening yet
    daemon = jobs.daemon
    daemon.env["GPUPLANE_WEBHOOK_SECRET"] = SECRET
    hook = ctl_json(daemon, "webhook", "add", receiver.url, "--events", "JOB_FAILED", "--severity", "warning")["webhook"]
    assert hook["signed"] and hook["format"] == "json"
    tested = daemon.run_ctl("webhook", "test", hook["id"])
    assert tested.returncode == 1 and "not delivered" in tested.stderr

    job = jobs.sh("exit 3", gpu=0)
    jobs.wait(job["id"], "FAILED")
    wait_for(lambda: daemon.client().get("/api/v1/webhooks")["webhooks"][0]["last_error"], what="a failed attempt")
    daemon.signal(signal.SIGKILL)
    daemon.wait_exit()
    db = daemon.home / "gpuplane.db"
    with sqlite3.connect(db) as conn:  # its URL is sealed; made as before migration 0021, it is not
        [(shown, sealed)] = conn.execute("SELECT url, url_sealed FROM webhook_subscriptions").fetchall()
        assert shown.endswith("/***") and receiver.url not in shown and sealed
        conn.execute("UPDATE webhook_subscriptions SET url = ?, url_sealed = NULL", (receiver.url,))

    receiver.start()
    try:
        jobs.restart(daemon_factory, "--gpus=none")
        events = wait_for(lambda: [json.loads(b)["event"] for _, b in receiver.received], what="the notification")
        assert [e["type"] for e in events] == ["JOB_FAILED"] and events[0]["job_id"] == job["id"]
        headers, body = receiver.received[0]
        assert signature_ok(SECRET, headers, body)
        listed = wait_for(lambda: [h for h in jobs.client.get("/api/v1/webhooks")["webhooks"] if h["delivered"] == 1],
                          what="the delivery recorded")
        assert listed[0]["pending"] == 0 and len(receiver.received) == 1
        with sqlite3.connect(db) as conn:  # sealed at the start, and delivered all the same
            [(shown, sealed)] = conn.execute("SELECT url, url_sealed FROM webhook_subscriptions").fetchall()
        assert shown.endswith("/***") and receiver.url not in shown and sealed

        text = jobs.daemon.run_ctl("webhook", "list").stdout
        assert hook["id"] in text and SECRET not in text
        assert jobs.daemon.run_ctl("webhook", "test", hook["id"]).stdout.startswith("delivered (HTTP 200)")
        assert jobs.daemon.run_ctl("webhook", "remove", hook["id"]).returncode == 0
        assert jobs.daemon.run_ctl("webhook", "remove", hook["id"]).returncode == 1
        bad = jobs.daemon.run_ctl("webhook", "add", receiver.url, "--events", "NOPE")
        assert bad.returncode == 2, bad.stderr
    finally:
        receiver.stop()
