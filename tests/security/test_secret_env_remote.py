"""A job's secret env on a remote agent (``--role agent`` dialing a ``--role server``): the job's
process there gets it, and neither the server's files (its database and WAL) nor the agent's (its
home: job dirs, spool, state; its log) hold it in the clear."""

from __future__ import annotations

import pytest
from remote_cluster import Cluster

pytestmark = pytest.mark.e2e

SECRET = "remote-s3cret-6e4"


@pytest.fixture
def cluster(tmp_path):
    made = Cluster(tmp_path / "cluster")
    try:
        made.agent("a1", made.token("a1", ["agent"]))
        yield made
    finally:
        made.close()


def test_a_remote_jobs_process_gets_its_secret_env_and_no_file_holds_it(cluster, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    job = cluster.api.post("/api/v1/jobs", {"command": ["sh", "-c", 'printf %s "$DB_PASS" > seen'],
                                            "cwd": str(work), "gpu": 0, "node": "a1",
                                            "secret_env": {"DB_PASS": SECRET}})["job"]
    assert job["secret_env"] == ["DB_PASS"]
    done = cluster.wait_job(job["id"], "SUCCEEDED", "FAILED", "CANCELLED")
    assert done["status"] == "SUCCEEDED", done
    assert (work / "seen").read_text() == SECRET
    agent = cluster.agents[0].daemon
    for daemon in (cluster.server, agent):
        files = [p for root in (daemon.home, daemon.runtime_dir) for p in root.rglob("*") if p.is_file()]
        assert files
        assert not [p for p in files if SECRET.encode() in p.read_bytes()]
        assert SECRET not in daemon.log()
    assert (cluster.server.home / "gpuplane.db").exists()
