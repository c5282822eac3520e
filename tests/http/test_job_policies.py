"""A job's checkpoint policies (retention, evaluate) on a real daemon: kept with the job and
shown on it, refused with the field named when malformed; and in a job file."""

from __future__ import annotations

import pytest
from gpuplanectl.submission import JobFileError, load_job_file
from helpers import Jobs

from gpuplaned.protocol.errors import ApiError

pytestmark = pytest.mark.e2e

EVALUATE = {"every": "best", "command": ["python", "eval.py", "{checkpoint}"]}


def test_policies_are_kept_with_the_job(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    job = jobs.submit(["true"], gpu=0, retention={"keep_best": 2}, evaluate=EVALUATE)
    for shown in (job, jobs.get(job["id"])):
        assert shown["retention"] == {"keep_best": 2, "keep_last": 1}
        assert shown["evaluate"] == EVALUATE
    plain = jobs.submit(["true"], gpu=0)
    assert (plain["retention"], plain["evaluate"]) == (None, None)


MALFORMED = [
    ({"retention": 3}, "retention", "must be an object"),
    ({"retention": {"keep_best": 0, "keep_last": 0}}, "retention.keep_last", "delete every checkpoint"),
    ({"retention": {"keep_best": -1}}, "retention.keep_best", "between 0 and 10000"),
    ({"retention": {"keep": 1}}, "retention.keep", "unknown field"),
    ({"evaluate": {"every": "sometimes", "command": ["x"]}}, "evaluate.every", "best, each"),
    ({"evaluate": {"every": "each", "command": []}}, "evaluate.command", "at least 1"),
    ({"evaluate": {"every": "each"}}, "evaluate.command", "required"),
]


def test_a_malformed_policy_is_refused_naming_its_field(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    for policies, field, words in MALFORMED:
        with pytest.raises(ApiError) as refused:
            jobs.submit(["true"], gpu=0, **policies)
        assert refused.value.details["field"] == field, policies
        assert words in refused.value.message, policies
    assert jobs.client.get("/api/v1/jobs")["jobs"] == []


def test_a_job_file_carries_policies_and_names_a_bad_one(tmp_path):
    job_file = tmp_path / "job.toml"
    job_file.write_text('command = "python train.py"\nretention = {keep_best = 1, keep_last = 3}\n'
                        'evaluate = {every = "each", command = ["python", "eval.py", "{checkpoint}"]}\n')
    body = load_job_file(job_file)
    assert body["retention"] == {"keep_best": 1, "keep_last": 3}
    assert body["evaluate"]["every"] == "each"
    job_file.write_text('command = "true"\nevaluate = {every = "x", command = ["e"]}\n')
    with pytest.raises(JobFileError) as bad:
        load_job_file(job_file)
    assert str(bad.value).startswith(f"{job_file}: evaluate.every: must be one of best, each")
