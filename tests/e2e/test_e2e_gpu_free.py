"""GPU-free rules said out loud (issue 31 item 6), on a real daemon with one fake GPU and its HTTP
front: a foreign process over ``[monitor] foreign_min_memory_mb`` on the only GPU keeps a job
waiting with a reason that names it, in the API, ``job show``, the ``jobs`` WAIT column and MCP,
and the job runs once it goes; a smaller one blocks nothing; under ``[scheduler] max_free_util``
a GPU busy outside GPUPlane holds the job until its median utilisation falls; and a job's own
process and load are never counted against the next job."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager, contextmanager

import pytest
from helpers import DaemonProcess, Jobs, kill_processes_with_env, wait_for
from mcp import Client
from mcp_http import connected, ok

from gpuplaned.telemetry.fake import claim, plant_util

pytestmark = [pytest.mark.e2e]

FAST = """
[monitor]
sample_interval_s = 0.2
batch_interval_s = 0.4
"""


@contextmanager
def front(tmp_path, config_text: str = FAST) -> Iterator[tuple[Jobs, str]]:
    config = tmp_path / "gpuplaned.toml"
    config.write_text(config_text)
    daemon = DaemonProcess(tmp_path / "d", "--gpus=fake:1", "--node-name", "box", "--http", "127.0.0.1:0",
                           f"--config={config}").start()
    try:
        daemon.wait_ready()
        jobs = Jobs(daemon, tmp_path / "work")
        jobs.wait_node()
        yield jobs, wait_for(lambda: jobs.client.get("/api/v1/daemon")["endpoints"].get("http"), what="the front")
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


@pytest.fixture
def box(tmp_path):
    with front(tmp_path) as started:
        yield started


@pytest.fixture
def judged(tmp_path):
    """The utilisation rule on: a GPU is free while the median of its last 3 readings is under 50%."""
    with front(tmp_path, FAST + "[scheduler]\nmax_free_util = 50\nfree_util_samples = 3\n") as started:
        yield started


def claims(jobs: Jobs):
    return jobs.daemon.runtime_dir / "fake-gpus"


def stranger(jobs: Jobs, memory_mb: int) -> subprocess.Popen:
    """A process outside GPUPlane on fake GPU 0, holding ``memory_mb`` of its memory."""
    proc = subprocess.Popen(["sleep", "120"])
    claim(claims(jobs), 0, proc.pid, memory_mb)
    return proc


def seen(jobs: Jobs, pid: int) -> dict:
    def sampled():
        gpu = jobs.client.get("/api/v1/nodes")["nodes"][0]["snapshot"]["gpus"][0]
        return gpu if any(p["pid"] == pid for p in gpu["processes"]) else None

    return wait_for(sampled, what=f"pid {pid} on GPU 0")


def next_samples(jobs: Jobs, count: int) -> None:
    """Wait for ``count`` more monitor samples of the node to reach the server."""
    for _ in range(count):
        before = jobs.client.get("/api/v1/nodes")["nodes"][0]["snapshot"]["ts"]
        wait_for(lambda b=before: jobs.client.get("/api/v1/nodes")["nodes"][0]["snapshot"]["ts"] > b,
                 what="a new sample")


def reason(jobs: Jobs, job_id: str, wanted: str) -> dict:
    def says():
        job = jobs.get(job_id)
        return job if job["queue_reason"] == wanted else None

    try:
        return wait_for(says, timeout=15, what=f"{job_id} to wait with {wanted!r}")
    except AssertionError:
        raise AssertionError(f"{jobs.get(job_id)} never said {wanted!r}") from None


def mcp(jobs: Jobs, url: str) -> AbstractAsyncContextManager[Client]:
    token = jobs.client.post("/api/v1/tokens", {"name": "r", "scopes": ["read"]})["secret"]
    return connected(url, token)


async def test_a_foreign_process_on_the_only_gpu_is_named_everywhere_until_it_goes(box):
    jobs, url = box
    proc = stranger(jobs, 4096)
    try:
        seen(jobs, proc.pid)
        job = jobs.sh("echo ran", gpu=1, name="waiter")
        said = f"GPU 0: foreign process 4 GiB (pid {proc.pid})"
        assert reason(jobs, job["id"], said)["status"] == "QUEUED"

        show = jobs.daemon.run_ctl("job", "show", job["id"])
        assert show.returncode == 0, show.stderr
        assert re.search(rf"^waits:\s+{re.escape(said)}$", show.stdout, re.M), show.stdout
        listed = jobs.daemon.run_ctl("jobs")
        assert listed.returncode == 0, listed.stderr
        header, *rows = listed.stdout.splitlines()
        assert header.split()[-1] == "WAIT"
        row = next(r for r in rows if r.startswith(job["id"]))
        assert row.endswith(said)

        async with mcp(jobs, url) as client:
            got = ok(await client.call_tool("get_job", {"job_id": job["id"]}))
            assert got["job"]["queue_reason"] == said and f"it waits: {said}" in got["summary"]
            listed_mcp = ok(await client.call_tool("list_jobs", {}))["jobs"]
            assert [j["queue_reason"] for j in listed_mcp if j["id"] == job["id"]] == [said]

        # The dry run of another job says the same.
        plan = jobs.client.post("/api/v1/jobs?dry_run=true",
                                {"command": ["true"], "cwd": str(jobs.workdir), "gpu": 1})
        assert said in plan["plan"]["reasons"], plan
    finally:
        proc.kill()
        proc.wait()
    done = jobs.wait(job["id"], timeout=20)
    assert done["status"] == "SUCCEEDED" and done["gpu_indexes"] == [0] and done["queue_reason"] is None


def test_a_foreign_process_under_the_threshold_blocks_nothing(box):
    jobs, _ = box
    display = stranger(jobs, 300)  # [monitor] foreign_min_memory_mb is 1024 by default
    try:
        seen(jobs, display.pid)
        job = jobs.sh("echo ran", gpu=1)
        done = jobs.wait(job["id"], timeout=20)
        assert done["status"] == "SUCCEEDED" and done["gpu_indexes"] == [0]
    finally:
        display.kill()
        display.wait()


def test_a_job_s_own_process_and_load_count_against_no_later_job(tmp_path):
    # A GPU is free while the median of its last 5 readings is under 30%; the fake GPU runs at
    # ~90% under a job. Only readings taken since the job ended count (which readings, and when
    # they are judged, tests/store/test_gpu_free_pass.py checks sample by sample).
    with front(tmp_path, FAST + "[scheduler]\nmax_free_util = 30\nfree_util_samples = 5\n") as (jobs, _):
        # The job poses as a process on its GPU (2 GiB, over the foreign threshold) and loads it.
        script = 'echo 2048 > "$GPUPLANE_FAKE_GPU_DIR/$CUDA_VISIBLE_DEVICES/$$"; while [ ! -e stop ]; do sleep 0.05; done'
        first = jobs.wait(jobs.sh(script, gpu=1)["id"], "RUNNING")

        def hot():
            node = jobs.client.get("/api/v1/nodes")["nodes"][0]
            gpu = node["snapshot"]["gpus"][0]
            return node if gpu["processes"] and gpu["utilization_pct"] > 60 else None

        node = wait_for(hot, what="the job's process on a hot GPU")
        next_samples(jobs, 5)
        assert node["snapshot"]["gpus"][0]["processes"][0]["foreign"] is False
        assert node["snapshot"]["blocked_gpus"] == [] and "FOREIGN_GPU_PROCESS" not in node["conditions"]
        plan = jobs.client.post("/api/v1/jobs?dry_run=true", {"command": ["true"], "cwd": str(jobs.workdir), "gpu": 1})
        assert plan["plan"]["reasons"] == ["no matching node has enough free GPUs now"], plan  # ours: no GPU named

        jobs.file("stop").touch()
        assert jobs.wait(first["id"])["status"] == "SUCCEEDED"
        wait_for(lambda: jobs.client.get("/api/v1/nodes")["nodes"][0]["snapshot"]["gpus"][0]["owner_job_id"] is None,
                 what="a sample of the GPU without the job")
        second = jobs.sh("echo ran", gpu=1)
        done = jobs.wait(second["id"], timeout=20)
        assert done["status"] == "SUCCEEDED" and done["gpu_indexes"] == [0]


def test_a_gpu_busy_outside_gpuplane_holds_a_job_until_its_median_falls(judged):
    jobs, _ = judged
    plant_util(claims(jobs), 0, 90)  # someone's work on the GPU, with no process the driver shows us
    wait_for(lambda: jobs.client.get("/api/v1/nodes")["nodes"][0]["snapshot"]["gpus"][0]["utilization_pct"] == 90,
             what="GPU 0 to read 90%")
    next_samples(jobs, 3)
    said = "GPU 0: busy 90% (median of the last 3 samples, over max_free_util 50%)"
    job = jobs.sh("echo ran", gpu=1)
    assert reason(jobs, job["id"], said)["status"] == "QUEUED"
    plant_util(claims(jobs), 0, None)  # it idles now: free once 2 of the last 3 readings say so
    done = jobs.wait(job["id"], timeout=20)
    assert done["status"] == "SUCCEEDED" and done["gpu_indexes"] == [0]


def test_a_lost_gpu_is_named_until_it_reads_again(box):
    jobs, _ = box
    mark = claims(jobs) / "0" / "lost"
    mark.touch()
    try:
        wait_for(lambda: jobs.client.get("/api/v1/nodes")["nodes"][0]["snapshot"]["blocked_gpus"] == [0],
                 what="GPU 0 lost at the server")
        job = jobs.sh("echo ran", gpu=1)
        assert reason(jobs, job["id"], "GPU 0: lost (fake GPU 0 is marked lost)")["status"] == "QUEUED"
    finally:
        mark.unlink()
    assert jobs.wait(job["id"], timeout=20)["status"] == "SUCCEEDED"
