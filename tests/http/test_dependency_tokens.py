"""A limited token's retry with dependants (issue 31 item 1) on a real daemon over its HTTP front:
it may put back only a chain of its own jobs, as it may retry only its own."""

from __future__ import annotations

import httpx
import pytest
from helpers import DaemonProcess, Jobs, kill_processes_with_env

pytestmark = pytest.mark.e2e


@pytest.fixture
def env(tmp_path):
    daemon = DaemonProcess(tmp_path / "d", "--gpus=fake:2").start()
    try:
        daemon.wait_ready()
        jobs = Jobs(daemon, tmp_path / "work")
        jobs.wait_node()
        url = jobs.client.get("/api/v1/daemon")["endpoints"]["http"]
        secret = jobs.client.post("/api/v1/tokens", {"name": "agent", "scopes": ["write"],
                                                     "limits": {"max_gpus_per_job": 1}})["secret"]
        yield jobs, url, secret
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


def post(url, secret, path, body):
    return httpx.post(url + path, json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=10)


def test_a_limited_token_puts_back_only_its_own_chain(env):
    jobs, url, secret = env
    mine = post(url, secret, "/api/v1/jobs", {"command": ["false"], "cwd": str(jobs.workdir)})
    assert mine.status_code == 201, mine.text
    parent = mine.json()["job"]["id"]
    own = post(url, secret, "/api/v1/jobs", {"command": ["true"], "cwd": str(jobs.workdir), "after": {"ids": [parent]}})
    others = jobs.submit(["true"], after={"ids": [own.json()["job"]["id"]]})["id"]  # the trusted socket's
    jobs.wait(parent)
    assert jobs.wait(others)["failure_reason"] == "DEPENDENCY_FAILED"

    refused = post(url, secret, f"/api/v1/jobs/{parent}/retry", {"with_dependants": True})
    assert refused.status_code == 403
    assert f"{others} is not one of them" in refused.json()["error"]["message"]
    assert jobs.get(parent)["status"] == "FAILED"  # nothing changed
    assert jobs.get(own.json()["job"]["id"])["status"] == "CANCELLED"

    alone = post(url, secret, f"/api/v1/jobs/{parent}/retry", {})
    assert alone.status_code == 200, alone.text
    assert jobs.get(own.json()["job"]["id"])["status"] == "CANCELLED"  # without with_dependants it stays
