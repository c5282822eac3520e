"""Who sees a job's env values, on a real daemon: names only in lists and for read-only
tokens, values with write on the one job, never for names that look secret."""

from __future__ import annotations

import httpx
import pytest
from helpers import Jobs

pytestmark = pytest.mark.e2e

ENV = {"LR": "lr-value", "WANDB_API_KEY": "wandb-s3cret", "db_password": "pw-s3cret", "GH_TOKEN": "gh-s3cret",
       "my_secret_x": "x-s3cret", "OMP_NUM_THREADS": "omp-value"}
SHOWN = {"LR": "lr-value", "OMP_NUM_THREADS": "omp-value"}
NAMES_ONLY = dict.fromkeys(ENV)


@pytest.fixture
def setup(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    job = jobs.sh('printf %s "$WANDB_API_KEY" > seen', gpu=0, env=ENV)
    jobs.wait(job["id"])
    url = jobs.client.get("/api/v1/daemon")["endpoints"]["http"]
    tokens = {scope: jobs.client.post("/api/v1/tokens", {"name": scope, "scopes": [scope]})["secret"]
              for scope in ("read", "write")}
    return jobs, job["id"], url, tokens


def get(url: str, token: str, path: str) -> httpx.Response:
    response = httpx.get(url + path, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert response.status_code == 200, response.text
    return response


def test_lists_and_read_tokens_show_env_names_only(setup):
    jobs, job_id, url, tokens = setup
    for token in tokens.values():
        listed = get(url, token, "/api/v1/jobs")
        assert listed.json()["jobs"][0]["env"] == NAMES_ONLY
        assert not any(value in listed.text for value in ENV.values())
    one = get(url, tokens["read"], f"/api/v1/jobs/{job_id}")
    assert one.json()["job"]["env"] == NAMES_ONLY and "s3cret" not in one.text
    assert jobs.file("seen").read_text() == ENV["WANDB_API_KEY"]  # the job itself got every value


def test_write_shows_the_values_of_one_job_except_secret_looking_names(setup):
    jobs, job_id, url, tokens = setup
    one = get(url, tokens["write"], f"/api/v1/jobs/{job_id}")
    assert one.json()["job"]["env"] == {**NAMES_ONLY, **SHOWN} and "s3cret" not in one.text
    # The local socket is the owner's, and may write: the same view.
    assert jobs.get(job_id)["env"] == {**NAMES_ONLY, **SHOWN}
    assert jobs.client.get("/api/v1/jobs")["jobs"][0]["env"] == NAMES_ONLY
