"""A job's state and a node's report are closed enums on the wire: the JSON keeps its strings,
the converter refuses any other string with the list of those it takes, and the OpenAPI
document lists them."""

from __future__ import annotations

import json

import attrs
import pytest

from gpuplaned.http import openapi
from gpuplaned.protocol.agent import FRAMES, JobStatus
from gpuplaned.protocol.converter import FieldInvalid, structure, unstructure
from gpuplaned.protocol.errors import ApiError
from gpuplaned.protocol.job_states import JobState, NodeReport
from gpuplaned.protocol.job_wire import Job


@pytest.mark.parametrize("report", list(NodeReport))
def test_a_job_status_frame_round_trips_each_report_as_its_string(report):
    frame = FRAMES.structure({"type": "job_status", "job_id": "job_1", "attempt": 1, "status": report.value})
    assert frame.status is report
    wire = FRAMES.unstructure(frame)
    assert wire["status"] == report.value and type(wire["status"]) is str
    assert json.loads(json.dumps(wire))["status"] == report.value


def test_a_job_status_frame_with_an_unknown_report_is_refused_naming_the_reports():
    with pytest.raises(FieldInvalid) as bad:
        FRAMES.structure({"type": "job_status", "job_id": "job_1", "attempt": 1, "status": "EXPLODED"})
    assert bad.value.field == "status"
    assert bad.value.message == ("must be one of RUNNING, SUCCEEDED, FAILED, CANCELLED, LOST, REQUEUE, WAITING, "
                                 "got the string 'EXPLODED'")
    with pytest.raises(ValueError, match="'EXPLODED' is not a valid NodeReport"):
        JobStatus("job_1", 1, "EXPLODED")  # nor can the node's own code make one


def _job(**fields):
    wire = {"id": "job_1", "name": "j", "type": "TRAIN", "status": "LOST", "priority": 0, "command": ["true"],
            "cwd": "/", "env": {}, "gpu": 1, "labels": [], "node": None, "node_id": "node_1", "attempt": 1,
            "max_attempts": 1, "timeout_s": None, "stop_grace_s": 10.0, "run_id": "run_1", "gpu_indexes": [0],
            "created_at": 1, "started_at": 2, "finished_at": None, "exit_code": None, "failure_reason": "LOST",
            "failure_message": None, "cancel_requested": False, "retention": None, "evaluate": None}
    return {**wire, **fields}


def test_a_jobs_status_is_a_job_state_and_its_json_the_same_string():
    job = structure(_job(), Job)
    assert job.status is JobState.LOST
    assert unstructure(job)["status"] == "LOST" and type(unstructure(job)["status"]) is str
    assert attrs.evolve(job, status="QUEUED").status is JobState.QUEUED  # the store's strings become states


def test_a_job_with_an_unknown_status_is_refused():
    with pytest.raises(ApiError) as bad:
        structure(_job(status="lost"), Job)
    assert bad.value.details == {"field": "status"}
    assert bad.value.message == ("status: must be one of CREATED, QUEUED, DISPATCHING, RUNNING, SUCCEEDED, FAILED, "
                                 "CANCELLED, LOST, got the string 'lost'")


def test_the_openapi_document_lists_the_job_states():
    schema = openapi.document()["components"]["schemas"]["Job"]["properties"]["status"]
    assert schema["enum"] == [state.value for state in JobState]
    assert schema["type"] == "string"
