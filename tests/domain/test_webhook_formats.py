"""What a webhook sends, per format; its signature; the retry delays; which events match."""

from __future__ import annotations

import hashlib
import hmac
import json
import random

import pytest

from gpuplaned.domain import webhooks
from gpuplaned.domain.webhooks import matches, render, retry_delay_s

EVENT = {"id": "ev_1", "ts": 5, "type": "RUN_FINISHED", "severity": "warning", "node_id": None, "job_id": "job_1",
         "run_id": "run_1", "step": None, "message": "run run_1 finished", "context": {}}


@pytest.mark.parametrize(("fmt", "content_type", "check"), [
    ("json", "application/json", lambda b: json.loads(b) == {"event": EVENT}),
    ("ntfy", "text/plain; charset=utf-8", lambda b: b == b"run run_1 finished"),
    ("bark", "application/json", lambda b: json.loads(b) == {"title": "GPUPlane RUN_FINISHED (run_1)",
                                                             "body": "run run_1 finished", "level": "timeSensitive",
                                                             "group": "gpuplane"}),
    ("slack", "application/json", lambda b: json.loads(b) == {"text": ":warning: *GPUPlane RUN_FINISHED (run_1)*: "
                                                                      "run run_1 finished"}),
])
def test_each_format(fmt, content_type, check):
    out = render(fmt, EVENT, secret=None, now_ms=1000)
    assert out.headers["Content-Type"] == content_type and check(out.body)
    assert out.headers["X-GPUPlane-Delivery"] == "ev_1" and "X-GPUPlane-Signature" not in out.headers


def test_ntfy_headers_and_the_signature():
    out = render("ntfy", EVENT, secret="k" * 8, now_ms=1234)
    assert (out.headers["Title"], out.headers["Priority"], out.headers["Tags"]) == (
        "GPUPlane RUN_FINISHED (run_1)", "4", "warning,run_finished")
    expected = hmac.new(b"k" * 8, b"1234." + out.body, hashlib.sha256).hexdigest()
    assert out.headers["X-GPUPlane-Signature"] == f"sha256={expected}" and out.headers["X-GPUPlane-Timestamp"] == "1234"
    with pytest.raises(ValueError):
        render("xml", EVENT, secret=None, now_ms=0)


def test_retry_delays_double_to_a_cap_with_half_of_each_random():
    rng = random.Random(7)
    for attempts, ceiling in ((1, 1.0), (2, 2.0), (5, 16.0), (30, webhooks.LONGEST_RETRY_S)):
        for _ in range(50):
            assert ceiling / 2 <= retry_delay_s(attempts, rng) <= ceiling


@pytest.mark.parametrize(("types", "least", "event_type", "severity", "expected"), [
    (("*",), "info", "OOM", "info", True),
    (("OOM",), "info", "OOM", "critical", True),
    (("OOM",), "info", "JOB_FAILED", "critical", False),
    (("JOB_FAILED",), "info", "OOM", "critical", True),  # every failed job: OOM and timeouts are kinds of it
    (("RUN_FINISHED", "JOB_FAILED"), "warning", "JOB_TIMEOUT", "warning", True),
    (("JOB_TIMEOUT",), "info", "JOB_FAILED", "warning", False),
    (("OOM",), "critical", "OOM", "warning", False),
    (("*",), "warning", "DISK_OK", "info", False),
])
def test_matching(types, least, event_type, severity, expected):
    assert matches(types, least, event_type, severity) is expected
