"""GPU-hour accounting and the submit limits of a capability token, as pure functions."""

from __future__ import annotations

import pytest

from gpuplaned.domain.gpu_budget import (
    Attempt,
    SubmitFacts,
    TokenJob,
    Usage,
    budget_after,
    check_submit,
    inside,
    job_used_gpu_hours,
    spent,
    usage,
)
from gpuplaned.protocol.token_limits import TokenLimits

H = 3_600_000  # ms in an hour
NOW = 10 * H


@pytest.mark.parametrize(("job", "used"), [
    (TokenJob("a", "SUCCEEDED", 2, None, (Attempt(0, H),)), 2.0),  # 2 GPUs x 1 h
    (TokenJob("b", "RUNNING", 1, None, (Attempt(NOW - H // 2, None),)), 0.5),  # charged up to now
    (TokenJob("c", "QUEUED", 4, 3600, ()), 0.0),  # never started
    (TokenJob("d", "FAILED", 1, None, (Attempt(0, H), Attempt(2 * H, 4 * H))), 3.0),  # attempts add up
    (TokenJob("e", "RUNNING", 1, None, (Attempt(None, None),)), 0.0),  # dispatched, not started
    (TokenJob("f", "SUCCEEDED", 1, None, (Attempt(2 * H, H),)), 0.0),  # a clock step back is no credit
])
def test_charged_gpu_hours(job, used):
    assert job_used_gpu_hours(job, NOW) == pytest.approx(used)


@pytest.mark.parametrize(("jobs", "used", "committed", "open_jobs"), [
    ([], 0.0, 0.0, 0),
    # queued, 2 GPUs x 1 h timeout: reserves 2
    ([TokenJob("q", "QUEUED", 2, 3600, ())], 0.0, 2.0, 1),
    # running for 0.25 h of its 1 h timeout on 2 GPUs: used 0.5, reserves the other 1.5
    ([TokenJob("r", "RUNNING", 2, 3600, (Attempt(NOW - H // 4, None),))], 0.5, 2.0, 1),
    # no timeout: max_job_hours (2 h) is its worst case
    ([TokenJob("n", "QUEUED", 1, None, ())], 0.0, 2.0, 1),
    # ended: only what it used
    ([TokenJob("s", "SUCCEEDED", 1, 3600, (Attempt(0, H // 2),))], 0.5, 0.5, 0),
    # ran past its worst case (a second attempt): reserves nothing more, never negative
    ([TokenJob("o", "RUNNING", 1, 3600, (Attempt(0, H), Attempt(NOW - 2 * H, None)))], 3.0, 3.0, 1),
])
def test_usage_reserves_the_worst_case_of_jobs_not_ended(jobs, used, committed, open_jobs):
    found = usage(jobs, TokenLimits(max_job_hours=2.0), NOW)
    assert found == Usage(pytest.approx(used), pytest.approx(committed), open_jobs)


def facts(gpus=1, node="n1", cwd="/work/a", timeout_s=3600.0):
    return SubmitFacts(gpus, node, cwd, timeout_s)


NONE = Usage(0.0, 0.0, 0)


@pytest.mark.parametrize(("limits", "job", "used", "limit", "words"), [
    (TokenLimits(max_gpus_per_job=2), facts(gpus=3), NONE, "max_gpus_per_job", "at most 2 GPU(s) per job"),
    (TokenLimits(allowed_nodes=("n1",)), facts(node="n2"), NONE, "allowed_nodes", "only on n1"),
    (TokenLimits(allowed_nodes=("n1",)), facts(node=None), NONE, "allowed_nodes", "names no node"),
    (TokenLimits(allowed_dirs=("/work/a",)), facts(cwd="/work/ab"), NONE, "allowed_dirs", "resolves to /work/ab"),
    (TokenLimits(max_queued_jobs=2), facts(), Usage(0.0, 0.0, 2), "max_queued_jobs", "already has 2"),
    (TokenLimits(max_job_hours=1.0), facts(timeout_s=7200.0), NONE, "max_job_hours", "at most 1 h"),
    (TokenLimits(gpu_hours=1.0), facts(timeout_s=None), NONE, "budget", "must set timeout_s"),
    (TokenLimits(gpu_hours=4.0), facts(gpus=2, timeout_s=3 * 3600.0), NONE, "budget", "could use 6"),
    (TokenLimits(gpu_hours=4.0), facts(), Usage(2.0, 3.5, 1), "budget", "has 0.5 GPU-hour(s) left of 4"),
])
def test_each_limit_refuses_with_its_own_message(limits, job, used, limit, words):
    found = check_submit(limits, job, used, token="agent")
    assert [r.limit for r in found] == [limit]
    assert words in found[0].message and "'agent'" in found[0].message


def test_budget_refusal_carries_the_remaining_gpu_hours():
    [refusal] = check_submit(TokenLimits(gpu_hours=4.0), facts(gpus=2), Usage(2.0, 3.5, 1), token="agent")
    assert refusal.details["remaining_gpu_hours"] == 0.5
    assert refusal.details["reason"] == "budget_exceeded"


@pytest.mark.parametrize(("limits", "job", "used"), [
    (TokenLimits(), facts(gpus=8, node=None, cwd="/anywhere", timeout_s=None), NONE),
    (TokenLimits(max_gpus_per_job=2, allowed_nodes=("n1",), allowed_dirs=("/work",), max_queued_jobs=3,
                 gpu_hours=4.0, max_job_hours=2.0), facts(gpus=2, cwd="/work/a/b", timeout_s=None),
     Usage(0.0, 0.0, 2)),
    (TokenLimits(gpu_hours=4.0), facts(gpus=1), Usage(2.0, 3.0, 1)),  # exactly the remaining hour
])
def test_jobs_within_every_limit_pass(limits, job, used):
    assert check_submit(limits, job, used, token="agent") == []


def test_inside_is_by_path_component():
    assert inside("/work/a", "/work/a") and inside("/work/a/b", "/work/a") and inside("/x", "/")
    assert not inside("/work/ab", "/work/a") and not inside("/work", "/work/a")


def test_budget_after_and_spent():
    assert budget_after(TokenLimits(gpu_hours=4.0), facts(gpus=2), Usage(1.0, 1.5, 1)) == 0.5
    assert budget_after(None, facts(), NONE) is None
    assert spent(TokenLimits(gpu_hours=1.0), 1.0) and not spent(TokenLimits(gpu_hours=1.0), 0.99)
    assert not spent(TokenLimits(max_gpus_per_job=1), 100.0) and not spent(None, 100.0)
