"""Reply types live in protocol/ (issue 30 item 2): the services build them, the routes and MCP's
tools pass them on, and MCP takes no shape, and no schema generator, from the http layer."""

from __future__ import annotations

import attrs
import layerkit

from gpuplaned.protocol import converter
from gpuplaned.protocol.checkpoint_replies import checkpoint_of
from gpuplaned.protocol.schemas import SchemaSet
from gpuplaned.protocol.session_replies import BatchReply, SessionEnvReply
from gpuplaned.store.checkpoint_rows import Checkpoint as StoredCheckpoint
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
