"""``gpuplanectl node list|show`` against real daemons with fake GPUs: readings, the job holding
a GPU, its processes and a foreign one, conditions, and an unknown node."""

from __future__ import annotations

import json
import os
import re

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
    (daemon.runtime_dir / "fake-gpus" / str(free) / str(os.getpid())).write_text("700")

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
        (str(held), str(job_pid), "1.5 GiB", job["id"]), (str(free), str(os.getpid()), "700 MiB", "foreign")}
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
