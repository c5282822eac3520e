"""The OpenAPI document: the same routes as the app, valid OpenAPI 3.1, and true to real replies."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import jsonschema
from gpuplanectl.client import SseDecoder, SseEvent
from helpers import wait_for
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from schemathesis.specs.openapi.definitions import OPENAPI_31
from unixhttp import BASE_URL

from gpuplaned.http import openapi
from gpuplaned.http.app import create_app
from gpuplaned.protocol.version import API_VERSION, API_VERSION_HEADER

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
_CONVERTER = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")
DOC_URI = "urn:gpuplane:openapi"


def app_routes() -> set[tuple[str, str]]:
    """(METHOD, path template) for every HTTP route of the app under /api/v1."""
    app, _ = create_app(SimpleNamespace())
    routes = set()
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/v1/") or getattr(rule, "websocket", False):
            continue  # the agents' WebSocket is no OpenAPI operation
        path = _CONVERTER.sub(r"{\1}", rule.rule)
        routes |= {(m, path) for m in rule.methods - {"HEAD", "OPTIONS"}}
    return routes


def doc_routes(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(m.upper(), path) for path, item in doc["paths"].items() for m in item if m in METHODS}


def test_every_route_is_documented_and_nothing_else():
    routes, documented = app_routes(), doc_routes(openapi.document())
    assert ("GET", "/api/v1/jobs/{job_id}") in routes  # the conversion itself works
    assert sorted(routes - documented) == [], "routes missing from gpuplaned/http/openapi.py"
    assert sorted(documented - routes) == [], "documented routes the app does not have"


def test_the_document_alone_knows_every_route():
    """``openapi.document()`` imports every routes module itself: a fresh interpreter that never
    built the app (``gpuplanectl``, a doc build) gets the same paths."""
    alone = subprocess.run([sys.executable, "-c", "import json; from gpuplaned.http import openapi; "
                            "print(json.dumps(sorted(openapi.document()['paths'])))"],
                           capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(alone.stdout) == sorted(openapi.document()["paths"])


def _walk(node: Any, where: str = "#"):
    if isinstance(node, dict):
        yield where, node
        for key, value in node.items():
            yield from _walk(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{where}/{i}")


def _pointer(doc: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = doc
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def test_document_is_valid_openapi_31():
    doc = openapi.document()
    # The OpenAPI 3.1 schema (OAI/OpenAPI-Specification schemas/v3.1) as schemathesis ships it.
    jsonschema.Draft202012Validator(OPENAPI_31, format_checker=jsonschema.FormatChecker()).validate(doc)
    assert doc["openapi"].startswith("3.1.")
    # That schema leaves Schema Objects unchecked; each must be a valid JSON Schema 2020-12.
    for schema in doc["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)
    for where, node in _walk(doc):
        ref = node.get("$ref")
        if isinstance(ref, str):
            assert _pointer(doc, ref) is not None, f"{where}: {ref} does not resolve"
    operation_ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert len(operation_ids) == len(set(operation_ids))
    for path, item in doc["paths"].items():
        in_path = set(re.findall(r"{([^}]+)}", path))
        for method, op in item.items():
            params = [_pointer(doc, p["$ref"]) if "$ref" in p else p for p in op.get("parameters", [])]
            declared = {p["name"] for p in params if p["in"] == "path"}
            assert declared == in_path, f"{method.upper()} {path}: path parameters {declared} != {in_path}"
            assert all(p["required"] for p in params if p["in"] == "path")
            assert any(code.startswith("2") for code in op["responses"]), f"{method.upper()} {path}"
            assert {"500", "503"} <= set(op["responses"])
    bearer = doc["components"]["securitySchemes"]["bearer"]
    assert (bearer["type"], bearer["scheme"]) == ("http", "bearer") and doc["security"] == [{"bearer": []}]
    assert "Unix socket needs no authentication" in doc["info"]["description"]


class Checker:
    """Validates real replies against the operation's documented response."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        resource = Resource.from_contents(doc, default_specification=DRAFT202012)
        self.registry = Registry().with_resource(DOC_URI, resource)

    def check(self, reply, method: str, template: str, status: int, count: int | None = None) -> Any:
        """Assert ``reply`` is a documented ``status`` whose body fits its schema; returns the body.

        An event stream's events are returned instead, only its first ``count`` for an endless one.
        """
        assert reply.status_code == status, reply.text
        assert reply.headers[API_VERSION_HEADER] == str(API_VERSION)
        found = self.doc["paths"][template][method.lower()]["responses"].get(str(status))
        assert found is not None, f"{method} {template}: {status} is not documented"
        base = found.get("$ref") or "/".join(
            ["#/paths", _escape(template), method.lower(), "responses", str(status)])
        documented = _pointer(self.doc, base)
        media_type = reply.headers["Content-Type"].split(";")[0]
        assert media_type in documented["content"], f"{method} {template}: {media_type} is not documented"
        schema_uri = f"{DOC_URI}{base}/content/{_escape(media_type)}/schema"
        if media_type == "text/event-stream":
            return self.check_events(reply.iter_lines(decode_unicode=True), schema_uri, count)
        body = reply.json()
        self.validate(body, schema_uri)
        return body

    def validate(self, value: Any, uri: str) -> None:
        jsonschema.Draft202012Validator({"$ref": uri}, registry=self.registry).validate(value)

    def check_events(self, lines: Iterable[str], uri: str, count: int | None) -> list[SseEvent]:
        """Each event against the per-event schema, and each JSON payload against its contentSchema."""
        while "$ref" in (schema := self.lookup(uri)):
            uri = DOC_URI + schema["$ref"]
        branches = [(f"{uri}/oneOf/{i}", b) for i, b in enumerate(schema["oneOf"])] if "oneOf" in schema else [
            (uri, schema)]
        decoder, events = SseDecoder(), []
        for line in lines:
            event = decoder.feed(line)
            if event is None:
                continue
            events.append(event)
            self.validate({"event": event.event, "data": event.data, **({"id": event.id} if event.id else {})}, uri)
            for where, branch in branches:
                if event.event in branch["properties"]["event"]["enum"] and "contentSchema" in branch["properties"][
                        "data"]:
                    self.validate(json.loads(event.data), f"{where}/properties/data/contentSchema")
            if len(events) == count:
                break
        return events

    def lookup(self, uri: str) -> Any:
        return self.registry.resolver().lookup(uri).contents


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def test_real_replies_match_their_schemas(api_jobs, api_session):
    check = Checker(openapi.document()).check
    s, url = api_session, BASE_URL + "/api/v1"

    served = check(s.get(f"{url}/openapi.json"), "GET", "/api/v1/openapi.json", 200)
    assert served == json.loads(json.dumps(openapi.document()))

    check(s.get(f"{url}/daemon"), "GET", "/api/v1/daemon", 200)
    actors = check(s.get(f"{url}/actors"), "GET", "/api/v1/actors", 200)["actors"]
    check(s.get(f"{url}/actors/{actors[0]['name']}"), "GET", "/api/v1/actors/{name}", 200)
    check(s.get(f"{url}/actors/nobody"), "GET", "/api/v1/actors/{name}", 404)
    check(s.post(f"{url}/actors/nobody/start"), "POST", "/api/v1/actors/{name}/{verb}", 404)

    workdir = str(api_jobs.workdir)
    job = check(s.post(f"{url}/jobs", json={"command": ["sh", "-c", "echo out; echo err >&2"], "cwd": workdir,
                                            "gpu": 0, "env": {"X": "1"}, "timeout_s": 30}),
                "POST", "/api/v1/jobs", 201)["job"]
    hog = check(s.post(f"{url}/jobs", json={"command": ["sleep", "30"], "cwd": workdir, "gpu": 2, "type": "CUSTOM"}),
                "POST", "/api/v1/jobs", 201)["job"]
    api_jobs.wait(hog["id"], "RUNNING")
    queued = check(s.post(f"{url}/jobs", json={"command": ["true"], "dir": workdir, "gpus": 1, "retry": 1}),
                   "POST", "/api/v1/jobs", 201)["job"]
    assert queued["status"] == "QUEUED"
    check(s.post(f"{url}/jobs", json={"command": "true", "cwd": workdir}), "POST", "/api/v1/jobs", 400)
    check(s.post(f"{url}/jobs", data=b"{"), "POST", "/api/v1/jobs", 400)
    # The server answers 413 without reading the rest of the body: that connection is done.
    check(s.post(f"{url}/jobs", data=b"x" * ((1 << 20) + 1), headers={"Connection": "close"}),
          "POST", "/api/v1/jobs", 413)
    api_jobs.wait(job["id"], "SUCCEEDED")
    check(s.get(f"{url}/jobs", params={"status": "SUCCEEDED,queued", "limit": 5}), "GET", "/api/v1/jobs", 200)
    check(s.get(f"{url}/jobs", params={"limit": 0}), "GET", "/api/v1/jobs", 400)
    check(s.get(f"{url}/jobs/{job['id']}"), "GET", "/api/v1/jobs/{job_id}", 200)
    check(s.get(f"{url}/jobs/job_nothing"), "GET", "/api/v1/jobs/{job_id}", 404)
    logs = "/api/v1/jobs/{job_id}/logs"
    page = check(s.get(f"{url}/jobs/{job['id']}/logs"), "GET", logs, 200)
    assert [line["line"] for line in page["lines"]] == ["out"]
    check(s.get(f"{url}/jobs/{job['id']}/logs", params={"stream": "stderr", "offset": 0}), "GET", logs, 200)
    check(s.get(f"{url}/jobs/{queued['id']}/logs"), "GET", logs, 200)
    check(s.get(f"{url}/jobs/{job['id']}/logs", params={"stream": "both"}), "GET", logs, 400)
    stream = check(s.get(f"{url}/jobs/{job['id']}/logs/stream"), "GET", logs + "/stream", 200)
    assert [(e.event, e.data) for e in stream][:-1] == [("stdout", "out"), ("stderr", "err")]
    assert stream[-1].event == "end" and json.loads(stream[-1].data)["status"] == "SUCCEEDED"
    check(s.get(f"{url}/jobs/{job['id']}/logs/stream", headers={"Last-Event-ID": "x"}), "GET", logs + "/stream", 400)
    check(s.post(f"{url}/jobs/{job['id']}/cancel"), "POST", "/api/v1/jobs/{job_id}/cancel", 409)
    check(s.post(f"{url}/jobs/{queued['id']}/retry"), "POST", "/api/v1/jobs/{job_id}/retry", 409)
    check(s.post(f"{url}/jobs/{queued['id']}/cancel"), "POST", "/api/v1/jobs/{job_id}/cancel", 200)
    check(s.post(f"{url}/jobs/{queued['id']}/retry"), "POST", "/api/v1/jobs/{job_id}/retry", 200)
    check(s.post(f"{url}/jobs/{hog['id']}/cancel"), "POST", "/api/v1/jobs/{job_id}/cancel", 200)

    runs = check(s.get(f"{url}/runs", params={"job_id": job["id"], "status": "succeeded"}), "GET", "/api/v1/runs",
                 200)["runs"]
    check(s.get(f"{url}/runs/{runs[0]['id']}"), "GET", "/api/v1/runs/{run_id}", 200)
    check(s.get(f"{url}/runs/run_nothing"), "GET", "/api/v1/runs/{run_id}", 404)
    check(s.get(f"{url}/runs", params={"cursor": "nope"}), "GET", "/api/v1/runs", 400)
    page = check(s.get(f"{url}/jobs", params={"limit": 1}), "GET", "/api/v1/jobs", 200)
    check(s.get(f"{url}/jobs", params={"limit": 1, "cursor": page["next_cursor"]}), "GET", "/api/v1/jobs", 200)

    again = {"command": ["true"], "cwd": workdir, "gpu": 0}
    first = check(s.post(f"{url}/jobs", json=again, headers={"Idempotency-Key": "k1"}), "POST", "/api/v1/jobs", 201)
    replay = s.post(f"{url}/jobs", json=again, headers={"Idempotency-Key": "k1"})
    assert check(replay, "POST", "/api/v1/jobs", 201) == first and replay.headers["Idempotent-Replayed"] == "true"
    check(s.post(f"{url}/jobs", json={**again, "gpu": 1}, headers={"Idempotency-Key": "k1"}), "POST",
          "/api/v1/jobs", 409)

    # Node readings arrive with the monitor's first sample.
    nodes = wait_for(lambda: [n for n in s.get(f"{url}/nodes").json()["nodes"] if n["snapshot"]],
                     what="a node snapshot")
    check(s.get(f"{url}/nodes"), "GET", "/api/v1/nodes", 200)
    check(s.get(f"{url}/nodes/{nodes[0]['name']}"), "GET", "/api/v1/nodes/{node}", 200)
    check(s.get(f"{url}/nodes/nowhere"), "GET", "/api/v1/nodes/{node}", 404)
    with s.get(f"{url}/nodes/{nodes[0]['id']}/stream", stream=True) as reply:
        snapshot = check(reply, "GET", "/api/v1/nodes/{node}/stream", 200, count=1)[0]
    assert snapshot.event == "snapshot" and json.loads(snapshot.data)["gpus"]
    check(s.get(f"{url}/nodes/nowhere/stream"), "GET", "/api/v1/nodes/{node}/stream", 404)
    metrics = "/api/v1/nodes/{node}/metrics"
    check(s.get(f"{url}/nodes/{nodes[0]['id']}/metrics", params={"window": "5m", "points": 10}), "GET", metrics, 200)
    check(s.get(f"{url}/nodes/{nodes[0]['id']}/metrics", params={"names": "gpu0.*,nothing.here"}), "GET", metrics,
          200)
    check(s.get(f"{url}/nodes/{nodes[0]['id']}/metrics", params={"window": "5y"}), "GET", metrics, 400)
    check(s.get(f"{url}/events", params={"severity": "info,WARNING", "limit": 3}), "GET", "/api/v1/events", 200)
    check(s.get(f"{url}/events", params={"severity": "loud"}), "GET", "/api/v1/events", 400)
    check(s.get(f"{url}/events/stream", params={"type": "no-such"}), "GET", "/api/v1/events/stream", 400)


def test_token_replies_match_their_schemas(api_session):
    check = Checker(openapi.document()).check
    s, url = api_session, BASE_URL + "/api/v1/tokens"
    created = check(s.post(url, json={"name": "ci", "scopes": ["read"], "expires_in_s": 60}),
                    "POST", "/api/v1/tokens", 201)
    check(s.post(url, json={"name": "ci", "scopes": ["root"]}), "POST", "/api/v1/tokens", 400)
    check(s.get(url), "GET", "/api/v1/tokens", 200)
    revoke = "/api/v1/tokens/{id_or_name}/revoke"
    assert check(s.post(f"{url}/{created['token']['id']}/revoke"), "POST", revoke, 200)["token"]["revoked_at"]
    check(s.post(f"{url}/nobody/revoke"), "POST", revoke, 404)


def test_import_run_replies_match_their_schemas(api_jobs, api_session, tmp_path):
    import torch
    from torch.utils.tensorboard import SummaryWriter

    check = Checker(openapi.document()).check
    url, route = BASE_URL + "/api/v1/runs/import", "/api/v1/runs/import"
    with SummaryWriter(tmp_path / "tb") as writer:
        writer.add_scalar("loss", 0.5, 1)
    torch.save({"w": torch.zeros(2)}, tmp_path / "tb" / "step_1.pt")
    (tmp_path / "tb" / "stdout.log").write_text("hello\n")
    first = check(api_session.post(url, json={"dir": str(tmp_path / "tb"), "experiment": "e"}), "POST", route, 201)
    assert first["created"] and first["imported"]["checkpoints"] == 1 and first["logs"][0]["lines"] == 1
    again = check(api_session.post(url, json={"dir": str(tmp_path / "tb")}), "POST", route, 201)
    assert not again["created"] and again["run_id"] == first["run_id"]
    check(api_session.post(url, json={"dir": str(tmp_path / "nowhere")}), "POST", route, 400)
    check(api_session.post(url, json={"dir": "relative"}), "POST", route, 400)

    logs, route = f"{BASE_URL}/api/v1/runs/{first['run_id']}/logs", "/api/v1/runs/{run_id}/logs"
    found = check(api_session.get(logs), "GET", route, 200)
    assert [line["line"] for line in found["logs"][0]["page"]["lines"]] == ["hello"]
    (tmp_path / "tb" / "stdout.log").unlink()
    assert check(api_session.get(logs, params={"tail": 1}), "GET", route, 200)["logs"][0]["state"] == "gone"
    check(api_session.get(logs, params={"tail": -1}), "GET", route, 400)
    check(api_session.get(logs, params={"path": "/elsewhere"}), "GET", route, 404)
    check(api_session.get(f"{BASE_URL}/api/v1/runs/run_nothing/logs"), "GET", route, 404)
