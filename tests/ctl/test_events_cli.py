"""``gpuplanectl events [-f]`` against real daemons whose events are real: a disk made to look
low by the config (DISK_LOW), a job using a fake GPU it was not given (GPU_PINNING_VIOLATION)."""

from __future__ import annotations

import json
import re
import signal
import subprocess

from helpers import DaemonProcess, ctl_follower, wait_for
from jobhelpers import ctl, submit, wait_job
from test_nodes_cli import monitored_daemon


def _events(daemon: DaemonProcess, query: str = "") -> list[dict]:
    return daemon.client().get(f"/api/v1/events{query}")["events"]


def _cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip(), maxsplit=5)


def test_list_and_filters(daemon_factory, tmp_path):
    daemon = monitored_daemon(daemon_factory, tmp_path, disk_low_percent=100)
    wait_for(lambda: _events(daemon, "?type=DISK_LOW"), timeout=20, what="a DISK_LOW event")
    node_id = daemon.client().get("/api/v1/nodes")["nodes"][0]["id"]
    events = _events(daemon)

    result = ctl(daemon, "events")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert _cells(lines[0]) == ["TIME", "SEVERITY", "TYPE", "NODE", "JOB", "MESSAGE"]
    rows = [_cells(line) for line in lines[1:]]
    assert len(rows) == len(events)
    # Oldest first: the newest event is the last line.
    assert rows[-1][2] == events[0]["type"] and rows[-1][5] == " ".join(events[0]["message"].split())
    low = next(row for row in rows if row[2] == "DISK_LOW")
    assert low[1:5] == ["critical", "DISK_LOW", "box", "-"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", low[0])

    # --json is the API's body, newest first; the filters are the API's.
    body = json.loads(ctl(daemon, "events", "--json", "--type", "disk_low", "--node", "box").stdout)
    assert body["events"] and {e["type"] for e in body["events"]} == {"DISK_LOW"}
    assert body["events"] == _events(daemon, f"?type=DISK_LOW&node_id={node_id}")
    assert json.loads(ctl(daemon, "events", "--json", "--node", node_id).stdout)["events"] == _events(
        daemon, f"?node_id={node_id}")
    assert len(json.loads(ctl(daemon, "events", "--json", "--limit", "1").stdout)["events"]) == 1
    critical = json.loads(ctl(daemon, "events", "--json", "--severity", "CRITICAL").stdout)["events"]
    assert critical and {e["severity"] for e in critical} == {"critical"}
    both = json.loads(ctl(daemon, "events", "--json", "--severity", "info", "--severity", "critical").stdout)
    assert {e["severity"] for e in both["events"]} <= {"info", "critical"} and both["events"]

    result = ctl(daemon, "events", "--job", "job_nope")
    assert (result.returncode, result.stdout) == (0, "no events\n")

    result = ctl(daemon, "events", "--node", "nope")
    assert result.returncode == 1
    assert result.stderr == "error: no node 'nope' (nodes: box)\n"

    result = ctl(daemon, "events", "--severity", "loud")
    assert result.returncode == 2
    assert "'loud' is not one of 'info', 'warning', 'critical'" in result.stderr


def _follower(daemon: DaemonProcess, *args: str) -> subprocess.Popen[str]:
    return ctl_follower(["events", "-f", *args], daemon.env)


def test_follow_prints_a_new_event_and_stops_on_ctrl_c(daemon_factory, tmp_path):
    daemon = monitored_daemon(daemon_factory, tmp_path)
    wait_for(lambda: daemon.client().get("/api/v1/nodes")["nodes"], what="the node to register")
    text = _follower(daemon, "--type", "GPU_PINNING_VIOLATION")
    as_json = _follower(daemon, "--json", "--severity", "warning")
    try:
        assert _cells(text.stdout.readline()) == ["TIME", "SEVERITY", "TYPE", "NODE", "JOB", "MESSAGE"]
        # A job that uses the fake GPU it was not given, besides its own.
        script = ('for g in 0 1; do echo 100 > "$GPUPLANE_FAKE_GPU_DIR/$g/$$"; done; exec sleep 60')
        job = submit(daemon, "--gpu", "1", "--name", "stray", "--dir", str(tmp_path), "--", "sh", "-c", script)
        wait_job(daemon, job["id"], lambda j: j["status"] == "RUNNING", what="the job to run")

        line = text.stdout.readline()
        cells = _cells(line)
        assert cells[1:5] == ["warning", "GPU_PINNING_VIOLATION", "box", job["id"]], line
        event = json.loads(as_json.stdout.readline())
        assert (event["type"], event["severity"], event["job_id"]) == ("GPU_PINNING_VIOLATION", "warning", job["id"])
        assert cells[5] == " ".join(event["message"].split())

        for follower in (text, as_json):
            follower.send_signal(signal.SIGINT)
            out, err = follower.communicate(timeout=10)
            assert (follower.returncode, err) == (130, ""), err
    finally:
        for follower in (text, as_json):
            follower.kill()
            follower.wait()

    # Following starts from the newest --limit events that match.
    again = _follower(daemon, "--limit", "1", "--job", job["id"])
    try:
        assert again.stdout.readline().startswith("TIME ")
        assert _cells(again.stdout.readline())[1:5] == ["warning", "GPU_PINNING_VIOLATION", "box", job["id"]]
        again.send_signal(signal.SIGINT)
        out, err = again.communicate(timeout=10)
        assert (again.returncode, out, err) == (130, "", "")
    finally:
        again.kill()
        again.wait()


def test_an_unknown_type_is_a_usage_error_naming_the_types(daemon):
    for args in (["events"], ["events", "-f"], ["events", "--json"]):
        result = ctl(daemon, *args, "--type", "GPU_LOST,nope")
        assert result.returncode == 2, (args, result)
        if "--json" in args:
            error = json.loads(result.stdout)["error"]
            assert error["details"]["field"] == "type" and "DISK_LOW" in error["details"]["allowed"]
        else:
            assert result.stderr.startswith("error: type: no event type NOPE (the types: "), result.stderr
            for known in ("DISK_LOW", "GPU_LOST", "JOB_FAILED", "LOSS_NAN", "USER_EVENT"):
                assert known in result.stderr
    assert ctl(daemon, "events", "--type", "gpu_lost,disk_low").returncode == 0
