"""The SDK against a real gpuplaned: every step arrives once, and a dispatched job joins its run."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from helpers import Jobs
from sdk_fake import SDK_DIR, sdk_env

pytestmark = pytest.mark.e2e

SCRIPT = """
import time, gpuplane
run = gpuplane.init(project="sdk-e2e", name="steps", config={"lr": 0.001})
started = time.perf_counter()
for step in range(10_000):
    run.log({"loss": 1.0 / (step + 1), "acc": step / 10_000, "lr": 0.001, "nan": float("nan")})
print("loop_s", time.perf_counter() - started, flush=True)
run.finish()
print("run", run.id, flush=True)
print("stats", run.stats(), flush=True)
"""

NAMES = ("loss", "acc", "lr", "nan")


def test_ten_thousand_steps_of_four_metrics_arrive_once_each(daemon_factory, tmp_path):
    daemon = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none").daemon
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=sdk_env(daemon.runtime_dir),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 30
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    run_id = lines["run"]
    api = daemon.client()
    m = api.get(f"/api/v1/runs/{run_id}/metrics?names={','.join(NAMES)}&x=step&points=10000")
    assert m["x"] == list(range(10_000))
    for name in NAMES:
        assert m["series"][name]["count"] == [1] * 10_000, name
    assert m["series"]["nan"]["nan"] == [1] * 10_000
    assert m["series"]["loss"]["last"][:2] == [1.0, 0.5]
    run = api.get(f"/api/v1/runs/{run_id}")["run"]
    assert run["status"] == "SUCCEEDED" and run["name"] == "steps"
    env = run["env_snapshot"]  # gathered on the sender thread, sent once per session
    assert env["python"] == sys.version.split()[0] and env["argv"] == ["-c"] and env["pid"] > 0
    assert "packages" in env and isinstance(env["env"], dict)


JOB_SCRIPT = """
import os, gpuplane
for step in range(100):
    gpuplane.log({"job/x": float(step)})
print("joined", gpuplane.current_run().id == os.environ["GPUPLANE_RUN_ID"], flush=True)
"""


def test_a_dispatched_job_reports_into_its_own_run(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    job = jobs.submit([sys.executable, "-c", JOB_SCRIPT], gpu=0, env={"PYTHONPATH": str(SDK_DIR)})
    job = jobs.wait(job["id"], timeout=30)
    assert job["status"] == "SUCCEEDED", job
    run_id = job["run_id"]
    m = jobs.client.get(f"/api/v1/runs/{run_id}/metrics?names=job/x&x=step&points=1000")
    assert m["x"] == list(range(100)) and m["series"]["job/x"]["count"] == [1] * 100


CRASH_SCRIPT = """
import sys, time, gpuplane
run = gpuplane.init(name="crash")
print("run", run.id, flush=True)
for step in range(100_000):
    run.log({"loss": 1.0 / (step + 1)})
    if step % 1000 == 999:
        time.sleep(0.03)  # about 3 s of logging, so the daemon dies and comes back mid-run
run.finish(timeout=60)
print("stats", run.stats(), flush=True)
"""


def test_kill_9_of_the_daemon_mid_run_loses_and_repeats_nothing(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    script = subprocess.Popen([sys.executable, "-c", CRASH_SCRIPT], env=sdk_env(jobs.daemon.runtime_dir),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_id = script.stdout.readline().split()[1]
        time.sleep(0.8)
        assert script.poll() is None  # still logging
        jobs.daemon.kill()  # SIGKILL: whatever was in flight is unacknowledged
        time.sleep(0.5)
        jobs.restart(daemon_factory, "--gpus=none")
        out, err = script.communicate(timeout=90)
    finally:
        script.kill()
    assert script.returncode == 0, err
    m = jobs.client.get(f"/api/v1/runs/{run_id}/metrics?names=loss&x=step&points=10000")
    counts = m["series"]["loss"]["count"]
    assert m["width"] == 10 and len(counts) == 10_000 and set(counts) == {10}, (m["width"], set(counts))
    assert m["x"] == list(range(0, 100_000, 10))
    assert jobs.client.get(f"/api/v1/runs/{run_id}")["run"]["status"] == "SUCCEEDED"


IDLE_SCRIPT = """
import json, time, gpuplane
run = gpuplane.init(project="sdk-e2e", name="idle")
run.log({"loss": 1.0})
time.sleep(2.5)  # past the daemon's keep-alive timeout: it closes the SDK's idle connection
run.log({"loss": 0.5})
run.finish()
print(json.dumps(run.stats()), flush=True)
"""


def test_a_connection_the_daemon_closed_while_idle_is_replaced_without_an_error(daemon_factory, tmp_path):
    (tmp_path / "gpuplaned.toml").write_text("[http]\nkeep_alive_timeout_s = 1\n")
    daemon = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none", "--config",
                        str(tmp_path / "gpuplaned.toml")).daemon
    done = subprocess.run([sys.executable, "-c", IDLE_SCRIPT], env=sdk_env(daemon.runtime_dir),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout.splitlines()[-1])
    assert stats["errors"] == 0 and stats["spooled"] == 0, (stats, done.stderr)
    assert "cannot reach the daemon" not in done.stderr


DEEP_SCRIPT = """
import gpuplane
deep = {}
node = deep
for _ in range(3000):  # past what json's recursion allows, and far past the daemon's 64 levels
    node["d"] = {}
    node = node["d"]
run = gpuplane.init(project="sdk-deep", name="deep", config={"lr": 0.1, "model": deep})
run.log_event("deep", data=deep)  # refused quietly, never raised into the script
run.log({"loss": 1.0})
run.finish()
print("run", run.id, flush=True)
"""


def test_a_config_nested_too_deep_is_clipped_and_deep_event_data_never_raises(daemon_factory, tmp_path):
    daemon = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none").daemon
    done = subprocess.run([sys.executable, "-c", DEEP_SCRIPT], env=sdk_env(daemon.runtime_dir),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    run = daemon.client().get(f"/api/v1/runs/{run_id}")["run"]
    assert run["status"] == "SUCCEEDED" and run["config"]["lr"] == 0.1
    node, depth = run["config"]["model"], 1
    while isinstance(node, dict):
        node, depth = node["d"], depth + 1
    assert depth == 32 and node.startswith("{'d': {'d':") and len(node) < 200  # 32 levels, then short text
