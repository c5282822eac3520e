"""A Slurm node's hello (issue 32 item 1): its runner and pooled capacity cross the wire, and a
hello that mixes them up is refused naming the field at fault."""

from __future__ import annotations

import json

import pytest

from gpuplaned.protocol.agent import FRAMES, Dispatch, GpuInfo, Hello, JobSpecWire, PooledCapacity
from gpuplaned.protocol.converter import FieldInvalid
from gpuplaned.service.link.agent_link import read_frame

SLURM_HELLO = {"type": "hello", "node_name": "cluster", "agent_version": "1", "gpus": [], "runner": "slurm",
               "pooled": {"gpus_per_job": 4, "max_jobs": 16}}


def test_a_slurm_hello_and_a_dispatchs_gpu_count_survive_json():
    hello = Hello("cluster", "1", (), runner="slurm", pooled=PooledCapacity(4, 16))
    assert FRAMES.structure(json.loads(json.dumps(FRAMES.unstructure(hello)))) == hello
    assert FRAMES.structure(SLURM_HELLO) == hello
    spec = JobSpecWire("job_a", "run_a", 1, "t", ("true",), "/", {}, (), None, 5.0, gpus=2)
    assert FRAMES.structure(json.loads(json.dumps(FRAMES.unstructure(Dispatch(spec))))).job.gpus == 2


def test_a_local_hello_without_the_new_fields_reads_as_before():
    """An agent from before issue 32 sends neither field: it is a local node with GPU slots."""
    old = {"type": "hello", "node_name": "box", "agent_version": "1",
           "gpus": [{"index": 0, "model": "H100", "memory_mb": 80000}]}
    hello = FRAMES.structure(old)
    assert (hello.runner, hello.pooled, hello.gpus) == ("local", None, (GpuInfo(0, "H100", 80000),))


@pytest.mark.parametrize("change, field, words", [
    ({"runner": "bogus"}, "runner", "must be 'local' or 'slurm', got 'bogus'"),
    ({"runner": 7}, "runner", "must be a string"),
    ({"pooled": None}, "pooled", "required for runner 'slurm'"),
    ({"runner": "local"}, "pooled", "only a node with runner 'slurm' has pooled capacity"),
    ({"pooled": {"gpus_per_job": -1, "max_jobs": 2}}, "pooled.gpus_per_job", "must be 0 or more, got -1"),
    ({"pooled": {"gpus_per_job": 1, "max_jobs": 0}}, "pooled.max_jobs", "must be at least 1, got 0"),
    ({"pooled": {"gpus_per_job": 1, "max_jobs": -3}}, "pooled.max_jobs", "must be at least 1, got -3"),
    ({"pooled": {"gpus_per_job": 1}}, "pooled.max_jobs", "is required"),
    ({"pooled": {"gpus_per_job": "2", "max_jobs": 1}}, "pooled.gpus_per_job", "must be an integer"),
    ({"pooled": {"gpus_per_job": 1, "max_jobs": 1, "nodes": 3}}, "pooled.nodes", "unknown field"),
    ({"gpus": [{"index": 0, "model": "A100", "memory_mb": 1}]}, "gpus", "must be empty for a pooled node"),
])
def test_a_hostile_hello_is_refused_naming_the_field(change, field, words):
    with pytest.raises(FieldInvalid) as caught:
        FRAMES.structure(SLURM_HELLO | change)
    assert (caught.value.field, words in caught.value.message) == (field, True), caught.value.message


def test_the_server_answers_a_bad_slurm_hello_with_its_reason():
    """What the agent link's handshake reads (``read_frame``): a bad hello is answered HelloErr with it."""
    frame = read_frame(json.dumps(SLURM_HELLO | {"runner": "bogus"}))
    assert frame.message == "bad hello: runner: must be 'local' or 'slurm', got 'bogus'"


def test_an_in_memory_hello_is_checked_as_well():
    """The in-memory link (role all) passes Hello objects: they are checked when made."""
    with pytest.raises(FieldInvalid, match="required for runner 'slurm'"):
        Hello("cluster", "1", (), runner="slurm")
    with pytest.raises(FieldInvalid, match="must be 0 or more"):
        PooledCapacity(-2, 1)
