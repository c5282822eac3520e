"""The SDK inside a Slurm allocation reaches the daemon over TCP with its job's own token (issue 32
item 5): a real daemon whose node runs its jobs on the private Slurm fixture, with ``[slurm]
server_url`` set to the daemon's loopback HTTP front. The job runs without the control socket in
its environment; its SDK's points still land on its run, and the token it was given works on its
own run only, and not after the job's end."""

from __future__ import annotations

import http.client
import json
import socket
import sys
from pathlib import Path

from helpers import wait_for
from test_slurm_node import slurm_node

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"
# The job: the real SDK over whatever its environment names, then what its token gets from the
# front (argv[1]: a run that is not its job's). It keeps its token for the test to try after its end.
TRAIN = """\
import http.client, json, os, sys
from urllib.parse import urlsplit

assert "GPUPLANE_ENDPOINT" not in os.environ and "GPUPLANE_RUNTIME_DIR" not in os.environ
import gpuplane

run = gpuplane.init()
for step in range(5):
    run.log({"loss": 1.0 / (step + 1)})
run.finish()

server, token = urlsplit(os.environ["GPUPLANE_SERVER"]), os.environ["GPUPLANE_TOKEN"]


def call(method, path, body=None):
    conn = http.client.HTTPConnection(server.hostname, server.port, timeout=10)
    conn.request(method, path, json.dumps(body if body is not None else {}),
                 {"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    reply = conn.getresponse()
    reply.read()
    conn.close()
    return reply.status


other = sys.argv[1]
found = {
    "server": os.environ["GPUPLANE_SERVER"],
    "own_summary": call("GET", "/api/v1/runs/%s/summary" % os.environ["GPUPLANE_RUN_ID"]),
    "other_session": call("POST", "/api/v1/sessions", {"run_id": other}),
    "other_summary": call("GET", "/api/v1/runs/%s/summary" % other),
    "token_create": call("POST", "/api/v1/tokens", {"name": "stolen", "scopes": ["admin"]}),
    "job_submit": call("POST", "/api/v1/jobs", {"command": ["true"], "cwd": "/"}),
}
with open("found.json", "w") as f:
    json.dump(found, f)
fd = os.open("token", os.O_WRONLY | os.O_CREAT, 0o600)
os.write(fd, token.encode())
os.close(fd)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_sdk_in_an_allocation_without_the_control_socket_logs_over_tcp_with_its_jobs_token(daemon_factory,
                                                                                                 slurm):
    port = free_port()
    server = f"http://127.0.0.1:{port}"
    # The HTTP front on a port known before the daemon starts, since server_url names it.
    jobs = slurm_node(daemon_factory, slurm, env={"GPUPLANE_HTTP": f"127.0.0.1:{port}"}, server_url=server)
    assert jobs.client.get("/api/v1/daemon")["endpoints"]["http"] == server
    other = jobs.client.post("/api/v1/sessions", {"name": "the user's"})["run_id"]

    (jobs.workdir / "train.py").write_text(TRAIN)
    job = jobs.submit(["env", "-u", "GPUPLANE_ENDPOINT", "-u", "GPUPLANE_RUNTIME_DIR", sys.executable, "train.py",
                       other], gpu=0, env={"PYTHONPATH": str(SDK_DIR)})
    done = jobs.wait(job["id"], timeout=60)
    assert done["status"] == "SUCCEEDED", (done, jobs.daemon.run_ctl("logs", job["id"], "--full").stdout)

    # Its SDK's points reached its run over TCP (nothing else was in reach).
    run_id = done["run_id"]
    summary = wait_for(lambda: (s := jobs.client.get(f"/api/v1/runs/{run_id}/summary")["summary"])["metrics"] and s,
                       20, what="the run's metrics")
    assert summary["metrics"]["loss"]["count"] == 5
    found = json.loads(jobs.file("found.json").read_text())
    assert found == {"server": server, "own_summary": 200, "other_session": 403, "other_summary": 403,
                     "token_create": 403, "job_submit": 403}

    # The job's end revoked its token; only its hash was ever stored, and no log holds it.
    token = jobs.file("token").read_text()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", f"/api/v1/runs/{run_id}/summary", headers={"Authorization": f"Bearer {token}"})
    assert conn.getresponse().status == 401
    conn.close()
    [listed] = [t for t in jobs.client.get("/api/v1/tokens")["tokens"] if t["job_id"] == job["id"]]
    assert listed["scopes"] == ["sdk"] and listed["revoked_at"] is not None
    secret = token.split("_", 2)[2]
    assert secret not in jobs.daemon.log()
    for stored in jobs.daemon.home.glob("gpuplane.db*"):  # the database, its WAL
        assert secret.encode() not in stored.read_bytes(), stored
