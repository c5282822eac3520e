"""The failure policies' decisions, table-driven (gpuplaned.domain.failure_policies)."""

from __future__ import annotations

import pytest

from gpuplaned.domain.failure_policies import JobFacts, Trigger, decide, policy_for
from gpuplaned.protocol.converter import check
from gpuplaned.protocol.job_policies import JobPolicies

ALL = check({"on_oom": {"retry": 2, "env": {"BATCH": "half"}}, "on_nan": "stop", "on_lost": "requeue",
             "on_stalled": {"after": "20m", "action": "restart"}, "on_preempted": {"resume_from": "last"}},
            JobPolicies)
MIN = 60_000


def _t(kind: str, **context) -> Trigger:
    return Trigger(kind, 1_000_000, "run_1", context)


FAILED = JobFacts("FAILED", None, {"BATCH": "64"})
RUNNING = JobFacts("RUNNING", "run_1", {"BATCH": "64"})


@pytest.mark.parametrize(("trigger", "job", "done", "action", "words"), [
    (_t("OOM", failure_reason="OOM"), FAILED, 0, "requeue", "retry 1 of 2 with BATCH 64 -> 32"),
    (_t("OOM", failure_reason="OOM"), FAILED, 2, "skip", "retries are spent"),
    (_t("OOM"), JobFacts("FAILED", None, {"BATCH": "lots"}), 0, "skip", "not a positive integer"),
    (_t("OOM"), JobFacts("FAILED", None, {}), 0, "skip", "not in the job's env"),
    (_t("OOM"), JobFacts("QUEUED", None, {"BATCH": "1"}), 0, "requeue", "BATCH 1 -> 1"),  # its own retry
    (_t("OOM"), RUNNING, 0, "skip", "is RUNNING again"),
    (_t("JOB_FAILED", failure_reason="LOST"), FAILED, 0, "requeue", "lost"),
    (_t("JOB_FAILED", failure_reason="SIGNAL(SIGKILL)"), FAILED, 0, "requeue", "killed from outside"),
    (_t("JOB_FAILED", failure_reason="SIGNAL(SIGSEGV)"), FAILED, 0, "skip", "no policy"),
    (_t("JOB_FAILED", failure_reason="EXIT_CODE"), FAILED, 0, "skip", "no policy"),
    (_t("LOSS_NAN"), RUNNING, 0, "stop", "NaN"),
    (_t("LOSS_NAN"), FAILED, 0, "skip", "ended"),
    (_t("RUN_STALLED", silent_ms=20 * MIN), RUNNING, 0, "restart", "stalled for 20m"),
    (_t("RUN_STALLED", silent_ms=5 * MIN), RUNNING, 0, "wait", "once the stall lasted 20m"),
    (_t("RUN_STALLED", silent_ms=20 * MIN), JobFacts("RUNNING", "run_1", {}, still_stalled=False), 0, "skip",
     "wrote again"),
    (_t("RUN_STALLED", silent_ms=20 * MIN), JobFacts("RUNNING", "run_2", {}), 0, "skip", "another run"),
])
def test_decisions(trigger, job, done, action, words):
    decision = decide(trigger, ALL, job, done, now=trigger.ts)
    assert decision.action == action and words in decision.reason


def test_the_stall_waits_until_it_lasted_after():
    trigger = _t("RUN_STALLED", silent_ms=5 * MIN)
    assert decide(trigger, ALL, RUNNING, 0, now=trigger.ts).due_at == trigger.ts + 15 * MIN
    assert decide(trigger, ALL, RUNNING, 0, now=trigger.ts + 15 * MIN).action == "restart"


def test_env_halving_and_resume():
    assert decide(_t("OOM"), ALL, JobFacts("FAILED", None, {"BATCH": "7"}), 0, 0).env == {"BATCH": "3"}
    assert decide(_t("JOB_FAILED", failure_reason="SIGNAL(SIGTERM)"), ALL, FAILED, 0, 0).resume_from == "last"


def test_notify_and_no_policy():
    notify = check({"on_stalled": {"after": "1m", "action": "notify"}}, JobPolicies)
    assert decide(_t("RUN_STALLED", silent_ms=MIN), notify, FAILED, 0, 1_000_000).action == "notify"  # ended too
    assert policy_for(_t("OOM"), notify) is None
