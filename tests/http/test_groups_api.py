"""The group and queue-control routes' real replies against the OpenAPI document (the fuzz
leaves out the ones that remove jobs or pause the queue: ``fuzzkit.EXCLUDED``), and their
refusals: a bad group name, an unknown group or verb, a job in the wrong state."""

from __future__ import annotations

from test_openapi import Checker
from unixhttp import BASE_URL

from gpuplaned.http import openapi


def test_group_and_queue_replies_match_their_schemas(api_jobs, api_session):
    check = Checker(openapi.document()).check
    s, url, workdir = api_session, BASE_URL + "/api/v1", str(api_jobs.workdir)

    made = check(s.put(f"{url}/groups/train", json={"parallel": 1}), "PUT", "/api/v1/groups/{name}", 200)
    assert made["group"] == {"name": "train", "parallel": 1, "paused": False, "queued": 0, "running": 0}
    check(s.put(f"{url}/groups/train", json={"parallel": 0}), "PUT", "/api/v1/groups/{name}", 400)
    bad = check(s.put(f"{url}/groups/a%20b", json={"parallel": 1}), "PUT", "/api/v1/groups/{name}", 400)
    assert "'a b' is not a group name" in bad["error"]["message"]
    check(s.get(f"{url}/groups/train"), "GET", "/api/v1/groups/{name}", 200)
    check(s.get(f"{url}/groups/nope"), "GET", "/api/v1/groups/{name}", 404)
    check(s.post(f"{url}/groups/train/pause"), "POST", "/api/v1/groups/{name}/{verb}", 200)
    check(s.post(f"{url}/groups/train/stop"), "POST", "/api/v1/groups/{name}/{verb}", 404)
    check(s.post(f"{url}/groups/nope/resume"), "POST", "/api/v1/groups/{name}/{verb}", 404)

    paused = check(s.post(f"{url}/queue/pause"), "POST", "/api/v1/queue/{verb}", 200)
    assert paused == {"paused": True}
    check(s.post(f"{url}/queue/halt"), "POST", "/api/v1/queue/{verb}", 404)
    assert check(s.get(f"{url}/queue"), "GET", "/api/v1/queue", 200) == {"paused": True}
    listed = check(s.get(f"{url}/groups"), "GET", "/api/v1/groups", 200)
    assert listed["queue_paused"] is True and [g["name"] for g in listed["groups"]] == ["train"]

    queued = api_jobs.submit(["true"], gpu=0, group="train")
    assert queued["group"] == "train"
    moved = check(s.post(f"{url}/jobs/{queued['id']}/priority", json={"priority": 7}), "POST",
                  "/api/v1/jobs/{job_id}/priority", 200)
    assert moved["job"]["priority"] == 7
    check(s.post(f"{url}/jobs/{queued['id']}/priority", json={"priority": "high"}), "POST",
          "/api/v1/jobs/{job_id}/priority", 400)
    check(s.post(f"{url}/jobs/job_nothing/priority", json={"priority": 1}), "POST",
          "/api/v1/jobs/{job_id}/priority", 404)
    removed = check(s.post(f"{url}/jobs/{queued['id']}/remove"), "POST", "/api/v1/jobs/{job_id}/remove", 200)
    assert removed == {"removed": [queued["id"]], "kept": [], "files_removed": [], "files_waiting_on": []}  # never ran: no folder
    check(s.post(f"{url}/jobs/{queued['id']}/remove"), "POST", "/api/v1/jobs/{job_id}/remove", 404)

    check(s.post(f"{url}/queue/resume"), "POST", "/api/v1/queue/{verb}", 200)
    hog = api_jobs.submit(["sleep", "30"], gpu=0)
    api_jobs.wait(hog["id"], "RUNNING")
    refused = check(s.post(f"{url}/jobs/{hog['id']}/priority", json={"priority": 1}), "POST",
                    "/api/v1/jobs/{job_id}/priority", 409)
    assert refused["error"]["details"] == {"job_id": hog["id"], "status": "RUNNING"}
    check(s.post(f"{url}/jobs/{hog['id']}/remove"), "POST", "/api/v1/jobs/{job_id}/remove", 409)
    s.post(f"{url}/jobs/{hog['id']}/cancel")
    api_jobs.wait(hog["id"], "CANCELLED")

    check(s.post(f"{url}/jobs:clean", json={"older_than_s": -1}), "POST", "/api/v1/jobs:clean", 400)
    check(s.post(f"{url}/jobs:clean", json={"group": "no/such"}), "POST", "/api/v1/jobs:clean", 400)
    cleaned = check(s.post(f"{url}/jobs:clean"), "POST", "/api/v1/jobs:clean", 200)  # no body: every ended job
    assert cleaned["removed"] == [hog["id"]] and cleaned["kept"] == []
