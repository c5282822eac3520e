"""Removing jobs that ran on a remote agent's node deletes their folders there too (issue 31
item 2: ``job remove`` and ``clean`` remove "their records and files"): one ``--role server``
daemon and one ``--role agent`` daemon dialing it through a TCP proxy
(``tests/remote_cluster.py``).

- ``job remove`` of a job that ran on the agent: its ``jobs/<id>/`` folder on the agent's host
  is gone when the reply comes, and the reply names it as ``node:path``.
- ``clean`` while the agent's link is cut: the reply says which node's agent is away, the folder
  stays for now, and the agent deletes it once its link is back; a folder holding one of the
  job's registered checkpoints stays.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import wait_for
from remote_cluster import Agent, Cluster, running

from gpuplaned.home import JOBS_DIR

NODE = "box-rm"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(tmp_path_factory.mktemp("remote-removal"), NODE) as cluster:
        yield cluster


@pytest.fixture
def agent(cluster) -> Agent:
    return cluster.agents[0]


# Saves a checkpoint into its own attempt folder on the agent's host (declared with GPUPLANE_CKPT_DIR).
SAVES_IN_ITS_FOLDER = """
import os, pathlib
attempt = pathlib.Path(os.environ["GPUPLANE_HOME"], "jobs", os.environ["GPUPLANE_JOB_ID"],
                       "attempt-" + os.environ["GPUPLANE_ATTEMPT"])
(attempt / "model.pt").write_bytes(b"weights")
"""


def ended_job(cluster: Cluster, work: Path, *, group: str | None = None, script: str = "print('hello from the agent')",
              env: dict[str, str] | None = None) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    body = {"command": [sys.executable, "-c", script], "cwd": str(work), "gpu": 0, "node": NODE, "env": env or {}}
    if group is not None:
        body["group"] = group
    job = cluster.api.post("/api/v1/jobs", body)["job"]
    return cluster.wait_job(job["id"], "SUCCEEDED")


def folder_on(agent: Agent, job: dict) -> Path:
    return agent.daemon.home / JOBS_DIR / job["id"]


def link_state(cluster: Cluster) -> str | None:
    return ((cluster.node(NODE) or {}).get("link") or {}).get("state")


def test_job_remove_deletes_the_folder_on_the_agents_host(cluster, agent, tmp_path):
    job = ended_job(cluster, tmp_path / "work")
    folder = folder_on(agent, job)
    assert (folder / f"attempt-{job['attempt']}" / "stdout.log").read_text() == "hello from the agent\n"

    removed = cluster.api.post(f"/api/v1/jobs/{job['id']}/remove", {})

    assert removed["removed"] == [job["id"]]
    assert not folder.exists()
    assert removed["files_removed"] == [f"{NODE}:{folder.resolve()}"]
    assert removed["files_waiting_on"] == []


def test_clean_with_the_agent_away_deletes_its_folders_once_it_is_back(cluster, agent, tmp_path):
    plain = ended_job(cluster, tmp_path / "plain", group="tidy")
    # A registered checkpoint inside the job's own folder keeps that folder.
    with_checkpoint = ended_job(cluster, tmp_path / "ckpt", group="tidy", script=SAVES_IN_ITS_FOLDER,
                                env={"GPUPLANE_CKPT_DIR": str(agent.daemon.home / JOBS_DIR)})
    kept_file = folder_on(agent, with_checkpoint) / f"attempt-{with_checkpoint['attempt']}" / "model.pt"
    wait_for(lambda: cluster.api.get(f"/api/v1/runs/{with_checkpoint['run_id']}/checkpoints")["checkpoints"], 30,
             what="the checkpoint to be registered")

    agent.proxy.cut()
    try:
        wait_for(lambda: link_state(cluster) == "detached", 15, what="the server to see the agent's link down")
        cleaned = cluster.api.post("/api/v1/jobs:clean", {"group": "tidy"})
        assert sorted(cleaned["removed"]) == sorted([plain["id"], with_checkpoint["id"]])
        assert cleaned["files_waiting_on"] == [NODE]
        assert folder_on(agent, plain).is_dir()  # not yet: its host is away
    finally:
        agent.proxy.restore()

    wait_for(lambda: not folder_on(agent, plain).exists(), 30, what="the agent to delete the folder once back")
    assert kept_file.read_bytes() == b"weights"
    assert folder_on(agent, with_checkpoint).is_dir()
    # Done once: the next clean has nothing left to ask of the agent.
    again = cluster.api.post("/api/v1/jobs:clean", {"group": "tidy"})
    assert again == {"removed": [], "kept": [], "files_removed": [], "files_waiting_on": []}
