"""``field``: one declaration of a field's bounds makes both its validator and its JSON Schema."""

from __future__ import annotations

import attrs
import pytest

from gpuplaned.http import openapi
from gpuplaned.protocol.converter import structure
from gpuplaned.protocol.errors import ApiError
from gpuplaned.protocol.fields import UNSET, field, schema_of
from gpuplaned.protocol.job_wire import JobSubmit, to_spec


@attrs.frozen(kw_only=True)
class Body:
    count: int = field(default=1, minimum=0, maximum=10, description="how many")
    tags: list[str] = field(factory=list, max_items=2, items={"min_length": 1, "pattern": "^[a-z{}]+$"})
    note: str = field(default=UNSET, message="a note, not {value!r}", enum=("a", "b"))


def refused(data: dict) -> ApiError:
    with pytest.raises(ApiError) as caught:
        structure(data, Body)
    return caught.value


def test_the_validator_checks_what_the_schema_states():
    assert schema_of(attrs.fields(Body).count) == {"description": "how many", "minimum": 0, "maximum": 10,
                                                   "default": 1}
    assert schema_of(attrs.fields(Body).tags)["items"] == {"minLength": 1, "pattern": "^[a-z{}]+$"}
    assert structure({"count": 10, "tags": ["x{"]}, Body) == Body(count=10, tags=["x{"])
    assert refused({"count": 11}).message == "count: must be between 0 and 10, got 11"
    assert refused({"count": True}).details == {"field": "count"}  # strict: a boolean is no integer
    assert refused({"tags": ["a", ""]}).details == {"field": "tags"}
    assert refused({"tags": ["a", "b", "c"]}).details == {"field": "tags"}
    assert refused({"note": "c"}).message == "note: a note, not 'c'"
    assert structure({}, Body).note is UNSET


def test_a_job_submission_keeps_its_aliases_and_defaults(tmp_path):
    spec = to_spec(structure({"command": ["true"], "dir": str(tmp_path), "gpus": 0, "retry": 2}, JobSubmit))
    assert (spec.cwd, spec.gpu, spec.max_attempts, spec.name, spec.stop_grace_s) == (str(tmp_path), 0, 3, "true", 10.0)
    with pytest.raises(ApiError, match="cwd: the working directory is required"):
        structure({"command": ["true"]}, JobSubmit)


def test_the_document_states_the_declared_bounds():
    submit = openapi.document()["components"]["schemas"]["JobSubmit"]
    assert submit["properties"]["gpu"] == {"type": "integer", "minimum": 0, "maximum": 64, "default": 1,
                                           "description": "GPUs to reserve; 0 runs on a CPU slot"}
    assert submit["required"] == ["command"] and submit["additionalProperties"] is False
