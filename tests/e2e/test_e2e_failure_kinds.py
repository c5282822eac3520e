"""Every failed job reaches whoever listens for JOB_FAILED, with its cause, and the events that
only say something happened are info. Real daemon, real jobs (an OOM line and exit 1, a
timeout, an exit code), a real webhook receiver on loopback, ``gpuplanectl events`` and
``event-hook`` as a user runs them, and MCP's ``wait_for_events`` through a real client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from helpers import Jobs, wait_for
from mcp import Client, StdioServerParameters
from webhook_receiver import Receiver

pytestmark = pytest.mark.e2e

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"
OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
RECORD = ("import json, os, sys\n"
          "with open(sys.argv[1], 'a') as out:\n"
          "    out.write(json.dumps(json.load(sys.stdin)) + '\\n')\n")


def _ctl_json(jobs: Jobs, *args: str) -> dict:
    done = jobs.daemon.run_ctl(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _fail_three_ways(jobs: Jobs) -> dict[str, str]:
    """An OOM, a timeout and an exit code; the cause each job is recorded with, by job id."""
    oom = jobs.sh(f"echo '{OOM_LINE}' >&2; exit 1", gpu=0)
    late = jobs.sh("echo 'epoch 1 of 90' >&2; sleep 30", gpu=0, timeout_s=0.5, stop_grace_s=0.5)
    code = jobs.sh("echo 'ValueError: boom' >&2; exit 3", gpu=0)
    causes = {}
    for job in (oom, late, code):
        done = jobs.wait(job["id"])
        assert done["status"] == "FAILED"
        causes[job["id"]] = done["failure_reason"]
    assert sorted(causes.values()) == ["EXIT_CODE", "OOM", "TIMEOUT"]
    return causes


def _cause_of(event: dict) -> tuple[str, str, str]:
    return event["job_id"], event["type"], event["context"]["failure_reason"]


EXPECTED_TYPE = {"OOM": "OOM", "TIMEOUT": "JOB_TIMEOUT", "EXIT_CODE": "JOB_FAILED"}


def test_job_failed_listeners_hear_every_failure_with_its_cause(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    receiver = Receiver().start()
    try:
        _ctl_json(jobs, "webhook", "add", receiver.url, "--events", "JOB_FAILED")
        hook_script = tmp_path / "record.py"
        hook_script.write_text(RECORD)
        with (tmp_path / "hook.err").open("w") as err:
            hook = subprocess.Popen(
                [sys.executable, "-m", "gpuplanectl", "event-hook", "--types", "JOB_FAILED", "--max-events", "3",
                 "--cursor-file", str(tmp_path / "hook.cursor"), "--",
                 sys.executable, str(hook_script), str(tmp_path / "got.jsonl")],
                env=jobs.daemon.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_for(lambda: (tmp_path / "hook.cursor").exists(), what="the hook's cursor")
            causes = _fail_three_ways(jobs)
            assert hook.wait(30) == 0, (tmp_path / "hook.err").read_text()
        finally:
            hook.kill()
            hook.wait()
        expected = sorted((job_id, EXPECTED_TYPE[cause], cause) for job_id, cause in causes.items())

        # The webhook: one notification per failed job, the OOM and the timeout among them.
        sent = wait_for(lambda: (lambda got: got if len(got) >= 3 else None)(
            [json.loads(body)["event"] for _, body in receiver.received]), what="three notifications")
        assert sorted(map(_cause_of, sent)) == expected
        oom = next(e for e in sent if e["type"] == "OOM")
        assert oom["context"]["log_line"] == OOM_LINE and "ran out of memory" in oom["message"]

        # event-hook --types JOB_FAILED
        hooked = [json.loads(line) for line in (tmp_path / "got.jsonl").read_text().splitlines()]
        assert sorted(map(_cause_of, hooked)) == expected

        # events --type JOB_FAILED, and the REST filter beneath it; OOM alone stays OOM alone.
        listed = _ctl_json(jobs, "events", "--type", "JOB_FAILED")["events"]
        assert sorted(map(_cause_of, listed)) == expected
        (only_oom,) = jobs.client.get("/api/v1/events?type=OOM")["events"]
        assert only_oom["context"]["failure_reason"] == "OOM"
        text = jobs.daemon.run_ctl("events", "--type", "job_failed")
        assert text.returncode == 0 and text.stdout.count("OOM") >= 1 and "JOB_TIMEOUT" in text.stdout, text.stdout

        # MCP's wait_for_events, through a real client over mcp-stdio, from the first event on
        waited = trio.run(_wait_for_failures, jobs)
        assert sorted(map(_cause_of, waited)) == expected
    finally:
        receiver.stop()


async def _wait_for_failures(jobs: Jobs) -> list[dict]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "gpuplanectl", "mcp-stdio"],
                                   env=jobs.daemon.env)
    with trio.fail_after(30):
        async with Client(params) as client:
            got = await client.call_tool("wait_for_events", {"cursor": "0", "types": ["JOB_FAILED"], "timeout_s": 0})
    assert not got.is_error, got.content
    return got.structured_content["events"]


USER_EVENT_SCRIPT = """
import gpuplane
run = gpuplane.init()
run.log({"loss": 1.0}, step=0)
run.log_event("stopped", {"why": "asked to"})
run.finish()
raise SystemExit(2)
"""


def test_lifecycle_and_script_events_are_info(daemon_factory, tmp_path):
    config = tmp_path / "gpuplaned.toml"
    config.write_text("[detector]\ninterval_s = 0.1\n")
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1", f"--config={config}")
    (jobs.workdir / "train.py").write_text(USER_EVENT_SCRIPT)
    job = jobs.submit([sys.executable, "train.py"], gpu=0, env={"PYTHONPATH": str(SDK_DIR)})
    done = jobs.wait(job["id"], timeout=30)
    assert done["status"] == "FAILED"

    def of_job(kind: str) -> list[dict]:
        return jobs.client.get(f"/api/v1/events?type={kind}&run_id={done['run_id']}")["events"]

    (finished,) = wait_for(lambda: of_job("RUN_FINISHED"), what="RUN_FINISHED")
    (started,) = of_job("RUN_STARTED")
    (user,) = of_job("USER_EVENT")
    (failed,) = of_job("JOB_FAILED")
    assert finished["context"]["status"] == "FAILED"
    assert [e["severity"] for e in (started, finished, user)] == ["info"] * 3
    assert failed["severity"] == "warning"  # what went wrong is said once, by its own event
    assert {e["id"] for e in jobs.client.get(f"/api/v1/events?severity=warning,critical&run_id={done['run_id']}")
            ["events"]} == {failed["id"]}
