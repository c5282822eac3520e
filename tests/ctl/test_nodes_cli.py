"""``gpuplanectl node list|show`` against real daemons with fake GPUs: readings, the job holding
a GPU, its processes and a foreign one, conditions, and an unknown node."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest
from helpers import DaemonProcess, wait_for
from jobhelpers import ctl, submit, wait_job


def monitored_daemon(daemon_factory, tmp_path, *, disk_low_percent: float = 5.0) -> DaemonProcess:
    """A READY daemon, node ``box`` with two fake GPUs, sampled every 0.2 s."""
    config = tmp_path / "gpuplaned.toml"
    config.write_text(f"[monitor]\nsample_interval_s = 0.2\ndisk_low_percent = {disk_low_percent}\n")
    daemon = daemon_factory("--gpus", "fake:2", "--node-name", "box", "--config", str(config)).start()
    daemon.wait_ready()
    return daemon


def _node(daemon: DaemonProcess) -> dict | None:
    nodes = daemon.client().get("/api/v1/nodes")["nodes"]
    return nodes[0] if nodes else None


def _cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_show_has_each_gpus_readings_owner_and_processes(daemon_factory, tmp_path):
    daemon = monitored_daemon(daemon_factory, tmp_path)
    # The job poses as a process on the GPU it was given (the fake backend's claim files).
    script = 'echo 1500 > "$GPUPLANE_FAKE_GPU_DIR/$CUDA_VISIBLE_DEVICES/$$"; exec sleep 60'
    job = submit(daemon, "--gpu", "1", "--name", "holder", "--dir", str(tmp_path), "--", "sh", "-c", script)
    job = wait_job(daemon, job["id"], lambda j: j["status"] == "RUNNING", what="the job to run")
    held = job["gpu_indexes"][0]
    free = 1 - held
    # And this test process uses the other GPU, outside GPUPlane.
    (daemon.runtime_dir / "fake-gpus" / str(free)).mkdir(parents=True, exist_ok=True)
    (daemon.runtime_dir / "fake-gpus" / str(free) / str(os.getpid())).write_text("2048")

    def sampled() -> dict | None:
        node = _node(daemon)
        gpus = {g["index"]: g for g in ((node or {}).get("snapshot") or {}).get("gpus") or []}
        if not gpus or not gpus[held]["processes"] or not gpus[free]["processes"]:
            return None
        return node

    node = wait_for(sampled, timeout=20, what="a sample with both GPU processes")

    result = ctl(daemon, "node", "show", "box")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"node:        box ({node['id']})"
    # The foreign process keeps its GPU from new jobs.
    assert lines[1] == "status:      ONLINE, accepting jobs (FOREIGN_GPU_PROCESS)"
    assert re.fullmatch(r"hardware:    \d+ CPUs, .* memory, .+", lines[3])
    assert lines[4] == "gpu backend: fake"
    assert re.fullmatch(r"sampled:     \S+ \S+ \(\d+s ago\)", lines[7])
    header = lines.index("GPU  MODEL          UTIL  MEMORY         TEMP  POWER      SM CLOCK  FAN  JOB")
    rows = {int(row[0]): row for row in map(_cells, lines[header + 1:header + 3])}
    gpu = rows[held]
    assert gpu[1] == "Fake GPU 80GB"
    assert re.fullmatch(r"\d+%", gpu[2]) and re.fullmatch(r"\d+\.\d/80\.0 GiB", gpu[3])
    assert re.fullmatch(r"\d+C", gpu[4]) and re.fullmatch(r"\d+/700 W", gpu[5])
    assert gpu[-1] == f"{job['id']} (holder)"
    assert rows[free][-1] == "-"
    assert f"GPU {free}: takes no new jobs for now" in lines
    start = next(i for i, line in enumerate(lines) if line.startswith("GPU  PID  "))
    assert _cells(lines[start]) == ["GPU", "PID", "GPU MEMORY", "JOB"]
    job_pid = node["snapshot"]["gpus"][held]["processes"][0]["pid"]
    assert {tuple(_cells(line)) for line in lines[start + 1:start + 3]} == {
        (str(held), str(job_pid), "1.5 GiB", job["id"]), (str(free), str(os.getpid()), "2 GiB", "foreign")}
    assert any(line.startswith("cpu:     ") and ", load " in line for line in lines)
    assert any(re.fullmatch(r"memory:  \d+\.\d/\d+\.\d GiB", line) for line in lines)
    assert any(line.startswith("DISK ") for line in lines)

    # By id too; --json is the API's body.
    body = json.loads(ctl(daemon, "node", "show", node["id"], "--json").stdout)
    assert body["node"]["id"] == node["id"]
    assert body["node"]["snapshot"]["gpus"][held]["owner_job_id"] == job["id"]

    result = ctl(daemon, "node", "list")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "NODE  STATUS  BACKEND  GPUS  FREE  CPU JOBS  CONDITIONS"
    row = _cells(result.stdout.splitlines()[1])
    # One GPU is held by the job, the other blocked by the foreign process.
    assert row == ["box", "ONLINE", "fake", "2", "0", "0/2", "FOREIGN_GPU_PROCESS"]
    listed = json.loads(ctl(daemon, "node", "list", "--json").stdout)
    assert [n["name"] for n in listed["nodes"]] == ["box"]


def test_a_low_disk_shows_as_a_condition(daemon_factory, tmp_path):
    daemon = monitored_daemon(daemon_factory, tmp_path, disk_low_percent=100)
    wait_for(lambda: "DISK_LOW" in ((_node(daemon) or {}).get("conditions") or []), timeout=20,
             what="the DISK_LOW condition")
    row = _cells(ctl(daemon, "node", "list").stdout.splitlines()[1])
    assert row[-1] == "DISK_LOW (not accepting jobs)"
    shown = ctl(daemon, "node", "show", "box").stdout.splitlines()
    assert shown[1] == "status:      UNHEALTHY, not accepting jobs (DISK_LOW)"


@pytest.mark.parametrize("json_output", [False, True])
def test_unknown_node(gpu_daemon, json_output):
    result = ctl(gpu_daemon, "node", "show", "nope", *(["--json"] if json_output else []))
    assert result.returncode == 1
    if json_output:
        assert json.loads(result.stdout)["error"]["code"] == "not_found"
    else:
        assert result.stdout == ""
        assert result.stderr.startswith("error: ") and "nope" in result.stderr


def test_show_has_a_recent_heartbeat(daemon_factory, tmp_path):
    """The heartbeat is when the node was last heard from (its metrics batches), not when it registered."""
    config = tmp_path / "gpuplaned.toml"
    config.write_text("[monitor]\nsample_interval_s = 0.2\nbatch_interval_s = 0.3\n")
    daemon = daemon_factory("--gpus", "fake:1", "--node-name", "box", "--config", str(config)).start()
    daemon.wait_ready()
    registered = wait_for(lambda: _node(daemon), what="the node to register")["last_heartbeat_at"]
    wait_for(lambda: _node(daemon)["last_heartbeat_at"] >= registered + 600, what="the heartbeat to move on")
    shown = ctl(daemon, "node", "show", "box").stdout.splitlines()
    beat = next(line for line in shown if line.startswith("heartbeat:"))
    ago = re.fullmatch(r"heartbeat:   \S+ \S+ \((\d+)s ago\)", beat)
    assert ago and int(ago.group(1)) <= 5, beat  # a batch every 0.3 s (it was the time it registered)


def test_forget_removes_an_offline_node_and_refuses_a_live_one(daemon_factory, tmp_path):
    old = daemon_factory("--gpus", "fake:1", "--node-name", "old-name").start()
    old.wait_ready()
    job = submit(old, "--gpu", "1", "--dir", str(tmp_path), "--", "true")
    job = wait_job(old, job["id"])
    assert job["status"] == "SUCCEEDED" and job["node_id"]
    old.signal(signal.SIGTERM)
    assert old.wait_exit() == 0
    # The same machine under a new name: its old self stays OFFLINE until forgotten.
    new = daemon_factory("--gpus", "fake:1", "--node-name", "new-name", name="d").start()
    new.wait_ready()
    wait_for(lambda: len(new.client().get("/api/v1/nodes")["nodes"]) == 2, what="both nodes")
    statuses = {n["name"]: n["status"] for n in new.client().get("/api/v1/nodes")["nodes"]}
    assert statuses == {"old-name": "OFFLINE", "new-name": "ONLINE"}

    refused = ctl(new, "node", "forget", "new-name")
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: node 'new-name' is online: only an offline node can be forgotten")
    refused = ctl(new, "node", "forget", "--json", "new-name")
    assert json.loads(refused.stdout)["error"]["code"] == "conflict"
    assert ctl(new, "node", "forget", "nope").returncode == 1

    forgotten = ctl(new, "node", "forget", "old-name")
    assert forgotten.returncode == 0, forgotten.stderr
    assert forgotten.stdout == f"forgot node old-name ({job['node_id']})\n"
    assert [n["name"] for n in new.client().get("/api/v1/nodes")["nodes"]] == ["new-name"]
    assert ctl(new, "node", "show", "old-name").returncode == 1
    after = new.client().get(f"/api/v1/jobs/{job['id']}")["job"]  # its history stays
    assert after["status"] == "SUCCEEDED" and after["node_id"] is None
    assert new.client().get(f"/api/v1/runs/{job['run_id']}")["run"]["node_id"] == job["node_id"]
    shown = ctl(new, "job", "show", job["id"])
    assert shown.returncode == 0 and "node:" in shown.stdout
    refused = ctl(new, "submit", "--node", "old-name", "--gpu", "1", "--", "true")
    assert refused.returncode == 2 and "no node named 'old-name'" in refused.stderr


def test_forget_refuses_a_node_with_an_active_job(tmp_path):
    """Store level, on a real SQLite file: a job dispatched or running on the node keeps it."""
    from gpuplaned.protocol.agent import Hello
    from gpuplaned.protocol.errors import ApiError
    from gpuplaned.store import job_rows
    from gpuplaned.store import node_rows
    from gpuplaned.store.database import open_writer

    conn = open_writer(tmp_path / "gpuplane.db")
    node_id, _ = job_rows.register_node(conn, Hello("gone", "0.1.0", ()), 1)
    conn.execute("INSERT INTO jobs (id, name, type, status, command, node_id, created_at) "
                 "VALUES ('job_1', 'j', 'train', 'RUNNING', '[\"true\"]', ?, 1)", (node_id,))
    with pytest.raises(ApiError) as refused:
        node_rows.forget_node(conn, node_id, "gone")
    assert refused.value.code.value == "conflict" and refused.value.details == {"node": "gone", "jobs": ["job_1"]}
    conn.execute("UPDATE jobs SET status = 'FAILED' WHERE id = 'job_1'")
    node_rows.forget_node(conn, node_id, "gone")
    assert node_rows.find_node(conn, "gone") is None and node_rows.find_node(conn, node_id) is None
    assert conn.execute("SELECT node_id FROM jobs").fetchall() == [(None,)]
