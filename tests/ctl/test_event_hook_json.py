"""``gpuplanectl event-hook --json`` on a real daemon: one JSON object a line per event handled,
with CMD's exit code, CMD's own stdout kept off those lines; a bad filter is the API's error
body on stdout."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import Jobs, wait_for

pytestmark = pytest.mark.e2e


def test_event_hook_json_prints_a_line_per_event_with_the_commands_exit_code(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    cursor = tmp_path / "hook.cursor"
    hook = subprocess.Popen(
        [sys.executable, "-m", "gpuplanectl", "event-hook", "--json", "--types", "JOB_FAILED",
         "--cursor-file", str(cursor), "--max-events", "2", "--",
         "sh", "-c", 'cat >/dev/null; echo "cmd says $GPUPLANE_EVENT_TYPE"; exit 4'],
        env=jobs.daemon.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(cursor.exists, what="the hook's first cursor")
        failed = [jobs.sh("exit 3", gpu=0)["id"], jobs.sh("exit 5", gpu=0)["id"]]
        out, err = hook.communicate(timeout=30)
    finally:
        hook.kill()
    assert hook.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    # Both jobs run at once, so which fails first is the scheduler's; the events' order is theirs.
    assert sorted((line["event"]["type"], line["event"]["job_id"], line["exit_code"]) for line in lines) == sorted([
        ("JOB_FAILED", failed[0], 4), ("JOB_FAILED", failed[1], 4)])
    assert err.count("cmd says JOB_FAILED") == 2  # CMD's stdout, moved to stderr
    assert cursor.read_text().strip() == str(lines[-1]["event"]["id"])


def test_event_hook_json_reports_a_bad_filter_as_the_apis_error_body(daemon):
    done = daemon.run_ctl("event-hook", "--json", "--types", "NO_SUCH_TYPE", "--", "true")
    assert done.returncode != 0
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "bad_request" and "NO_SUCH_TYPE" in error["message"], error
