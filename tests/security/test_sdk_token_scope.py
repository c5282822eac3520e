"""An SDK token over the HTTP front writes only to the runs it owns (issue 29, item 2), against
a real daemon, real tokens and a real SDK job:

- it cannot open a session on another's run, nor re-open another's session by its id, nor
  attach a new run to another's job;
- it cannot send metrics (a NaN to an ``on_nan=stop`` job), events, an environment or a
  finish to another's session: each is 403 and the job runs on to its end;
- on its own run it registers checkpoint files only under the cwd its session declared, after
  ``realpath`` (never ``/etc/passwd``, a ``..`` escape, or a link out), and retention never
  deletes what it registered: its files are on its script's host.
The trusted local socket and an admin token keep writing anywhere.
"""

from __future__ import annotations

import math
import os
import sys
from array import array
from pathlib import Path

import httpx
import pytest
from helpers import Jobs, wait_for

from gpuplaned.protocol import columns

pytestmark = pytest.mark.e2e

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"
VICTIM = """
import os, time, gpuplane
run = gpuplane.init()
run.log({"loss": 0.5}, step=1)
while not os.path.exists("release"):
    time.sleep(0.05)
run.log({"loss": 0.4}, step=2)
run.finish()
"""


class Front:
    """Raw requests to the daemon's HTTP front with a bearer token."""

    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs
        self.url = jobs.client.get("/api/v1/daemon")["endpoints"]["http"].rstrip("/")
        self.made = 0

    def token(self, scopes: list[str]) -> str:
        self.made += 1
        return self.jobs.client.post("/api/v1/tokens", {"name": f"t{self.made}", "scopes": scopes})["secret"]

    def post(self, token: str, path: str, body: dict) -> httpx.Response:
        return httpx.post(self.url + path, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=10)


def _nan_batch(seq: int) -> dict:
    cols = {"step": array("q", [5]), "ts": array("q", [1_700_000_000_000]), "value": array("d", [math.nan])}
    return {"seq": seq, "encoding": "base64",
            "metrics": {"loss": {k: columns.encode(v).decode() for k, v in cols.items()}}}


@pytest.fixture
def jobs(daemon_factory, tmp_path) -> Jobs:
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    wait_for(lambda: jobs.client.get("/api/v1/daemon")["endpoints"].get("http"), what="the front")
    return jobs


def _refused(reply: httpx.Response, *words: str) -> None:
    assert reply.status_code == 403, reply.text
    message = reply.json()["error"]["message"]
    assert all(w in message for w in words), message


def test_a_foreign_sdk_token_cannot_reach_a_jobs_run_and_its_nan_stops_nothing(jobs):
    front = Front(jobs)
    job = jobs.submit([sys.executable, "-c", VICTIM], gpu=0, env={"PYTHONPATH": str(SDK_DIR)}, on_nan="stop")
    run_id = wait_for(lambda: jobs.get(job["id"]).get("run_id"), what="the job's run")
    [session] = wait_for(lambda: jobs.client.get(f"/api/v1/runs/{run_id}/sessions")["sessions"] or None,
                         what="the job's SDK session")
    sdk = front.token(["sdk"])

    _refused(front.post(sdk, "/api/v1/sessions", {"run_id": run_id}), run_id, "may not write")
    _refused(front.post(sdk, "/api/v1/sessions", {"session_id": session["id"]}), run_id)
    _refused(front.post(sdk, "/api/v1/sessions", {"job_id": job["id"]}), "job_id")
    _refused(front.post(sdk, f"/api/v1/sessions/{session['id']}/batches", _nan_batch(900)), run_id)
    _refused(front.post(sdk, f"/api/v1/sessions/{session['id']}/batches",
                        {"seq": 901, "metrics": {}, "events": [{"name": "pwned"}]}), run_id)
    _refused(front.post(sdk, f"/api/v1/sessions/{session['id']}/env", {"cwd": "/"}), run_id)
    _refused(front.post(sdk, f"/api/v1/sessions/{session['id']}/finish", {"status": "FAILED"}), run_id)

    # Its own run takes the same NaN (so the refusals above are about ownership, not the batch).
    own = front.post(sdk, "/api/v1/sessions", {"cwd": str(jobs.workdir)})
    assert own.status_code == 201, own.text
    assert front.post(sdk, f"/api/v1/sessions/{own.json()['session_id']}/batches", _nan_batch(1)).status_code == 200

    (jobs.workdir / "release").touch()
    done = jobs.wait(job["id"], timeout=60)
    assert done["status"] == "SUCCEEDED", done
    assert jobs.client.get(f"/api/v1/runs/{run_id}/sessions")["sessions"][0]["status"] == "SUCCEEDED"
    assert jobs.client.get(f"/api/v1/events?job_id={job['id']}&type=LOSS_NAN")["events"] == []
    assert jobs.client.get(f"/api/v1/events?run_id={run_id}&type=USER_EVENT")["events"] == []


def test_an_admin_token_and_the_local_socket_still_write_to_any_run(jobs):
    front = Front(jobs)
    opened = jobs.client.post("/api/v1/sessions", {"name": "by hand"})  # the local socket: trusted
    admin = front.token(["admin"])
    again = front.post(admin, "/api/v1/sessions", {"run_id": opened["run_id"]})
    assert again.status_code == 201, again.text
    sdk = front.token(["sdk"])
    mine = front.post(sdk, "/api/v1/sessions", {}).json()
    other = front.token(["sdk"])
    _refused(front.post(other, f"/api/v1/sessions/{mine['session_id']}/batches", {"seq": 1, "metrics": {}}),
             mine["run_id"], "another credential")
    assert front.post(sdk, f"/api/v1/sessions/{mine['session_id']}/finish", {}).status_code == 200


def test_an_sdk_tokens_checkpoints_lie_under_its_declared_cwd_and_are_never_deleted(jobs, tmp_path):
    front = Front(jobs)
    sdk = front.token(["sdk"])
    home = tmp_path / "script"
    home.mkdir()
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"v" * 777)
    (home / "link.pt").symlink_to(victim)
    opened = front.post(sdk, "/api/v1/sessions", {"cwd": str(home)}).json()
    batches = f"/api/v1/sessions/{opened['session_id']}/batches"

    for i, path in enumerate(["/etc/passwd", str(home / ".." / "victim.bin"), str(home / "link.pt"), "relative.pt"]):
        reply = front.post(sdk, batches, {"seq": i, "metrics": {}, "checkpoints": [{"path": path, "size_bytes": 777}]})
        if path == "relative.pt":
            assert reply.status_code in (400, 403), reply.text
            continue
        _refused(reply, "checkpoints[0].path", "outside", str(home))
    blank = front.post(sdk, "/api/v1/sessions", {}).json()  # no cwd declared: nowhere
    _refused(front.post(sdk, f"/api/v1/sessions/{blank['session_id']}/batches",
                        {"seq": 1, "metrics": {}, "checkpoints": [{"path": str(home / "a.pt")}]}), "declared no cwd")
    assert jobs.client.get(f"/api/v1/runs/{opened['run_id']}/checkpoints")["checkpoints"] == []

    for step in (1, 2, 3):
        (home / f"step_{step}.pt").write_bytes(b"w" * 100)
    ok = front.post(sdk, batches, {"seq": 10, "metrics": {}, "checkpoints": [
        {"path": str(home / f"step_{s}.pt"), "step": s, "size_bytes": 100} for s in (1, 2, 3)]})
    assert ok.status_code == 200, ok.text
    pruned = jobs.client.post(f"/api/v1/runs/{opened['run_id']}/checkpoints/prune",
                              {"keep_best": 0, "keep_last": 1, "dry_run": False})
    assert pruned["deleted"] == [] and len(pruned["refused"]) == 2, pruned
    assert all("no folder" in r["reason"] for r in pruned["refused"]), pruned
    assert sorted(os.listdir(home)) == ["link.pt", "step_1.pt", "step_2.pt", "step_3.pt"]
    assert victim.read_bytes() == b"v" * 777
