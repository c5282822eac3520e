"""domain/dependencies: when a job's dependencies are met, pending or never met, and why it waits."""

from __future__ import annotations

import pytest

from gpuplaned.domain.dependencies import Verdict, cycle, never_reason, unknown, verdict, waiting_reason

S, F, C, R, Q, L = "SUCCEEDED", "FAILED", "CANCELLED", "RUNNING", "QUEUED", "LOST"


@pytest.mark.parametrize(("when", "states", "expected"), [
    ("succeeded", [S, S], Verdict.MET),
    ("succeeded", [S, R], Verdict.WAIT),
    ("succeeded", [F, R], Verdict.NEVER),  # one failure is enough: no need to wait for the rest
    ("succeeded", [C], Verdict.NEVER),
    ("succeeded", [L], Verdict.WAIT),  # LOST has not ended: its node may still say how it ended
    ("succeeded", [Q], Verdict.WAIT),  # a dependency retried automatically is QUEUED again
    ("ended", [S, F, C], Verdict.MET),
    ("ended", [F, R], Verdict.WAIT),
    ("ended", [Q], Verdict.WAIT),
    ("failed", [S, F], Verdict.MET),
    ("failed", [C], Verdict.MET),
    ("failed", [F, R], Verdict.WAIT),  # waits for every one before it cleans up
    ("failed", [S, S], Verdict.NEVER),
])
def test_verdict(when, states, expected):
    assert verdict(when, states) is expected


def test_an_unknown_condition_is_refused():
    with pytest.raises(ValueError):
        verdict("sometimes", [S])


def test_the_waiting_reason_names_each_pending_dependency_with_its_state():
    states = {"job_a": R, "job_b": S, "job_c": Q}
    assert waiting_reason("succeeded", states) == "after job_a (RUNNING), job_c (QUEUED)"
    assert waiting_reason("ended", {"job_a": R}) == "after the end of job_a (RUNNING)"
    assert waiting_reason("failed", {"job_a": R}) == "after a failure among job_a (RUNNING)"


def test_the_never_reason_names_the_dependency_that_failed():
    assert never_reason("succeeded", {"job_a": S, "job_b": F}) == "dependency job_b FAILED"
    assert never_reason("failed", {"job_a": S, "job_b": S}) == "--after-failed: every dependency succeeded (job_a, job_b)"


def test_unknown_ids_are_named_in_their_order():
    assert unknown(["job_x", "job_a", "job_y"], ["job_a"]) == ["job_x", "job_y"]
    assert unknown(["job_a"], ["job_a", "job_b"]) == []


def test_a_cycle_is_found_and_spelled_out():
    edges = {"job_new": ["job_a"], "job_a": ["job_b"], "job_b": ["job_new"]}
    assert cycle(edges, "job_new") == ["job_new", "job_a", "job_b", "job_new"]
    assert cycle({"job_new": ["job_new"]}, "job_new") == ["job_new", "job_new"]


def test_no_cycle_in_a_diamond():
    edges = {"job_new": ["job_a", "job_b"], "job_a": ["job_c"], "job_b": ["job_c"], "job_c": []}
    assert cycle(edges, "job_new") is None
