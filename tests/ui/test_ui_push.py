"""Live by push beyond a run's page (issue 33 item 3), in a real browser against a real daemon
(web/e2e/push-pages.mjs): the Nodes page's system charts follow the node's stream, Compare's two
live runs one several-run metric stream (their summaries refreshed from it); none asks on a timer
while its stream is up, each polls while it is refused, and stops once it is back. The list pages
(web/e2e/push-lists.mjs) follow GET /changes/stream: nothing on a timer, a submitted job shown at once.

A daemon of its own (two fake GPUs, two jobs that log a burst of points when the script asks),
with the module fixtures and helpers of test_ui_e2e.py.
"""

from __future__ import annotations

import sys

import pytest
from helpers import wait_for
from test_ui_e2e import BURSTS, SDK_DIR, browser_daemon, run_script_on

pytestmark = pytest.mark.e2e


def test_the_node_charts_and_compare_follow_their_streams_and_poll_only_while_they_are_down(tmp_path):
    with browser_daemon(tmp_path, "fake:2", "ui-push") as (daemon, jobs, url, secret):
        node = jobs.client.get("/api/v1/nodes")["nodes"][0]["name"]

        folder = tmp_path / "bursts"
        folder.mkdir()
        (folder / "burst-0").touch()
        runs = []
        for gpu in (0, 1):
            job = jobs.submit([sys.executable, "-c", BURSTS, str(folder)], name=f"ui-push-{gpu}", gpu=gpu,
                              env={"PYTHONPATH": str(SDK_DIR)})
            jobs.wait(job["id"], "RUNNING", timeout=30)
            runs.append(wait_for(lambda job=job: jobs.get(job["id"])["run_id"], 30, interval=0.05, what="the job's run"))
        for run_id in runs:
            wait_for(lambda run_id=run_id: jobs.client.get(f"/api/v1/runs/{run_id}/metrics?names=loss")["series"].get("loss"),
                     30, interval=0.1, what="the first burst's points")

        r = run_script_on(daemon, url, secret, "push-pages", GPUPLANE_UI_NODE=node,
                          GPUPLANE_UI_RUN_IDS=",".join(runs), GPUPLANE_UI_BURST_DIR=str(folder))

        assert r["node"]["quiet"]["metrics_requests"] == 0, r["node"]
        assert all(n >= 2 for k, n in r["node"]["down"].items() if k != "ms"), r["node"]  # polled while refused
        assert all(n == 0 for n in r["node"]["back"].values()), r["node"]
        assert r["compare"]["streams"] == {"several": 1, "one_run": 0}, r["compare"]
        assert r["compare"]["quiet"] == {"chart_requests": 0, "summary_requests": 0}, r["compare"]
        assert r["compare"]["pushed"]["after"] > r["compare"]["pushed"]["before"], r["compare"]
        assert r["compare"]["pushed"]["summary_requests"] >= 2, r["compare"]
        assert all(n >= 2 for k, n in r["compare"]["down"].items() if k != "ms"), r["compare"]
        assert all(n == 0 for n in r["compare"]["back"].values()), r["compare"]
        assert r["problems"] == []


def test_the_list_pages_ask_nothing_on_a_timer_and_fetch_again_when_the_changes_stream_names_them(tmp_path):
    """web/e2e/push-lists.mjs: Runs and Jobs quiet on one changes stream; a job submitted through
    the API is asked for and shown at once (the pages polled every 5 s and 3 s before)."""
    with browser_daemon(tmp_path, "fake:1", "ui-lists") as (daemon, jobs, url, secret):
        r = run_script_on(daemon, url, secret, "push-lists",
                          GPUPLANE_UI_CWD=str(jobs.workdir), GPUPLANE_UI_SUBMIT_NAME="ui-pushed-job")

        assert r["runs_quiet"] == [] and r["jobs_quiet"] == [], r
        assert r["streams"] == 1, r
        assert r["asked_after_submit"] >= 1, r
        assert [j["name"] for j in jobs.client.get("/api/v1/jobs")["jobs"]] == ["ui-pushed-job"]
