"""Node telemetry end to end: a real daemon with fake GPUs samples, stores, rolls up and
reports; GPU processes are attributed to jobs by process group; node rules raise events
and keep the scheduler off what must not get new work."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time

import pytest
from helpers import Jobs, wait_for

from gpuplaned import tsdb
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.store.database import open_writer

pytestmark = pytest.mark.e2e

FAST = """
[monitor]
sample_interval_s = 0.2
batch_interval_s = 0.4
[retention]
pass_interval_s = 0.5
"""


def start(daemon_factory, tmp_path, config_text: str = FAST) -> Jobs:
    config = tmp_path / "gpuplaned.toml"
    config.write_text(config_text)
    return Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:2", f"--config={config}")


def node(jobs: Jobs) -> dict:
    return jobs.client.get("/api/v1/nodes")["nodes"][0]


def snapshot(jobs: Jobs) -> dict:
    return wait_for(lambda: node(jobs)["snapshot"], what="a first monitor sample")


def claim_gpu(jobs: Jobs, index: int, script: str = "sleep 30", **fields) -> dict:
    """A job that poses as a process on fake GPU ``index`` (see gpuplaned.telemetry.fake)."""
    return jobs.sh(f'mkdir -p "$GPUPLANE_FAKE_GPU_DIR/{index}" && echo 1000 > "$GPUPLANE_FAKE_GPU_DIR/{index}/$$"\n'
                   f"exec {script}", **fields)


def job_pid(jobs: Jobs, job: dict) -> int:
    """The job's main process (``claim_gpu`` execs, so it is the claiming process too)."""
    runtime = jobs.daemon.home / "jobs" / job["id"] / f"attempt-{job['attempt']}" / "runtime.json"
    return json.loads(runtime.read_text())["pid"]


@pytest.fixture
def monitored(daemon_factory, tmp_path):
    return start(daemon_factory, tmp_path)


def test_readings_reach_the_api_and_the_store(monitored):
    jobs = monitored
    snap = snapshot(jobs)
    assert snap["backend"] == "fake" and [g["index"] for g in snap["gpus"]] == [0, 1]
    gpu = snap["gpus"][0]
    assert gpu["memory_total_mb"] == 81920 and gpu["owner_job_id"] is None and gpu["processes"] == []
    assert {d["label"] for d in snap["host"]["disks"]} == {"data", "jobs"}
    assert all(d["free_bytes"] > 0 for d in snap["host"]["disks"])

    node_id = node(jobs)["id"]

    wanted = ("gpu0.utilization", "gpu0.memory_used_mb", "gpu0.temperature_c", "host.cpu_percent")
    seen: list[dict] = []

    def stored():
        # Every series wanted, each with three points. CI once saw host.cpu_percent without
        # gpu0.*: the read's statements saw different commits (one transaction since, in
        # store.readers); should anything else do it, the failure must leave its evidence.
        m = jobs.client.get(f"/api/v1/nodes/{node_id}/metrics?names=gpu0.*,host.cpu_percent&window=10m&points=500")
        seen[:] = [m]
        counts = {name: sum(c or 0 for c in m["series"][name]["count"]) if name in m["series"] else 0
                  for name in wanted}
        return m if min(counts.values()) >= 3 else None

    try:
        m = wait_for(stored, what="three points of each node series in the store")
    except AssertionError as exc:
        events = jobs.client.get("/api/v1/events")["events"]
        raise AssertionError(f"{exc}; last answer: {seen}; events: {events}; daemon log: "
                             f"{jobs.daemon.log()[-4000:]}") from None
    assert m["resolution"] == "raw" and m["node_id"] == node_id
    assert jobs.client.get("/api/v1/events?type=GPU_LOST")["events"] == []
    assert not any(name.startswith("gpu1.") for name in m["series"])
    util = m["series"]["gpu0.utilization"]
    assert len(util["max"]) == len(m["x"]) and all(v == 0.0 for v in util["max"] if v is not None)
    by_name = jobs.client.get(f"/api/v1/nodes/{node(jobs)['name']}/metrics?names=gpu1.fan_pct&window=1h")
    assert list(by_name["series"]) == ["gpu1.fan_pct"]


def test_a_job_owning_a_gpu_drives_its_readings_and_owns_its_process(monitored):
    jobs = monitored
    job = claim_gpu(jobs, 0, gpu=1)
    job = jobs.wait(job["id"], "RUNNING")
    assert job["gpu_indexes"] == [0]

    def busy():
        snap = node(jobs)["snapshot"]
        gpu = snap["gpus"][0]
        return snap if gpu["utilization_pct"] > 50 and gpu["processes"] else None

    snap = wait_for(busy, what="GPU 0 busy with the job's process")
    gpu0, gpu1 = snap["gpus"]
    assert gpu0["owner_job_id"] == job["id"] and gpu1["owner_job_id"] is None
    assert gpu0["processes"] == [{"pid": job_pid(jobs, job), "gpu_memory_mb": 1000, "job_id": job["id"], "foreign": False}]
    assert snap["jobs"] == [{"job_id": job["id"], "gpu_indexes": [0], "gpu_memory_mb": 1000}]
    assert gpu1["utilization_pct"] < 5
    assert jobs.client.get("/api/v1/events?type=GPU_PINNING_VIOLATION")["events"] == []
    jobs.client.post(f"/api/v1/jobs/{job['id']}/cancel")
    jobs.wait(job["id"])


def test_a_job_on_a_gpu_it_was_not_given_raises_a_pinning_event(monitored):
    jobs = monitored
    job = claim_gpu(jobs, 1, gpu=1)
    job = jobs.wait(job["id"], "RUNNING")
    assert job["gpu_indexes"] == [0]  # the lowest free index: GPU 1 is not the job's

    events = wait_for(lambda: jobs.client.get("/api/v1/events?type=GPU_PINNING_VIOLATION")["events"],
                      what="a pinning event")
    assert len(events) == 1
    event = events[0]
    assert event["severity"] == "warning" and event["job_id"] == job["id"] and event["node_id"] == node(jobs)["id"]
    assert event["context"] == {"gpu_index": 1, "pid": job_pid(jobs, job)}
    time.sleep(0.6)  # more samples see it again: still one event
    assert len(jobs.client.get("/api/v1/events?type=GPU_PINNING_VIOLATION")["events"]) == 1
    jobs.client.post(f"/api/v1/jobs/{job['id']}/cancel")
    jobs.wait(job["id"])


def test_a_foreign_gpu_process_keeps_its_slot_from_the_scheduler(monitored, tmp_path):
    jobs = monitored
    claims = jobs.daemon.runtime_dir / "fake-gpus" / "1"
    claims.mkdir(parents=True, exist_ok=True)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        (claims / str(stranger.pid)).write_text("2048")
        wait_for(lambda: node(jobs)["snapshot"] and "FOREIGN_GPU_PROCESS" in node(jobs)["conditions"],
                 what="the foreign process to be seen")
        gpu1 = node(jobs)["snapshot"]["gpus"][1]
        assert gpu1["processes"] == [{"pid": stranger.pid, "gpu_memory_mb": 2048, "job_id": None, "foreign": True}]
        assert node(jobs)["snapshot"]["blocked_gpus"] == [1]

        first = jobs.sh("sleep 30", gpu=1)
        assert jobs.wait(first["id"], "RUNNING")["gpu_indexes"] == [0]
        second = jobs.sh("echo ran", gpu=1)
        time.sleep(2.5)  # samples and a scheduler tick (2 s), whose pass weighs health as a submit's does
        assert jobs.get(second["id"])["status"] == "QUEUED"
    finally:
        stranger.kill()
        stranger.wait()
    done = jobs.wait(second["id"], timeout=15)
    assert done["status"] == "SUCCEEDED" and done["gpu_indexes"] == [1]
    assert "FOREIGN_GPU_PROCESS" not in node(jobs)["conditions"]
    jobs.client.post(f"/api/v1/jobs/{first['id']}/cancel")
    jobs.wait(first["id"])


def test_a_small_foreign_process_leaves_its_gpu_to_the_scheduler(monitored):
    """[monitor] foreign_min_memory_mb (1024 by default): a display server's few hundred MiB
    block nothing, a stranger's training does."""
    jobs = monitored
    claims = jobs.daemon.runtime_dir / "fake-gpus"
    display, stranger = subprocess.Popen(["sleep", "60"]), subprocess.Popen(["sleep", "60"])
    try:
        (claims / "0" / str(display.pid)).write_text("300")
        (claims / "1" / str(stranger.pid)).write_text("1024")

        def both_seen() -> dict | None:
            current = node(jobs)
            gpus = (current["snapshot"] or {}).get("gpus") or []
            return current if len(gpus) == 2 and all(g["processes"] for g in gpus) else None

        seen = wait_for(both_seen, what="both foreign processes to be seen")
        assert [g["processes"][0]["foreign"] for g in seen["snapshot"]["gpus"]] == [True, True]
        assert seen["snapshot"]["blocked_gpus"] == [1] and seen["conditions"] == ["FOREIGN_GPU_PROCESS"]
        first = jobs.sh("sleep 30", gpu=1)
        assert jobs.wait(first["id"], "RUNNING")["gpu_indexes"] == [0]  # beside the display server
        second = jobs.sh("echo ran", gpu=1)
        time.sleep(2.5)  # samples and a scheduler tick (2 s), whose pass weighs health as a submit's does
        assert jobs.get(second["id"])["status"] == "QUEUED"
        jobs.client.post(f"/api/v1/jobs/{first['id']}/cancel")
        jobs.wait(first["id"])
    finally:
        for proc in (display, stranger):
            proc.kill()
            proc.wait()


def test_a_low_disk_stops_new_work_and_is_an_event(daemon_factory, tmp_path):
    # Every real disk has less than 100 % free: the threshold makes this one "low".
    jobs = start(daemon_factory, tmp_path, FAST.replace("[monitor]\n", "[monitor]\ndisk_low_percent = 100\n"))
    event = wait_for(lambda: jobs.client.get("/api/v1/events?type=DISK_LOW&severity=critical")["events"],
                     what="a DISK_LOW event")[0]
    assert "no new jobs start on this node" in event["message"]
    assert event["context"]["disk"] in ("data", "jobs") and event["node_id"] == node(jobs)["id"]
    info = node(jobs)
    assert info["accepting"] is False and "DISK_LOW" in info["conditions"] and info["status"] == "UNHEALTHY"
    job = jobs.sh("echo never", gpu=0)
    time.sleep(0.8)
    assert jobs.get(job["id"])["status"] == "QUEUED"


def test_events_filters_and_bad_queries(monitored):
    jobs = monitored
    job = claim_gpu(jobs, 1, gpu=1)
    jobs.wait(job["id"], "RUNNING")
    wait_for(lambda: jobs.client.get("/api/v1/events")["events"], what="an event")
    assert jobs.client.get("/api/v1/events?severity=critical")["events"] == []
    assert jobs.client.get("/api/v1/events?severity=warning,critical&type=gpu_pinning_violation")["events"]
    assert jobs.client.get(f"/api/v1/events?job_id={job['id']}")["events"]
    assert jobs.client.get("/api/v1/events?job_id=job_nope")["events"] == []
    for query, field in (("severity=loud", "severity"), ("type=no%20spaces", "type"), ("limit=0", "limit")):
        with pytest.raises(ApiError) as err:
            jobs.client.get(f"/api/v1/events?{query}")
        assert err.value.code == ErrorCode.BAD_REQUEST and field in err.value.message
    node_id = node(jobs)["id"]
    for query, field in (("window=5y", "window"), ("points=0", "points"), ("start=10&window=1h", "window"),
                         ("start=20&end=10", "start"), ("names=a%20b", "names"), ("end=soon", "end")):
        with pytest.raises(ApiError) as err:
            jobs.client.get(f"/api/v1/nodes/{node_id}/metrics?{query}")
        assert err.value.code == ErrorCode.BAD_REQUEST and field in err.value.message, query
    with pytest.raises(ApiError) as err:
        jobs.client.get("/api/v1/nodes/nd_nope/metrics")
    assert err.value.code == ErrorCode.NOT_FOUND
    jobs.client.post(f"/api/v1/jobs/{job['id']}/cancel")
    jobs.wait(job["id"])


def test_event_stream_live_and_resumed(monitored):
    jobs = monitored
    snapshot(jobs)
    with contextlib.closing(jobs.client.events("/api/v1/events/stream?type=GPU_PINNING_VIOLATION",
                                               read_timeout=20)) as stream:
        job = claim_gpu(jobs, 1, gpu=1)
        first = next(stream)
    assert first.event == "event"
    data = json.loads(first.data)
    assert data["type"] == "GPU_PINNING_VIOLATION" and data["job_id"] == job["id"] and first.id == data["id"]
    jobs.client.post(f"/api/v1/jobs/{job['id']}/cancel")
    jobs.wait(job["id"])
    second = claim_gpu(jobs, 1, gpu=1)  # GPU 0 is free again, so this one violates too
    wait_for(lambda: len(jobs.client.get("/api/v1/events?type=GPU_PINNING_VIOLATION")["events"]) == 2,
             what="a second pinning event")
    # Filtered: the detector's RUN_STARTED/RUN_FINISHED of these jobs may fall in between.
    with contextlib.closing(jobs.client.events("/api/v1/events/stream?type=GPU_PINNING_VIOLATION",
                                               last_event_id=first.id, read_timeout=20)) as resumed:
        replayed = json.loads(next(resumed).data)
    assert replayed["job_id"] == second["id"] and replayed["type"] == "GPU_PINNING_VIOLATION"
    jobs.client.post(f"/api/v1/jobs/{second['id']}/cancel")
    jobs.wait(second["id"])


def test_rollup_passes_run_and_report(monitored):
    jobs = monitored
    stats = wait_for(lambda: _actor(jobs, "rollup")["stats"]["passes"] >= 2 and _actor(jobs, "rollup")["stats"],
                     what="two rollup passes")
    assert set(stats["last_deleted"]) >= {"raw", "1m", "5m"}
    monitor = _actor(jobs, "monitor")["stats"]
    assert monitor["backend"] == "fake" and monitor["gpus"] == 2 and monitor["samples"] > 0


def _actor(jobs: Jobs, name: str) -> dict:
    return jobs.client.get(f"/api/v1/actors/{name}")["actor"]


def test_a_seven_day_query_reads_rollups_and_keeps_the_peak(daemon_factory, tmp_path):
    jobs = start(daemon_factory, tmp_path)
    info = node(jobs)
    jobs.daemon.signal(signal.SIGTERM)
    assert jobs.daemon.wait_exit() == 0

    # A week of one GPU's utilization every 10 s, written as the monitor would have, with a
    # single spike; then the rollups a week of passes would have built.
    now = int(time.time() * 1000)
    start_ms = now - 7 * 86_400_000
    ts = list(range(start_ms, now, 10_000))
    values = [float(i % 50) for i in range(len(ts))]
    spike = len(ts) // 3
    values[spike] = 999.0
    conn = open_writer(jobs.daemon.home / "gpuplane.db")
    try:
        conn.execute("BEGIN IMMEDIATE")
        tsdb.ingest(conn, "node", info["id"], {"gpu7.utilization": {"ts": ts, "value": values}},
                    source="test", seq=1)
        tsdb.rollup_pass(conn, now)
        conn.execute("COMMIT")
    finally:
        conn.close()

    jobs.restart(daemon_factory, "--gpus=fake:2", f"--config={tmp_path / 'gpuplaned.toml'}")
    assert node(jobs)["id"] == info["id"]
    m = jobs.client.get(f"/api/v1/nodes/{info['id']}/metrics?names=gpu7.utilization&window=7d&points=1000")
    assert m["resolution"] in ("1m", "5m")
    assert 0 < len(m["x"]) <= 1000 and m["x"] == sorted(m["x"])
    series = m["series"]["gpu7.utilization"]
    assert max(v for v in series["max"] if v is not None) == 999.0
    assert min(v for v in series["min"] if v is not None) == 0.0
    peak_bucket = m["x"][series["max"].index(999.0)]  # x is each bucket's start, width its length in ms
    assert 0 <= ts[spike] - peak_bucket < m["width"]


def test_a_lost_gpu_is_an_event_a_node_status_and_a_withheld_slot(monitored):
    jobs = monitored
    snapshot(jobs)
    mark = jobs.daemon.runtime_dir / "fake-gpus" / "0" / "lost"
    mark.touch()
    event = wait_for(lambda: jobs.client.get("/api/v1/events?type=GPU_LOST")["events"], what="GPU_LOST")[0]
    assert event["severity"] == "critical" and event["context"]["gpu_index"] == 0
    info = node(jobs)
    assert info["status"] == "UNHEALTHY" and "GPU_LOST" in info["conditions"]
    assert info["snapshot"]["gpus"][0]["error"].startswith("gpu_lost") and info["snapshot"]["blocked_gpus"] == [0]
    job = jobs.sh("sleep 30", gpu=1)
    assert jobs.wait(job["id"], "RUNNING")["gpu_indexes"] == [1]  # not the lost one
    monitor = _actor(jobs, "monitor")
    assert monitor["restarts"] == 0 and monitor["last_error"] is None
    mark.unlink()
    wait_for(lambda: jobs.client.get("/api/v1/events?type=GPU_RECOVERED")["events"], what="GPU_RECOVERED")
    wait_for(lambda: node(jobs)["status"] == "ONLINE", what="the node to be healthy again")
    jobs.client.post(f"/api/v1/jobs/{job['id']}/cancel")
    jobs.wait(job["id"])
