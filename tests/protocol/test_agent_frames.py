"""The node frames: one closed family tagged on ``type``, read and written by the one converter."""

from __future__ import annotations

import json

import attrs
import pytest

from gpuplaned.protocol.agent import (
    ArrayTask, SweepThrottle,
    FRAMES, ActiveJob, Cancel, CheckpointsFound, Dispatch, FoundCheckpoint, FrameError, GpuInfo, Hello, HelloErr, HelloOk, JobSpecWire, JobStatus,
    LogChunk, LogFollow, LogLines, LogOffsets, NodeEvent, NodeSnapshot, Ping, Pong, SysMetrics,
)
from gpuplaned.protocol.converter import FieldInvalid
from gpuplaned.protocol.tb_frames import TbCursor, TbCursors, TbFile, TbFileState, TbPoints, TbProblem, TbRewind, TbSeries, TbStored
from gpuplaned.protocol.agent import NodeEvents, RECORD_BODIES, REPLY_BODIES, REQUEST_BODIES
from gpuplaned.protocol.uplink_frames import (
    Ack, FrameFault, Goodbye, Heartbeat, HeartbeatOk, LogData, LogRead, Record, Records, Reply, Request, SessionCall, SessionReply,
    Skip,
)

SPEC = JobSpecWire("job_a", "run_a", 1, "train", ("python", "t.py"), "/w", {"A": "1"}, (0, 1), None, 10.0)
FRAMES_SEEN = [
    Hello("n1", "0.1.0", (GpuInfo(0, "H100", 81559, "GPU-1"),), ("big",), 3, "nvml", {"cpu_count": 8}),
    HelloOk("nd_1", (ActiveJob("job_a", 1, "run_a", True, (0,)),)), HelloErr("no"), Ping(), Pong("1.0"),
    FrameError("bad"), Dispatch(SPEC), Cancel("job_a", 1), LogFollow("job_a", 1, True),
    Dispatch(attrs.evolve(SPEC, gpu_indexes=(), gpus=1, array=ArrayTask("swp_1", 3, 2))), SweepThrottle("swp_1", 3),
    JobStatus("job_a", 1, "FAILED", pid=5, exit_code=1, failure_reason="OOM", at_ms=9),
    NodeSnapshot(5, "fake", ({"index": 0},), {"cpu": 1.5}, (), ("DISK_LOW",), False, (1,)),
    SysMetrics(3, (("gpu.0.util", 1000, 55.0), ("host.cpu", 1000, 3.0))),
    NodeEvent("DISK_LOW", "critical", "4% free", 7, None, {"disk": "data"}),
    LogLines(2000, (LogChunk("job_a", 1, "stdout", 0, 6, ((0, "hello"),), True),), (("job_a", 1),)),
    LogOffsets((("job_a", 1),), (("job_a", 1, "stdout", 6),)),
    CheckpointsFound("job_a", 1, "run_a", (FoundCheckpoint("/w/checkpoints/step_5.pt", "file", 10, 9, "sha1:" + "0" * 40, 5),
                                           FoundCheckpoint("/w/out/checkpoint-9", "hf", 20, 9, "sha1:" + "a" * 40, 9, 0.5))),
    TbPoints("job_a", 1, "run_a", (TbFile("/w/runs/events.out.tfevents.1.h", TbCursor(7, 40), TbCursor(7, 90),
                                          (TbSeries("loss", "AQAAAAAAAAA=", "AQAAAAAAAAA=", "AAAAAAAA+H8="),),
                                          (("loss", 5),), (TbRewind("loss", "events.out.tfevents.1.h", "/w/runs", 5),),
                                          (TbProblem(40, "bad data crc"),)),)),
    TbStored("job_a", 1, ("/w/runs/events.out.tfevents.1.h",)),
    TbCursors("job_a", 1, (TbFileState("/w/runs/events.out.tfevents.1.h", TbCursor(7, 90)),)),
    Record("status", 4, RECORD_BODIES.unstructure(JobStatus("job_a", 1, "RUNNING", pid=5))),
    Records("metrics", (5, 7), ({"type": "sys_metrics", "seq": 1, "points": [["cpu/util_pct", 1, 2.0]]},
                                {"type": "sys_metrics", "seq": 2, "points": []})),
    Ack("logs", 12), Request(3, REQUEST_BODIES.unstructure(LogRead("job_a", 1, "stdout", 0, 65536))),
    Reply(3, REPLY_BODIES.unstructure(LogData("job_a", 1, "stdout", 0, "aGVsbG8K", 6, False))),
    Reply(4, error=FrameFault("not_found", "no job job_b")), Heartbeat(1000, 5, 900, 990), HeartbeatOk(1001), Goodbye(),
    Skip("metrics", 4, "the spool dropped them"),
    HelloOk("nd_1", (), {"status": 4, "logs": 12}, 1001, 25.0),
    Hello("n2", "0.1.0", (), agent_id="ag_1", ts_ms=1000),
]
BODIES = [(RECORD_BODIES, NodeEvents((NodeEvent("DISK_LOW", "critical", "4% free", 7),))),
          (REQUEST_BODIES, SessionCall("POST", "/api/v1/sessions/s1/batches", {"seq": 1})),
          (REPLY_BODIES, SessionReply(200, {"stored": 3}))]


@pytest.mark.parametrize("union, body", BODIES, ids=lambda b: type(b).__name__)
def test_every_envelope_body_survives_json_with_its_tag(union, body):
    wire = json.loads(json.dumps(union.unstructure(body)))
    assert union.structure(wire) == body


@pytest.mark.parametrize("frame", FRAMES_SEEN, ids=lambda f: type(f).__name__)
def test_every_frame_survives_json_with_its_type_tag(frame):
    wire = json.loads(json.dumps(FRAMES.unstructure(frame)))
    assert wire["type"] == FRAMES.tag_of(frame)
    assert FRAMES.structure(wire) == frame


def test_every_frame_class_has_a_tag():
    assert {type(f) for f in FRAMES_SEEN} == set(FRAMES.tags.values())


def test_an_events_own_type_travels_beside_the_frames_tag():
    wire = FRAMES.unstructure(NodeEvent("GPU_LOST", "warning", "gone", 1))
    assert (wire["type"], wire["event_type"]) == ("event", "GPU_LOST")


@pytest.mark.parametrize("data, field, words", [
    ([], "", "must be an object"),
    ({"node_name": "n"}, "type", "must be one of hello, "),
    ({"type": "helo"}, "type", "got the string 'helo'"),
    ({"type": "hello", "node_name": 5, "agent_version": "1", "gpus": []}, "node_name", "must be a string"),
    ({"type": "hello", "node_name": "n", "agent_version": "1"}, "gpus", "is required"),
    ({"type": "hello", "node_name": "n", "agent_version": "1", "gpus": [{"index": "0", "model": "m", "memory_mb": 1}]},
     "gpus.0.index", "must be an integer"),
    ({"type": "cancel", "job_id": "j", "attempt": 1, "colour": "red"}, "colour", "unknown field"),
    ({"type": "job_status", "job_id": "j", "attempt": True, "status": "RUNNING"}, "attempt", "must be an integer"),
    ({"type": "sys_metrics", "seq": 1, "points": [["a", 1]]}, "points", "must hold 3 items"),
    ({"type": "checkpoints_found", "job_id": "j", "attempt": 1, "run_id": "r", "checkpoints": [
        {"path": "relative.pt", "kind": "file", "size_bytes": 1, "mtime_ms": 1, "fingerprint": "sha1:" + "0" * 40}]},
     "checkpoints.0.path", "must match"),
])
def test_a_bad_frame_names_the_field_at_fault(data, field, words):
    with pytest.raises(FieldInvalid) as caught:
        FRAMES.structure(data)
    assert caught.value.field.startswith(field) and words in caught.value.message


def test_a_log_read_names_a_job_folder_not_a_path():
    """The agent reads ``<home>/jobs/<job_id>/...``: a job id that climbs out is refused."""
    for job_id in ("../../etc", "job/x", ".."):
        with pytest.raises(FieldInvalid) as caught:
            REQUEST_BODIES.structure({"type": "log_read", "job_id": job_id, "attempt": 1, "stream": "stdout",
                                      "offset": 0, "limit": 10})
        assert caught.value.field == "job_id" and "must match" in caught.value.message
    ok = REQUEST_BODIES.structure({"type": "log_read", "job_id": "job_01JD0000000000000000000000", "attempt": 1,
                                   "stream": "stdout", "offset": 0, "limit": 10})
    assert isinstance(ok, LogRead)
