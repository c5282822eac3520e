"""What the two fuzz modules share: the operations kept from the fuzzer, the checks, a daemon
with a little of everything to point at, and the served document steered to harmless jobs.

``test_schemathesis.py`` fuzzes each operation on the trusted Unix socket; ``test_fuzz_front.py``
chains operations statefully on the TCP front with a token, then sends hostile bodies.
"""

from __future__ import annotations

import copy
from typing import Any

from helpers import Jobs, wait_for
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

EXCLUDED = {
    ("POST", "/api/v1/daemon/shutdown"): "stops the daemon under test",
    ("POST", "/api/v1/actors/{name}/{verb}"): "stops or restarts the actors the fuzz needs",
    ("GET", "/api/v1/events/stream"): "a valid filter streams until the client leaves",
    ("GET", "/api/v1/nodes/{node}/stream"): "a known node streams until the client leaves",
    ("GET", "/api/v1/runs/{run_id}/metrics/stream"): "a known run streams until the client leaves",
    ("GET", "/api/v1/runs/metrics/stream"): "known runs stream until the client leaves",
    ("GET", "/api/v1/changes/stream"): "streams until the client leaves",
    # Checked in test_groups_api.py instead:
    ("POST", "/api/v1/jobs/{job_id}/remove"): "removes the known jobs the other cases name",
    ("POST", "/api/v1/jobs:clean"): "removes the ended jobs the other cases need",
    ("POST", "/api/v1/queue/{verb}"): "a pause left behind holds every later job of the fuzz",
    # Checked in test_sweeps_openapi.py instead:
    ("POST", "/api/v1/sweeps"): "a random sweep may queue 10,000 jobs, each with GPUPLANE_SWEEP_* env",
}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          response_headers_conformance]

# Samples (and metric batches) every 0.2 s, so the node has series before the fuzz starts;
# never DISK_LOW, so a full disk on the test machine cannot hold jobs back.
CONFIG = "[monitor]\nsample_interval_s = 0.2\nbatch_interval_s = 0.2\ndisk_low_percent = 0\n"


def known_values(jobs: Jobs) -> dict[str, list[str]]:
    """Real ids and names (plus one unknown) for the path parameters, once two jobs have run
    and the node has reported its first metrics."""
    jobs.wait_node()
    client = jobs.client
    job_ids = [jobs.submit(["true"], gpu=0)["id"] for _ in range(2)]
    for job_id in job_ids:
        jobs.wait(job_id)
    node = client.get("/api/v1/nodes")["nodes"][0]
    wait_for(lambda: client.get(f"/api/v1/nodes/{node['id']}/metrics?window=1h")["series"],
             what="the node's first metric batch")
    run_ids = [jobs.get(job_id)["run_id"] for job_id in job_ids]
    return {"job_id": [*job_ids, "job_missing"], "run_id": [*run_ids, "run_missing"],
            "key": [node["id"], node["name"], "nowhere"],
            "name": [a["name"] for a in client.get("/api/v1/actors")["actors"]] + ["nobody"]}


def fuzz_document(doc: dict[str, Any], workdir: str, known: dict[str, list[str]]) -> dict[str, Any]:
    """The served document with the harmless job body, the known-bug steering above, and path
    parameters drawn from ``known`` (real ids and names, plus one unknown), so the fuzz reaches
    past the 404 into each route's own checks."""
    doc = copy.deepcopy(doc)
    submit = doc["components"]["schemas"]["JobSubmit"]["properties"]
    submit["command"] = {"type": "array", "items": {"const": "true"}, "minItems": 1, "maxItems": 1}
    submit["cwd"] = submit["dir"] = {"const": workdir}
    submit["env"]["propertyNames"] = {"pattern": "^GPUPLANE_FUZZ_[A-Z]{0,8}$"}
    submit["secret_env"]["propertyNames"] = {"pattern": "^GPUPLANE_SFUZZ_[A-Z]{0,8}$"}  # never PATH nor LD_PRELOAD
    # import-run reads the dir it is given: only the scratch dir (nothing to import there, a 400).
    doc["components"]["schemas"]["RunImport"]["properties"]["dir"] = {"const": workdir}
    for item in doc["paths"].values():
        for op in item.values():
            for param in op.get("parameters", []):
                if param.get("in") == "path" and param["name"] in known:
                    param["schema"] = {"type": "string", "enum": known[param["name"]]}
    return doc


def without(doc: dict[str, Any], excluded: dict[tuple[str, str], str]) -> dict[str, Any]:
    """``doc`` less the ``excluded`` operations (and paths left with none)."""
    doc = copy.deepcopy(doc)
    for method, path in excluded:
        doc["paths"].get(path, {}).pop(method.lower(), None)
    doc["paths"] = {path: item for path, item in doc["paths"].items()
                    if any(key in item for key in ("get", "post", "put", "patch", "delete"))}
    return doc
