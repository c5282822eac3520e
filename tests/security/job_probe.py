"""Run as a job by tests/security/test_job_credential.py: what a job's own process gets from
the control socket its environment names (GPUPLANE_ENDPOINT). Writes {name: HTTP status}
(and the bodies it needs) to the file argv[1] names.

argv: OUT OTHER_RUN_ID
"""

import http.client
import json
import os
import socket
import sys
import time

OUT, OTHER_RUN = sys.argv[1], sys.argv[2]
SOCKET = os.environ["GPUPLANE_ENDPOINT"].removeprefix("unix://")
JOB, RUN = os.environ["GPUPLANE_JOB_ID"], os.environ["GPUPLANE_RUN_ID"]


def call(method, path, body=None):
    """One request on a connection of its own, written in one piece (a refusal may close the
    connection at once: a body sent after the reply's close would meet a broken pipe)."""
    data = json.dumps(body).encode() if body is not None else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nContent-Length: {len(data)}\r\n"
            "Connection: close\r\n\r\n")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(SOCKET)
        sock.sendall(head.encode() + data)
        response = http.client.HTTPResponse(sock)
        response.begin()
        reply = response.read()
    try:
        return response.status, json.loads(reply)
    except ValueError:
        return response.status, None


class UnixConnection(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(SOCKET)


def http_client_call(method, path, body):
    """As http.client asks: the head, then the body in a second write (the SDK's and most
    clients' way); a refusal must still reach it, not a broken pipe."""
    connection = UnixConnection("localhost", timeout=10)
    connection.request(method, path, json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    connection.close()
    return response.status


def escaped_call():
    """From a grandchild that left the job's session and group (setsid, double fork)."""
    path = OUT + ".escaped"
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            status, _ = call("POST", "/api/v1/daemon/shutdown")
            with open(path + ".tmp", "w") as f:
                f.write(str(status))
            os.rename(path + ".tmp", path)
            os._exit(0)
        os._exit(0)
    os.waitpid(child, 0)
    for _ in range(400):
        if os.path.exists(path):
            with open(path) as f:
                return int(f.read())
        time.sleep(0.05)
    return None


result = {}
result["create_admin_token"], _ = call("POST", "/api/v1/tokens", {"name": "stolen", "scopes": ["admin"]})
result["submit"], _ = call("POST", "/api/v1/jobs", {"command": ["true"], "cwd": "/"})
result["list_jobs"], _ = call("GET", "/api/v1/jobs")
result["shutdown"], _ = call("POST", "/api/v1/daemon/shutdown")
result["shutdown_http_client"] = http_client_call("POST", "/api/v1/daemon/shutdown", {"reason": "x" * 5000})
result["mcp_initialize"], _ = call("POST", "/mcp", {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}})
result["foreign_session"], _ = call("POST", "/api/v1/sessions", {"run_id": OTHER_RUN})
result["other_job_session"], _ = call("POST", "/api/v1/sessions", {"job_id": "job_not_mine", "run_id": RUN})
result["foreign_summary"], _ = call("GET", f"/api/v1/runs/{OTHER_RUN}/summary")
result["own_session"], opened = call("POST", "/api/v1/sessions", {"job_id": JOB, "run_id": RUN})
if result["own_session"] == 201:
    session = opened["session_id"]
    result["own_batch"], _ = call("POST", f"/api/v1/sessions/{session}/batches",
                                  {"seq": 0, "metrics": {}})
    result["own_finish"], _ = call("POST", f"/api/v1/sessions/{session}/finish", {"status": "SUCCEEDED"})
result["own_summary"], _ = call("GET", f"/api/v1/runs/{RUN}/summary")
result["escaped_shutdown"] = escaped_call()
with open(OUT + ".tmp", "w") as f:
    json.dump(result, f)
os.rename(OUT + ".tmp", OUT)
