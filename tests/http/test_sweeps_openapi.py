"""The sweep routes' real replies against the OpenAPI document (the fuzz leaves out POST
/api/v1/sweeps: ``fuzzkit.EXCLUDED``), each documented status: made, dry run, bad parameters,
another job under a name, an unknown sweep or verb, a change to a cancelled sweep."""

from __future__ import annotations

from test_openapi import Checker
from unixhttp import BASE_URL

from gpuplaned.http import openapi


def test_sweep_replies_match_their_schemas(api_jobs, api_session):
    check = Checker(openapi.document()).check
    s, url, workdir = api_session, BASE_URL + "/api/v1", str(api_jobs.workdir)
    job = {"command": ["true", "{lr}"], "cwd": workdir, "gpu": 0}
    body = {"name": "doc", "job": job, "grid": {"lr": [0.1, 0.01]}, "max_parallel": 1, "metric": "loss",
            "early_stop": {"rule": "median", "min_steps": 5}, "retry_on": {"causes": ["OOM"], "times": 2}}

    dry = check(s.post(f"{url}/sweeps", json={**body, "dry_run": True}), "POST", "/api/v1/sweeps", 200)
    assert (dry["sweep"], dry["created"], len(dry["planned"])) == (None, 2, 2)
    made = check(s.post(f"{url}/sweeps", json=body), "POST", "/api/v1/sweeps", 201)
    sweep_id = made["sweep"]["id"]
    assert made["sweep"]["early_stop"] == {"rule": "median", "min_steps": 5, "grace_s": 0.0}
    assert made["sweep"]["retry_on"] == {"causes": ["OOM"], "times": 2}
    again = check(s.post(f"{url}/sweeps", json={**body, "dry_run": True}), "POST", "/api/v1/sweeps", 200)
    assert (again["sweep"]["id"], again["created"], again["existing"]) == (sweep_id, 0, 2)
    check(s.post(f"{url}/sweeps", json={**body, "grid": {"lr": []}}), "POST", "/api/v1/sweeps", 400)
    check(s.post(f"{url}/sweeps", json={**body, "job": {**job, "command": ["false"]}}), "POST", "/api/v1/sweeps", 409)
    check(s.post(f"{url}/sweeps", json={"job": job}), "POST", "/api/v1/sweeps", 400)

    check(s.get(f"{url}/sweeps"), "GET", "/api/v1/sweeps", 200)
    check(s.get(f"{url}/sweeps?status=QUEUED"), "GET", "/api/v1/sweeps", 200)
    check(s.get(f"{url}/sweeps?status=nope"), "GET", "/api/v1/sweeps", 400)
    shown = check(s.get(f"{url}/sweeps/{sweep_id}"), "GET", "/api/v1/sweeps/{sweep_id}", 200)
    assert [t["values"] for t in shown["sweep"]["trials"]] == [{"lr": 0.1}, {"lr": 0.01}]
    check(s.get(f"{url}/sweeps/swp_nothing"), "GET", "/api/v1/sweeps/{sweep_id}", 404)
    for verb in ("pause", "resume", "retry-failed", "cancel"):
        check(s.post(f"{url}/sweeps/{sweep_id}/{verb}"), "POST", "/api/v1/sweeps/{sweep_id}/{verb}", 200)
    check(s.post(f"{url}/sweeps/{sweep_id}/halt"), "POST", "/api/v1/sweeps/{sweep_id}/{verb}", 404)
    check(s.post(f"{url}/sweeps/swp_nothing/pause"), "POST", "/api/v1/sweeps/{sweep_id}/{verb}", 404)
    refused = check(s.post(f"{url}/sweeps/{sweep_id}/resume"), "POST", "/api/v1/sweeps/{sweep_id}/{verb}", 409)
    assert refused["error"]["details"] == {"sweep_id": sweep_id, "status": "CANCELLED"}
    listed = check(s.get(f"{url}/jobs?sweep={sweep_id}"), "GET", "/api/v1/jobs", 200)["jobs"]
    assert sorted(j["sweep_trial"] for j in listed) == [0, 1]
    check(s.get(f"{url}/jobs?sweep=nope"), "GET", "/api/v1/jobs", 400)
