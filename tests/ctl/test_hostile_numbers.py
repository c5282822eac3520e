"""Every CLI view renders whatever numbers the API sends: NaN, the infinities (as floats, or as
the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` that the API sends because JSON has no
NaN), null, huge and tiny values, in any numeric field. Property tests: each view's rendering
function gets a realistic payload with hypothesis putting hostile numbers in its numbers.
"""

from __future__ import annotations

import math
from typing import Any

import hypothesis
import pytest
from gpuplanectl import render, render_nodes, topview
from gpuplanectl.commands import runs, tokens, ui
from hypothesis import HealthCheck
from hypothesis import strategies as st

SETTINGS = hypothesis.settings(max_examples=150, derandomize=True, database=None, deadline=None,
                               suppress_health_check=list(HealthCheck))

NOW = 1_700_000_000.0
MS = int(NOW * 1000)

EXTREMES = [math.nan, math.inf, -math.inf, "NaN", "Infinity", "-Infinity", None, 1e308, -1e308, 5e-324, -5e-324,
            1e-300, 10**400, -(10**400), 2**63, 2**1024, 0, -1, 0.5]
HOSTILE = st.one_of(st.sampled_from(EXTREMES), st.floats(), st.integers(min_value=-(10**500), max_value=10**500))


def hostile(sample: Any) -> st.SearchStrategy[Any]:
    """``sample`` with each number kept or replaced by a hostile one (null among them: the
    samples give their optional numbers a value, so that each can be null or hostile)."""
    if sample is None or isinstance(sample, (bool, str)):
        return st.just(sample)
    if isinstance(sample, (int, float)):
        return st.one_of(st.just(sample), HOSTILE)
    if isinstance(sample, dict):
        return st.fixed_dictionaries({key: hostile(value) for key, value in sample.items()})
    if isinstance(sample, list):
        return st.tuples(*(hostile(item) for item in sample)).map(list)
    raise TypeError(type(sample))


# -- realistic payloads, as the API answers them ---------------------------------------------

JOB = {"id": "job_01JD0000000000000000000001", "name": "train", "type": "TRAIN", "status": "RUNNING", "gpu": 2,
       "gpu_indexes": [0, 1], "attempt": 2, "max_attempts": 3, "priority": 5, "node_id": "nd_1", "node": None,
       "created_at": MS - 600_000, "started_at": MS - 185_000, "finished_at": None, "exit_code": None,
       "timeout_s": 3600.0, "stop_grace_s": 30.5, "command": ["python", "train.py"], "cwd": "/w", "labels": [],
       "env": {}, "cancel_requested": False, "failure_reason": None, "run_id": "run_1", "queue_reason": None,
       "min_gpu_memory_mb": 40960}
ENDED_JOB = {**JOB, "status": "FAILED", "finished_at": MS - 1000, "exit_code": 1, "failure_reason": "EXIT_CODE"}
QUEUED_JOB = {**JOB, "status": "QUEUED", "attempt": 0, "started_at": None, "gpu_indexes": None}

READING = {"index": 0, "model": "H100", "utilization_pct": 71.0, "memory_used_mb": 49152, "memory_total_mb": 81559,
           "temperature_c": 72.4, "power_w": 600.4, "power_limit_w": 700.0, "sm_clock_mhz": 1980, "fan_pct": 30.0,
           "throttle_reasons": [], "error": None, "owner_job_id": None,
           "processes": [{"pid": 4242, "gpu_memory_mb": 48000, "job_id": "job_1", "foreign": False},
                         {"pid": 999, "gpu_memory_mb": 512, "job_id": None, "foreign": True}]}
NODE = {"id": "nd_1", "name": "box", "status": "ONLINE", "gpu_backend": "nvml", "max_cpu_jobs": 2, "cpu_jobs": 1,
        "last_heartbeat_at": MS - 2000, "accepting": True, "conditions": [], "labels": [], "remote": True,
        "hardware": {"cpu_count": 16, "memory_mb": 64000, "platform": "Linux", "hostname": "box"},
        "link": {"state": "attached", "last_heartbeat_at": MS - 1000, "last_heard_at": MS - 500,
                 "backlog_records": 12_345, "backlog_bytes": 98_765, "skew_ms": 12},
        "gpus": [{"index": 0, "model": "H100", "memory_mb": 81559, "owner_job_id": "job_1", "owner_job_name": "t"},
                 {"index": 1, "model": "H100", "memory_mb": 81559, "owner_job_id": None, "owner_job_name": None}],
        "snapshot": {"ts": MS - 1000, "blocked_gpus": [1], "gpus": [READING, {**READING, "index": 1}],
                     "host": {"cpu_percent": 12.3, "load1": 0.52, "load5": 0.4, "load15": 0.33,
                              "memory_used_mb": 3174, "memory_total_mb": 15974, "swap_used_mb": 0,
                              "swap_total_mb": 2047, "net_rx_bytes": 10**9, "net_tx_bytes": 5 * 10**8,
                              "disks": [{"label": "/", "path": "/", "used_bytes": 10**11, "free_bytes": 10**11,
                                         "total_bytes": 2 * 10**11}]},
                     "jobs": [{"job_id": "job_1", "gpu_indexes": [0], "gpu_memory_mb": 48000}]}}
SERIES = {"avg": [40.0, None, 50.0], "max": [90.0, None, 93.0]}
NODE_METRICS = {"series": {"gpu0.utilization": SERIES, "gpu0.memory_used_mb": {"avg": [4.0e4], "max": [4.1e4]},
                           "host.cpu_percent": SERIES, "host.memory_used_mb": {"avg": [3e3], "max": [3.1e3]}}}

RUN = {"id": "run_1", "source": "sdk", "status": "RUNNING", "job_id": None, "attempt": None, "name": "demo",
       "project": "p", "experiment": "e", "created_at": MS - 60_000, "finished_at": MS}
POINT = {"value": 0.05, "step": 199}
SUMMARY = {"progress": {"step": 199}, "warnings": ["loss went NaN at step 12"],
           "primary_metric": {"name": "train/loss", "direction": "minimize", "source": "global",
                              "best": {"value": 0.05, "step": 199}},
           "metrics": {"train/loss": {"count": 200, "direction": "minimize", "trend": "decreasing",
                                      "latest": POINT, "best": POINT},
                       "eval/acc": {"count": 2, "direction": "maximize", "latest": POINT, "best": POINT}}}
RUN_SERIES = {"train/loss": {"count": [1, 2, 3], "last": [1.0, 0.5, None], "min": [0.9, 0.4, None],
                             "max": [1.1, 0.6, None], "avg": [1.0, 0.5, 0.25]}}

TOKEN = {"id": "tok_1", "name": "ci", "scopes": ["read"], "created_at": MS - 10, "expires_at": MS + 10,
         "last_used_at": MS, "revoked_at": None, "used_gpu_hours": 1.5, "remaining_gpu_hours": 8.5,
         "limits": {"max_gpus_per_job": 2, "max_queued_jobs": 4, "max_job_hours": 2.5, "gpu_hours": 10.0}}
ACTOR = {"name": "store", "state": "RUNNING", "uptime_s": 65.2, "restarts": 2, "last_error": "boom",
         "last_error_at": MS - 1000, "stats": {"writes": 3}}
DAEMON = {"version": "0.1", "pid": 42, "role": "all", "state": "READY", "uptime_s": 185.0,
          "endpoints": {"unix": "/run/g.sock"}}
EVENT = {"ts": MS, "severity": "warning", "type": "LOSS_NAN", "node_id": "nd_1", "job_id": None, "message": "m"}
PLAN = {"would": "dispatch", "node_id": "nd_1", "gpus": [0], "reasons": ["fits"], "queue_position": 1,
        "budget_after_gpu_hours": 3.25}


def _is_text(out: Any) -> None:
    assert isinstance(out, str)


@SETTINGS
@hypothesis.given(job=hostile(JOB), ended=hostile(ENDED_JOB), queued=hostile(QUEUED_JOB))
def test_job_views(job, ended, queued):
    _is_text(render.job_table([job, ended, queued], now=NOW))
    _is_text(render.queue_table(render.queue_order([job, ended, queued]), now=NOW))
    for one in (job, ended, queued):
        _is_text(render.job_line(one))
        _is_text(render.job_detail(one, now=NOW))


@SETTINGS
@hypothesis.given(node=hostile(NODE), metrics=hostile(NODE_METRICS))
def test_node_views(node, metrics):
    _is_text(render_nodes.node_list_table([node], now=NOW))
    _is_text(render_nodes.gpu_status_table([node]))
    _is_text(render_nodes.node_detail(node, now=NOW))
    out = render_nodes.history_text(metrics)
    assert out is None or isinstance(out, str)


@SETTINGS
@hypothesis.given(node=hostile(NODE), job=hostile(JOB), queued=hostile(QUEUED_JOB))
def test_top_frame(node, job, queued):
    lines = topview.compose([node, {**node, "id": "nd_2"}], [job, queued], width=100, height=30, now=NOW)
    assert len(lines) <= 30 and all(isinstance(line, str) and len(line) <= 100 for line in lines)


@SETTINGS
@hypothesis.given(run=hostile(RUN), summary=hostile(SUMMARY), series=hostile(RUN_SERIES))
def test_run_views(run, summary, series):
    _is_text(runs.run_text(run, summary))
    _is_text(runs.metrics_table(series))
    _is_text(render.table(["ID"] * 7, [runs._run_row({**run, "attempt": summary["progress"]["step"]})]))


@SETTINGS
@hypothesis.given(token=hostile(TOKEN), actor=hostile(ACTOR), daemon=hostile(DAEMON), event=hostile(EVENT),
                  plan=hostile(PLAN))
def test_other_views(token, actor, daemon, event, plan):
    _is_text(tokens.token_table([token], now_ms=MS))
    _is_text(render.actor_table([actor], stats=True))
    _is_text(render.actor_line(actor))
    _is_text(render.daemon_line(daemon))
    _is_text(render.event_table([event]))
    _is_text(render.submit_plan(plan))
    _is_text(ui._within(token["expires_at"]))  # the sign-in link's expiry (``ui``)


@SETTINGS
@hypothesis.given(value=HOSTILE, spec=st.sampled_from([".6g", ".4g", ".3g", "g", ".0f", ".1f", ".2f", "d", "+.0f"]))
def test_the_one_number_formatter_never_raises_and_stays_short(value, spec):
    text = render.format_number(value, spec, " ms")
    assert text.endswith(" ms") or text == render.NONE
    assert len(text) <= render.WIDEST_NUMBER + len(" ms")
    number = render.as_number(value)
    if number is None:
        assert text == render.NONE
    elif isinstance(number, float) and math.isnan(number):
        assert text == "nan ms"
    elif isinstance(number, float) and math.isinf(number):
        assert text == ("inf ms" if number > 0 else "-inf ms")


@pytest.mark.parametrize(("value", "spec", "text"), [
    (0.05, ".6g", "0.05"), (3, ".6g", "3"), (None, ".6g", "-"), ("NaN", ".6g", "nan"), ("Infinity", ".4g", "inf"),
    ("-Infinity", ".4g", "-inf"), (math.nan, ".1f", "nan"), (1e300, ".0f", "1e+300"), (5e-324, ".0f", "0"),
    (10**400, ".6g", "1.00e+400"), (-(10**400) + 1, "d", "-9.99e+399"), (123_456_789, "d", "123456789"),
    ("loss", ".6g", "loss"), (True, ".6g", "-"),
])
def test_format_number(value, spec, text):
    assert render.format_number(value, spec) == text


def test_a_nan_loss_shows_as_nan_in_run_show():
    summary = {**SUMMARY, "metrics": {"train/loss": {"count": 3, "direction": "minimize", "trend": None,
                                                     "latest": {"value": "NaN", "step": 2},
                                                     "best": {"value": 0.5, "step": 1}}}}
    rows = [line.split() for line in runs.run_text(RUN, summary).splitlines()]
    assert ["train/loss", "*", "3", "nan", "2", "0.5", "1", "-"] in rows
    assert runs.sparkline([1.0, "NaN", None, "Infinity", 2.0], runs.ASCII_BARS) == "_   @"
