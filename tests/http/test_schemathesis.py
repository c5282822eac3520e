"""Schemathesis fuzzes a real daemon from its own ``/api/v1/openapi.json``.

Every operation gets a bounded, derandomized run of schema-valid requests, then of requests
that break the schema; each reply must be no 5xx, a documented status, of a documented
content type, with a body and headers that fit the document. One daemon serves the module.

Kept away from the fuzzer, because they would stop or wedge the daemon under test:
``POST /daemon/shutdown``, ``POST /actors/{name}/{verb}`` (stopping the store or the control
actor), ``GET /events/stream`` and ``GET /nodes/{node}/stream`` (they stream until the client
leaves). Their replies are checked in ``test_openapi.py``. Nor ``POST /jobs/{job_id}/remove``,
``POST /jobs:clean`` and ``POST /queue/{verb}`` (they would remove the jobs the other cases
name, or hold every later job): ``test_groups_api.py`` checks theirs; nor ``POST /sweeps`` (a random
sweep may queue 10,000 jobs): ``test_sweeps_openapi.py`` checks its replies. ``POST /jobs`` (and ``/jobs:batch``, its
entries) is fuzzed with schema-valid bodies only, with ``command`` pinned to ``["true"]``, ``cwd`` to a scratch dir
and ``env`` names to a ``GPUPLANE_FUZZ_`` prefix, so nothing the fuzzer makes up can run.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any, NamedTuple

import hypothesis
import pytest
import requests
import schemathesis
from fuzzkit import CHECKS, CONFIG, EXCLUDED, fuzz_document, known_values
from helpers import DaemonProcess, Jobs, kill_processes_with_env
from hypothesis import HealthCheck, Phase
from schemathesis import GenerationMode
from unixhttp import BASE_URL, unix_session

from gpuplaned.http import openapi

# A body that breaks the schema could name any command, or any dir for import-run to read.
POSITIVE_ONLY = {("POST", "/api/v1/jobs"), ("POST", "/api/v1/jobs:batch"), ("POST", "/api/v1/runs/import")}
EXAMPLES = {GenerationMode.POSITIVE: 20, GenerationMode.NEGATIVE: 10}


def operations() -> list[tuple[str, str]]:
    return sorted((method.upper(), path) for path, item in openapi.document()["paths"].items() for method in item
                  if (method.upper(), path) not in EXCLUDED)


class Fuzz(NamedTuple):
    jobs: Jobs
    session: requests.Session
    schema: Any  # the schemathesis schema of the fuzz document


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    (root / "gpuplaned.toml").write_text(CONFIG)
    daemon = DaemonProcess(root / "d", "--gpus=fake:2", "--config", str(root / "gpuplaned.toml")).start()
    session = unix_session(str(daemon.socket_path))
    # One connection per request, as gpuplanectl does (test_fuzz_front.py keeps one alive).
    session.headers["Connection"] = "close"
    try:
        daemon.wait_ready()
        jobs = Jobs(daemon, root / "work")
        known = known_values(jobs)
        served = session.get(f"{BASE_URL}{openapi.PATH}", timeout=10).json()
        document = fuzz_document(served, str(jobs.workdir), known)
        yield Fuzz(jobs, session, schemathesis.openapi.from_dict(document))
    finally:
        session.close()
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


@pytest.mark.parametrize("mode", list(EXAMPLES), ids=str)
@pytest.mark.parametrize(("method", "path"), operations(), ids=[f"{m} {p}" for m, p in operations()])
def test_fuzz(fuzz, method, path, mode):
    if mode is GenerationMode.NEGATIVE and (method, path) in POSITIVE_ONLY:
        pytest.skip("schema-breaking job bodies are not sent (see the module docstring)")
    operation = fuzz.schema[path][method]
    sent = []

    @hypothesis.settings(max_examples=EXAMPLES[mode], derandomize=True, database=None, deadline=None,
                         phases=[Phase.explicit, Phase.generate, Phase.shrink],
                         suppress_health_check=list(HealthCheck), print_blob=False)
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
    def run(case):
        response = case.call(base_url=BASE_URL, session=fuzz.session, timeout=10)
        sent.append(response.status_code)
        case.validate_response(response, checks=CHECKS)

    run()
    assert sent


def test_the_fuzzer_cannot_run_anything_but_true(fuzz):
    """Every job the fuzz made runs ``true`` in the scratch dir (it runs after the fuzz tests, in file order)."""
    listed = fuzz.jobs.client.get("/api/v1/jobs?limit=10000")["jobs"]
    assert {tuple(j["command"]) for j in listed} <= {("true",)}
    assert {j["cwd"] for j in listed} <= {str(fuzz.jobs.workdir)}
    assert all(name.startswith("GPUPLANE_FUZZ_") for j in listed for name in j["env"])


def _cursor(*key: Any) -> str:
    """A page cursor as gpuplaned.protocol.cursors writes one (base64url JSON, unpadded)."""
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


# Once 5xx the fuzz found (all fixed at their source); each stays as a plain regression test.
def _bad_input(target: str, body: str | None = None, *, id: str) -> Any:
    return pytest.param("POST" if body else "GET", target, body, id=id)


FOUND_SERVER_ERRORS = [
    _bad_input("/api/v1/nodes/{node}/metrics?start={future}", id="metrics-start-in-the-future"),
    _bad_input("/api/v1/nodes/{node}/metrics?end=100000000000000000000", id="metrics-end-over-int64"),
    _bad_input("/api/v1/jobs/{job}/logs?offset=21107647424988", id="logs-offset-past-max-file-size"),
    _bad_input("/api/v1/jobs", '{{"command": ["\\ud800"], "cwd": "{workdir}"}}', id="job-lone-surrogate"),
    *(_bad_input(f"/api/v1/{kind}?cursor={cursor}", id=f"{kind}-cursor-over-int64")
      for kind, cursor in (("jobs", _cursor("jobs", 10**20, "x")), ("runs", _cursor("runs", 10**20, "x")),
                           ("events", _cursor("events", 10**20)))),
]


@pytest.mark.parametrize(("method", "target", "body"), FOUND_SERVER_ERRORS)
def test_bad_input_found_by_the_fuzz_is_a_4xx(fuzz, method, target, body):
    node = fuzz.jobs.client.get("/api/v1/nodes")["nodes"][0]["name"]
    job = fuzz.jobs.client.get("/api/v1/jobs?status=SUCCEEDED&limit=1")["jobs"][0]["id"]
    values = {"node": node, "job": job, "future": int(time.time() * 1000) + 86_400_000,
              "workdir": fuzz.jobs.workdir}
    data = body.format(**values).encode() if body is not None else None
    response = fuzz.session.request(method, BASE_URL + target.format(**values), data=data, timeout=10)
    if "offset" in target:  # a far offset is simply past the end of the file: no lines
        assert response.status_code == 200 and response.json()["lines"] == [], response.text
    else:
        assert response.status_code == 400 and response.json()["error"]["code"] == "bad_request", response.text


def test_keep_alive_after_an_early_error(fuzz):
    session = unix_session(str(fuzz.jobs.daemon.socket_path))
    body = b'{"name": "keepalive", "scopes": ["read"], "expires_in_s": 60}'
    with session:
        for _ in range(20):
            session.post(f"{BASE_URL}/api/v1/tokens", data=body, headers={"Idempotency-Key": "bad\tkey"}, timeout=5)
            session.get(f"{BASE_URL}/api/v1/daemon", timeout=0.5)
