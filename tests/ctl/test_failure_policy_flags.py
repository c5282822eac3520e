"""Failure policies from submit flags and job files (no daemon: the body that would be sent)."""

from __future__ import annotations

import pytest
from gpuplanectl.submission import JobFileError, build_body, load_job_file


def test_flags_make_the_policies():
    body = build_body({"on_oom": {"retry": 1, "env": {"A": "half"}}},
                      {"command": ["true"], "on_oom_retry": 3, "on_oom_half": ["BATCH"], "on_nan": "stop",
                       "on_lost": "requeue", "on_preempted": "last"}, environ={}, cwd="/w")
    assert body["on_oom"] == {"retry": 3, "env": {"A": "half", "BATCH": "half"}}
    assert (body["on_nan"], body["on_lost"], body["on_preempted"]) == ("stop", "requeue", {"resume_from": "last"})
    assert "on_oom" not in build_body({}, {"command": ["true"]}, environ={}, cwd="/w")


def test_a_job_file_carries_failure_policies(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('command = ["true"]\non_nan = "stop"\non_oom = {retry = 2, env = {BATCH_SIZE = "half"}}\n'
                    'on_stalled = {after = "20m", action = "restart"}\non_preempted = {resume_from = "last"}\n')
    body = load_job_file(path)
    assert body["on_oom"] == {"retry": 2, "env": {"BATCH_SIZE": "half"}} and body["on_nan"] == "stop"
    assert body["on_stalled"] == {"after": "20m", "action": "restart"}


@pytest.mark.parametrize(("text", "key", "message"), [
    ('on_nan = "go"\n', "on_nan", "must be one of stop"),
    ('on_oom = {env = {B = "double"}}\n', "on_oom.env", 'B: the only rule is "half"'),
    ('on_stalled = {after = "soon"}\n', "on_stalled.after", "must be a duration"),
    ('on_stalled = {action = "panic"}\n', "on_stalled.action", "must be one of restart, stop, notify"),
])
def test_a_bad_failure_policy_in_a_file_names_its_key(tmp_path, text, key, message):
    path = tmp_path / "job.toml"
    path.write_text('command = ["true"]\n' + text)
    with pytest.raises(JobFileError) as caught:
        load_job_file(path)
    assert caught.value.key == key
    assert f"{key}: {message}" in str(caught.value)
