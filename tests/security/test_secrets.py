"""Secrets (issue 29 item 9), on a real daemon with its HTTP front: a job's secret env
(``job submit --secret-env``, a job file's ``[secrets]``) reaches its process, every attempt of
it, and nothing else: no reply to any token or the local socket (REST, MCP, the CLI), no audit
row, no byte of the SQLite file or its WAL, no file of the daemon's home. Plain env whose name
names a credential (``DB_PASS``, ``AUTH_HEADER``) is hidden, a URL's password masked in env
and argv, the audit log keeps no env value, and ``GET /webhooks`` hides a hook's secret path, which is sealed at rest."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from helpers import Jobs, wait_for
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_http import closing_client

pytestmark = pytest.mark.e2e

FLAG_SECRET = "flag-s3cret-9f1"  # --secret-env DB_PASS=...
FILE_SECRET = "file-s3cret-7c2"  # [secrets] HF_HOME_KEY = ...
URL_PASSWORD = "url-s3cret-44a"  # the password in DATABASE_URL (plain env)
ARGV_PASSWORD = "argv-s3cret-5d0"  # the password of a URL in the command's arguments
HEADER = "hdr-s3cret-31b"  # AUTH_HEADER (plain env, a secret-looking name)
PLAIN_PASS = "plainpass-s3cret-88e"  # DB_PASS given as plain env to another job
SECRETS = (FLAG_SECRET, FILE_SECRET)  # never stored in the clear anywhere
SHOWN_NOWHERE = (*SECRETS, URL_PASSWORD, ARGV_PASSWORD, HEADER, PLAIN_PASS)  # never in a reply nor the audit log

# Attempt 1 fails, so the scheduler's retry runs attempt 2: each writes what it was given.
SCRIPT = 'printf "%s|%s" "$DB_PASS" "$HF_HOME_KEY" > "seen.$GPUPLANE_ATTEMPT"; [ "$GPUPLANE_ATTEMPT" -ge 2 ]'
ARGV_URL = f"--db=postgres://trainer:{ARGV_PASSWORD}@db.lan:5432/runs"


class Setup:
    def __init__(self, jobs: Jobs, url: str, tokens: dict[str, str], job_id: str, plain_id: str) -> None:
        self.jobs, self.url, self.tokens, self.job_id, self.plain_id = jobs, url, tokens, job_id, plain_id

    def rest(self, scope: str, path: str) -> httpx.Response:
        response = httpx.get(self.url + path, headers={"Authorization": f"Bearer {self.tokens[scope]}"}, timeout=10)
        assert response.status_code == 200, response.text
        return response

    def ctl(self, *args: str) -> str:
        done = self.jobs.daemon.run_ctl(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr


@pytest.fixture
def setup(daemon_factory, tmp_path) -> Setup:
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    job_file = tmp_path / "job.toml"
    job_file.write_text(f'[env]\nDATABASE_URL = "postgres://trainer:{URL_PASSWORD}@db.lan/runs"\n'
                        f'AUTH_HEADER = "Bearer {HEADER}"\nLR = "0.1"\n'
                        f'[secrets]\nHF_HOME_KEY = "{FILE_SECRET}"\n')
    submitted = jobs.daemon.run_ctl("job", "submit", "--file", str(job_file), "--gpu", "0", "--retry", "1",
                                    "--secret-env", f"DB_PASS={FLAG_SECRET}", "--dir", str(jobs.workdir), "--quiet",
                                    "--", "sh", "-c", SCRIPT, "job", ARGV_URL)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    done = jobs.wait(job_id)
    assert (done["status"], done["attempt"]) == ("SUCCEEDED", 2), done
    plain = jobs.sh("true", gpu=0, env={"DB_PASS": PLAIN_PASS, "EPOCHS": "3"})
    jobs.wait(plain["id"])
    url = jobs.client.get("/api/v1/daemon")["endpoints"]["http"]
    tokens = {scope: jobs.client.post("/api/v1/tokens", {"name": scope, "scopes": [scope]})["secret"]
              for scope in ("read", "write", "admin")}
    return Setup(jobs, url, tokens, job_id, plain["id"])


def test_each_attempt_gets_the_secret_env_and_retry_keeps_it(setup):
    jobs = setup.jobs
    for attempt in (1, 2):
        assert jobs.file(f"seen.{attempt}").read_text() == f"{FLAG_SECRET}|{FILE_SECRET}"
    retried = jobs.client.post(f"/api/v1/jobs/{setup.job_id}/retry", {})["job"]
    assert retried["status"] in ("QUEUED", "DISPATCHING", "RUNNING")
    wait_for(lambda: jobs.file("seen.3").exists(), what="the retried attempt to run")
    assert jobs.file("seen.3").read_text() == f"{FLAG_SECRET}|{FILE_SECRET}"


def _shown_job(job: dict, *, values: bool) -> None:
    assert job["secret_env"] == ["HF_HOME_KEY", "DB_PASS"]
    assert "DB_PASS" not in job["env"] and "HF_HOME_KEY" not in job["env"]  # never even as null
    assert job["command"][-1] == "--db=postgres://trainer:***@db.lan:5432/runs"
    assert job["env"]["AUTH_HEADER"] is None
    if values:
        assert job["env"]["DATABASE_URL"] == "postgres://trainer:***@db.lan/runs"
        assert job["env"]["LR"] == "0.1"


def test_no_rest_reply_or_cli_output_shows_a_secret(setup):
    for scope in ("read", "write", "admin"):
        one = setup.rest(scope, f"/api/v1/jobs/{setup.job_id}")
        _shown_job(one.json()["job"], values=scope != "read")
        plain = setup.rest(scope, f"/api/v1/jobs/{setup.plain_id}").json()["job"]
        assert plain["env"]["DB_PASS"] is None and plain["secret_env"] == []
        listed = setup.rest(scope, "/api/v1/jobs")
        for text in (one.text, listed.text, setup.rest(scope, f"/api/v1/jobs/{setup.plain_id}").text):
            assert not [s for s in SHOWN_NOWHERE if s in text], scope
    local = setup.jobs.get(setup.job_id)  # the local socket: the owner's own view
    _shown_job(local, values=True)
    outputs = [setup.ctl("job", "show", setup.job_id), setup.ctl("job", "show", setup.job_id, "--json"),
               setup.ctl("job", "list"), setup.ctl("job", "list", "--json"), json.dumps(local)]
    for text in outputs:
        assert not [s for s in SHOWN_NOWHERE if s in text], text
    assert re.search(r"^secret env: +HF_HOME_KEY DB_PASS$", outputs[0], re.MULTILINE), outputs[0]  # names only


@asynccontextmanager
async def _mcp(url: str, token: str) -> AsyncIterator[Client]:
    async with closing_client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http, \
            Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
        yield client


def _text(result) -> str:
    assert not result.is_error, result.content
    return json.dumps(result.structured_content) + " ".join(getattr(p, "text", "") for p in result.content)


@asynccontextmanager
async def _mcp_stdio(setup: Setup) -> AsyncIterator[Client]:
    """``gpuplanectl mcp-stdio``: the same tools over the local socket (the owner's view)."""
    async with Client(StdioServerParameters(command=sys.executable, args=["-m", "gpuplanectl", "mcp-stdio"],
                                            env=setup.jobs.daemon.env)) as client:
        yield client


async def test_no_mcp_answer_shows_a_secret(setup):
    for scope in ("read", "write", "admin", "local"):
        async with (_mcp_stdio(setup) if scope == "local" else _mcp(setup.url, setup.tokens[scope])) as client:
            one = await client.call_tool("get_job", {"job_id": setup.job_id})
            _shown_job(one.structured_content["job"], values=scope != "read")
            texts = [_text(one), _text(await client.call_tool("list_jobs", {})),
                     _text(await client.call_tool("get_job", {"job_id": setup.plain_id}))]
            if scope != "read":
                texts.append(_text(await client.call_tool("retry_job", {"job_id": setup.job_id, "dry_run": True})))
        for text in texts:
            assert not [s for s in SHOWN_NOWHERE if s in text], (scope, text)


def test_the_audit_log_holds_no_env_value(setup):
    # An MCP-free write by a token, with a secret and plain env, lands in the audit log too.
    response = httpx.post(setup.url + "/api/v1/jobs", headers={"Authorization": f"Bearer {setup.tokens['write']}"},
                          json={"command": ["true", ARGV_URL], "cwd": str(setup.jobs.workdir), "gpu": 0,
                                "env": {"EPOCHS": "epochs-value", "DATABASE_URL": f"mysql://u:{URL_PASSWORD}@h/x"},
                                "secret_env": {"DB_PASS": FLAG_SECRET}}, timeout=10)
    assert response.status_code == 201, response.text
    audit = setup.rest("admin", "/api/v1/audit?limit=200").json()
    submits = [row for row in audit["entries"] if row["action"] == "POST /api/v1/jobs"]
    assert len(submits) == 3  # the CLI's (the local socket), the plain job's, this token's
    assert submits[0]["arguments"]["body"]["secret_env"] == {"DB_PASS": "[redacted]"}
    assert set(submits[0]["arguments"]["body"]["env"].values()) == {"[redacted]"}
    text = json.dumps(audit)
    assert not [s for s in (*SHOWN_NOWHERE, "epochs-value") if s in text]
    db = sqlite3.connect(f"file:{setup.jobs.daemon.home / 'gpuplane.db'}?mode=ro", uri=True)
    rows = json.dumps(db.execute("SELECT * FROM audit_log").fetchall())
    db.close()
    assert rows.count("POST /api/v1/jobs") == 3
    assert not [s for s in (*SHOWN_NOWHERE, "epochs-value") if s in rows]


def _home_files(home: Path) -> list[Path]:
    return [path for path in home.rglob("*") if path.is_file()]


def test_no_file_of_the_daemon_holds_a_secret_in_the_clear(setup):
    # A submit with an Idempotency-Key: its kept reply (and body hash) must not hold it either.
    response = httpx.post(setup.url + "/api/v1/jobs", timeout=10,
                          headers={"Authorization": f"Bearer {setup.tokens['write']}", "Idempotency-Key": "k1"},
                          json={"command": ["true"], "cwd": str(setup.jobs.workdir), "gpu": 0,
                                "secret_env": {"HF_HOME_KEY": FILE_SECRET}})
    assert response.status_code == 201, response.text
    setup.jobs.wait(response.json()["job"]["id"])
    home = setup.jobs.daemon.home
    store = [home / "gpuplane.db", home / "gpuplane.db-wal"]
    assert store[0].exists()
    files = _home_files(home) + _home_files(setup.jobs.daemon.runtime_dir)
    assert set(store[:1]) <= set(files)
    for path in files:
        data = path.read_bytes()
        assert not [s for s in SECRETS if s.encode() in data], path
    log = setup.jobs.daemon.log()
    assert not [s for s in SHOWN_NOWHERE if s in log]


def test_webhook_listing_hides_the_hooks_secret_path(setup):
    headers = {"Authorization": f"Bearer {setup.tokens['admin']}"}
    made = httpx.post(setup.url + "/api/v1/webhooks", headers=headers, timeout=10,
                      json={"url": "https://hooks.slack.com/services/T0/B0/XYZhook-s3cret", "events": ["*"]})
    assert made.status_code == 201, made.text
    bark = httpx.post(setup.url + "/api/v1/webhooks", headers=headers, timeout=10,
                      json={"url": "https://api.day.app:8443/barkkey-s3cret/", "events": ["*"]})
    assert bark.status_code == 201, bark.text
    listed = setup.rest("admin", "/api/v1/webhooks")
    urls = sorted(hook["url"] for hook in listed.json()["webhooks"])
    assert urls == ["https://api.day.app:8443/***", "https://hooks.slack.com/***"]
    assert "s3cret" not in listed.text + made.text + bark.text
    shown = subprocess.run([sys.executable, "-m", "gpuplanectl", "webhook", "list"], env=setup.jobs.daemon.env,
                           capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert shown.returncode == 0 and "hooks.slack.com/***" in shown.stdout, shown.stderr
    assert "s3cret" not in shown.stdout + shown.stderr
    # Sealed at rest as the signing secret is: neither the database nor its WAL holds the path.
    stored = b"".join(path.read_bytes() for path in setup.jobs.daemon.home.glob("gpuplane.db*"))
    assert b"XYZhook-s3cret" not in stored and b"barkkey-s3cret" not in stored and b"hooks.slack.com" in stored


def test_a_secret_env_that_cannot_be_opened_fails_its_job_not_the_scheduler(daemon_factory, tmp_path):
    from cryptography.fernet import Fernet

    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none", "--max-cpu-jobs", "1")
    blocker = jobs.sh("while [ ! -e go ]; do sleep 0.05; done", gpu=0)
    jobs.wait(blocker["id"], "RUNNING")
    sealed = jobs.sh('printf %s "$DB_PASS" > seen', gpu=0, secret_env={"DB_PASS": FLAG_SECRET})
    assert jobs.get(sealed["id"])["status"] == "QUEUED"
    key = jobs.daemon.home / "webhook.key"
    key.write_bytes(Fernet.generate_key())  # the key replaced: what was sealed under the old one is lost
    jobs.file("go").touch()
    failed = jobs.wait(sealed["id"])
    assert (failed["status"], failed["failure_reason"]) == ("FAILED", "SPAWN_FAILED"), failed
    assert "secret env cannot be opened" in failed["failure_message"] and str(key) in failed["failure_message"]
    assert not jobs.file("seen").exists()
    after = jobs.sh("true", gpu=0)  # the scheduler goes on
    assert jobs.wait(after["id"])["status"] == "SUCCEEDED"
