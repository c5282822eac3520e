"""A sweep's failure classes, table-driven (gpuplaned.domain.sweep_policies)."""

from __future__ import annotations

import pytest

from gpuplaned.domain.sweep_policies import (
    FLAPPING_REASON,
    covered,
    decide_retry,
    failed_fast,
    flapping,
    retry_cause,
)

ALL = {"causes": ["OOM", "PREEMPTED", "LOST"], "times": 2}


@pytest.mark.parametrize(("reason", "cause"), [
    ("OOM", "OOM"), ("SIGNAL(SIGKILL)", "PREEMPTED"), ("SIGNAL(SIGTERM)", "PREEMPTED"), ("SIGNAL(SIGHUP)", "PREEMPTED"),
    ("SIGNAL(SIGINT)", "PREEMPTED"), ("LOST", "LOST"), ("SIGNAL(SIGSEGV)", None), ("EXIT_CODE", None),
    ("TIMEOUT", None), ("SPAWN_FAILED", None), (None, None),
])
def test_the_cause_of_a_failure(reason, cause):
    assert retry_cause(reason) == cause


@pytest.mark.parametrize(("reason", "retry_on", "spent", "retry", "words"), [
    ("OOM", ALL, 1, True, "OOM (OOM): retry 1 of 2"),
    ("OOM", ALL, 2, True, "retry 2 of 2"),
    ("OOM", ALL, 3, False, "retry_on's 2 retries are spent"),
    ("SIGNAL(SIGKILL)", {"causes": ["PREEMPTED"], "times": 1}, 2, False, "retry_on's 1 retry is spent"),
    ("SIGNAL(SIGKILL)", {"causes": ["OOM"], "times": 5}, 1, False, "not a cause of retry_on (OOM): final"),
    ("EXIT_CODE", ALL, 1, False, "failed with EXIT_CODE, not a cause of retry_on"),
    ("LOST", {"causes": ["lost"], "times": 1}, 1, True, "LOST (LOST): retry 1 of 1"),  # the case of a cause
])
def test_retry_decisions(reason, retry_on, spent, retry, words):
    decision = decide_retry(reason, retry_on, spent)
    assert decision.retry is retry and words in decision.reason


def test_only_the_causes_count_toward_the_retries():
    assert covered("OOM", ALL) and not covered("EXIT_CODE", ALL)
    assert not covered("SIGNAL(SIGKILL)", {"causes": ["OOM"], "times": 1})


def test_flapping():
    assert failed_fast(1_000, 59_999) and not failed_fast(1_000, 61_000)
    assert failed_fast(None, 5)  # never started: its command could not begin
    assert not failed_fast(1_000, None)
    assert not flapping(2) and flapping(3)
    assert FLAPPING_REASON == "3 trials failed within their first minute"
