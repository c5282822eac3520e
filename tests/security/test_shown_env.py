"""What a real daemon shows of a job's plain env and argv, and of a webhook's URL, without any
secret env: names that name a credential (``DB_PASS``, ``AUTH_HEADER``) hide their values even
from a token that may write, a URL's password is masked in env (``DATABASE_URL``) and argv, the
audit log holds no env value, and ``GET /webhooks`` hides a hook's secret path."""

from __future__ import annotations

import json

import httpx
import pytest
from helpers import Jobs

pytestmark = pytest.mark.e2e

ENV = {"DB_PASS": "dbpass-s3cret", "AUTH_HEADER": "Bearer hdr-s3cret", "EPOCHS": "epochs-value",
       "DATABASE_URL": "postgres://trainer:url-s3cret@db.lan:5432/runs"}


@pytest.fixture
def front(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    url = jobs.client.get("/api/v1/daemon")["endpoints"]["http"]
    tokens = {scope: jobs.client.post("/api/v1/tokens", {"name": scope, "scopes": [scope]})["secret"]
              for scope in ("write", "admin")}
    return jobs, url, tokens


def call(method: str, url: str, token: str, **kwargs) -> httpx.Response:
    return httpx.request(method, url, headers={"Authorization": f"Bearer {token}"}, timeout=10, **kwargs)


def test_credential_names_and_url_passwords_are_hidden_from_a_write_token_and_the_audit_log(front):
    jobs, url, tokens = front
    made = call("POST", url + "/api/v1/jobs", tokens["write"],
                json={"command": ["true", "--db=mysql://u:argv-s3cret@h/x"], "cwd": str(jobs.workdir), "gpu": 0,
                      "env": ENV})
    assert made.status_code == 201, made.text
    job_id = made.json()["job"]["id"]
    one = call("GET", f"{url}/api/v1/jobs/{job_id}", tokens["write"])
    job = one.json()["job"]
    assert job["env"] == {"DB_PASS": None, "AUTH_HEADER": None, "EPOCHS": "epochs-value",
                          "DATABASE_URL": "postgres://trainer:***@db.lan:5432/runs"}
    assert job["command"] == ["true", "--db=mysql://u:***@h/x"]
    assert "s3cret" not in made.text + one.text + json.dumps(jobs.get(job_id))
    audit = call("GET", url + "/api/v1/audit", tokens["admin"]).json()["entries"]
    submit = next(row for row in audit if row["action"] == "POST /api/v1/jobs")
    assert submit["arguments"]["body"]["env"] == dict.fromkeys(ENV, "[redacted]")
    assert "s3cret" not in json.dumps(audit) and "epochs-value" not in json.dumps(audit)


def test_a_variable_given_both_plain_and_secret_is_refused_naming_it(front):
    jobs, url, tokens = front
    refused = call("POST", url + "/api/v1/jobs", tokens["write"],
                   json={"command": ["true"], "cwd": str(jobs.workdir), "gpu": 0, "env": {"DB_PASS": "a"},
                         "secret_env": {"DB_PASS": "b"}})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["details"]["field"] == "secret_env" and "DB_PASS also in env" in error["message"]
    assert jobs.client.get("/api/v1/jobs")["jobs"] == []


def test_a_webhook_listing_shows_no_secret_path(front):
    _, url, tokens = front
    hook = "https://discord.com/api/webhooks/123/hook-s3cret"
    made = call("POST", url + "/api/v1/webhooks", tokens["admin"], json={"url": hook, "events": ["*"]})
    assert made.status_code == 201, made.text
    listed = call("GET", url + "/api/v1/webhooks", tokens["admin"])
    assert [h["url"] for h in listed.json()["webhooks"]] == ["https://discord.com/***"]
    assert made.json()["webhook"]["url"] == "https://discord.com/***"
    assert "s3cret" not in made.text + listed.text
