"""Reply types live in protocol/ (issue 30 item 2): the services build them, the routes and MCP's
tools pass them on, and MCP takes no shape, and no schema generator, from the http layer."""

from __future__ import annotations

import json
import math

import attrs
import layerkit

from gpuplaned import tsdb
from gpuplaned.protocol import converter
from gpuplaned.protocol.checkpoint_replies import checkpoint_of
from gpuplaned.protocol.run_replies import HealthWarning, RunMetrics
from gpuplaned.protocol.schemas import SchemaSet
from gpuplaned.protocol.session_replies import BatchReply, SessionEnvReply
from gpuplaned.service.api.series_query import json_finite, series_columns
from gpuplaned.store.checkpoint_rows import Checkpoint as StoredCheckpoint
from gpuplaned.store.database import open_writer
from gpuplaned.store.event_rows import EventRow

# The one import of the http layer MCP still has: the front's connection vouching (its ASGI
# mount shares the TCP front's per-connection state), which is not a reply shape.
STILL_IMPORTED = {("gpuplaned.mcp.asgi", "gpuplaned.http.connections")}


def test_mcp_takes_no_reply_or_schema_from_the_http_layer():
    modules = layerkit.find_modules(layerkit.package_roots())
    edges = {(imp.source, imp.target) for imp in layerkit.read_imports(modules)
             if imp.source.startswith("gpuplaned.mcp") and imp.target.startswith("gpuplaned.http")}
    assert edges <= STILL_IMPORTED, edges - STILL_IMPORTED


def test_the_schema_generator_names_a_class_by_its_api_word():
    schemas = SchemaSet()
    assert schemas.ref(EventRow) == {"$ref": "#/components/schemas/Event"}
    assert "Event" in schemas.components and "EventRow" not in schemas.components


def test_a_batch_reply_is_written_as_the_dict_it_replaces():
    # The SDK and the agent's replay read these keys; the order is the one the hand-built dict had.
    assert list(converter.unstructure(BatchReply(seq=3, duplicate=False, points=12)).items()) == \
        [("seq", 3), ("duplicate", False), ("points", 12)]
    assert converter.unstructure(SessionEnvReply(stored=False)) == {"stored": False}


def test_a_checkpoint_carries_a_lists_fields_only_in_a_list():
    row = StoredCheckpoint("ck_1", "run_a", 5, None, "/w/a.pt", 10, {}, 1000)
    alone = converter.unstructure(checkpoint_of(row))  # a verify's, a get's
    assert list(alone) == [a.name for a in attrs.fields(StoredCheckpoint)]
    listed = converter.unstructure(checkpoint_of(row, metric_value=None, best=False, metrics=[], evaluations=[]))
    assert list(listed) == [*alone, "metric_value", "best", "metrics", "evaluations"]
    assert listed["metric_value"] is None  # listed, with no value: null, not left out


def test_a_runs_metrics_are_written_as_the_dict_they_replace(tmp_path):
    """The columns through ``Buckets``: the same JSON, byte for byte, NaN and infinities null."""
    conn = open_writer(tmp_path / "g.db")
    try:
        conn.execute("INSERT INTO runs (id, source, status, created_at) VALUES ('run_a', 'sdk', 'RUNNING', 1)")
        tsdb.ingest(conn, "run", "run_a", {"loss": {"step": [1, 2, 3, 4], "ts": [1, 2, 3, 4],
                                                    "value": [0.5, math.nan, math.inf, 0.25]}}, source="s", seq=1)
        result = tsdb.query_series(conn, "run", "run_a", ["loss", "absent"], None, None, 2, "step")
    finally:
        conn.close()
    reply = RunMetrics(run_id="run_a", x_axis="step", **series_columns(result))
    before = {"run_id": "run_a", "x_axis": "step", **json_finite(result)}  # what query_metrics built by hand
    assert json.dumps(converter.unstructure(reply)) == json.dumps(before)
    assert None in converter.unstructure(reply)["series"]["loss"]["max"]  # the infinite bucket: null


def test_a_health_warning_writes_only_the_words_its_rule_has():
    nan = HealthWarning(type="LOSS_NAN", severity="critical", metric="loss", message="loss went NaN or infinite")
    stall = HealthWarning(type="RUN_STALLED", severity="warning", job_id="job_1", message="no metric, no line")
    assert set(converter.unstructure(nan)) == {"type", "severity", "metric", "message"}
    assert set(converter.unstructure(stall)) == {"type", "severity", "job_id", "message"}
