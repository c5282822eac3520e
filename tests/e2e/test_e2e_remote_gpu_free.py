"""GPU-free rules across remote agents (issue 31 item 6): a ``--role server`` daemon and two
``--role agent`` daemons with one fake GPU each. The readings reach the server over each uplink;
the server's scheduler names, per node, the GPU a job waits for: a foreign process on a1's
(the agent's own ``[monitor] foreign_min_memory_mb``) and, under the server's
``[scheduler] max_free_util``, a2's busy one. Each job runs once its GPU is free."""

from __future__ import annotations

import subprocess

import pytest
from helpers import wait_for
from remote_cluster import Cluster, running

from gpuplaned.telemetry.fake import claim, plant_util

pytestmark = pytest.mark.e2e

RULES = "[monitor]\nsample_interval_s = 0.2\n[scheduler]\nmax_free_util = 50\nfree_util_samples = 3\n"


@pytest.fixture
def cluster(tmp_path):
    with running(tmp_path / "remote", "a1", "a2", extra_config=RULES) as cluster:
        yield cluster


def gpu0(cluster: Cluster, name: str) -> dict | None:
    snapshot = (cluster.node(name) or {}).get("snapshot") or {}
    return (snapshot.get("gpus") or [None])[0]


def waits(cluster: Cluster, job_id: str, wanted: str) -> dict:
    try:
        return wait_for(lambda: (job := cluster.job(job_id))["queue_reason"] == wanted and job, timeout=20,
                        what=f"{job_id} to wait with {wanted!r}")
    except AssertionError:
        raise AssertionError(f"{cluster.job(job_id)} never said {wanted!r}") from None


def test_each_agent_s_withheld_gpu_is_named_with_its_node(cluster, tmp_path):
    a1, a2 = cluster.agents
    stranger = subprocess.Popen(["sleep", "120"])
    try:
        claim(a1.daemon.runtime_dir / "fake-gpus", 0, stranger.pid, 4096)
        plant_util(a2.daemon.runtime_dir / "fake-gpus", 0, 90)
        wait_for(lambda: (gpu0(cluster, "a1") or {}).get("processes"), what="a1's foreign process at the server")
        wait_for(lambda: (gpu0(cluster, "a2") or {}).get("utilization_pct") == 90, what="a2 busy at the server")
        seen = cluster.node("a2")["snapshot"]["ts"]
        wait_for(lambda: cluster.node("a2")["snapshot"]["ts"] > seen + 600, what="three more samples of a2")

        work = tmp_path / "work"
        work.mkdir()
        anywhere = cluster.api.post("/api/v1/jobs", {"command": ["true"], "cwd": str(work), "gpu": 1})["job"]
        on_a2 = cluster.api.post("/api/v1/jobs", {"command": ["true"], "cwd": str(work), "gpu": 1,
                                                  "node": "a2"})["job"]
        foreign = f"GPU 0 on a1: foreign process 4 GiB (pid {stranger.pid})"
        busy = "GPU 0 on a2: busy 90% (median of the last 3 samples, over max_free_util 50%)"
        waits(cluster, anywhere["id"], f"{foreign}; 1 more GPU not free")
        waits(cluster, on_a2["id"], busy)
    finally:
        stranger.kill()
        stranger.wait()
    done = cluster.wait_job(anywhere["id"], "SUCCEEDED")  # on a1: a2's GPU is still busy
    assert done["queue_reason"] is None and done["gpu_indexes"] == [0]
    assert cluster.job(on_a2["id"])["status"] == "QUEUED"  # a2 is still busy
    plant_util(a2.daemon.runtime_dir / "fake-gpus", 0, None)
    assert cluster.wait_job(on_a2["id"], "SUCCEEDED")["queue_reason"] is None
