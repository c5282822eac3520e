"""``gpuplanectl event-hook`` on a real daemon: CMD runs once per matching event with the event
on stdin and in its environment, across its own restart and the daemon's kill -9, with no
duplicate and no gap; ``--max-events`` exits 0."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import Jobs, wait_for

RECORD = ("import json, os, sys\n"
          "event = json.load(sys.stdin)\n"
          "with open(sys.argv[1], 'a') as out:\n"
          "    out.write(json.dumps({'env': {k: v for k, v in os.environ.items() if k.startswith('GPUPLANE_EVENT_')},"
          " 'event': event}) + '\\n')\n")


def _hook(jobs: Jobs, tmp_path, *args: str) -> subprocess.Popen[str]:
    script = tmp_path / "record.py"
    script.write_text(RECORD)
    with (tmp_path / "hook.err").open("a") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "gpuplanectl", "event-hook", "--types", "JOB_FAILED",
             "--cursor-file", str(tmp_path / "hook.cursor"), *args, "--",
             sys.executable, str(script), str(tmp_path / "got.jsonl")],
            env=jobs.daemon.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)


def _got(tmp_path) -> list[dict]:
    path = tmp_path / "got.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _fail(jobs: Jobs) -> str:
    job = jobs.sh("exit 3")
    jobs.wait(job["id"], "FAILED")
    return job["id"]


def test_event_hook_survives_its_restart_and_the_daemons_kill(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    before = _fail(jobs)  # before the hook's first start: not handled (it starts from the newest)

    hook = _hook(jobs, tmp_path, "--max-events", "1")
    wait_for(lambda: (tmp_path / "hook.cursor").exists(), what="the cursor to be written")
    first = _fail(jobs)
    assert hook.wait(20) == 0, (tmp_path / "hook.err").read_text()  # --max-events 1: exit 0

    hook = _hook(jobs, tmp_path, "--max-events", "3")  # second, third, fourth
    second = _fail(jobs)  # while it was not running, or as it starts: either way once
    wait_for(lambda: len(_got(tmp_path)) == 2, what="the second event")
    jobs.daemon.kill()  # kill -9 mid-stream
    jobs.restart(daemon_factory, "--gpus=fake:1")
    third, fourth = _fail(jobs), _fail(jobs)
    try:
        assert hook.wait(30) == 0
    finally:
        hook.kill()

    got = _got(tmp_path)
    assert [g["event"]["job_id"] for g in got] == [first, second, third, fourth]
    assert before not in [g["event"]["job_id"] for g in got]
    assert len({g["event"]["id"] for g in got}) == 4
    for g in got:
        env, event = g["env"], g["event"]
        assert env["GPUPLANE_EVENT_ID"] == event["id"]
        assert env["GPUPLANE_EVENT_TYPE"] == "JOB_FAILED"
        assert env["GPUPLANE_EVENT_SEVERITY"] == "warning"
        assert env["GPUPLANE_EVENT_JOB_ID"] == event["job_id"]
        assert env["GPUPLANE_EVENT_RUN_ID"] == event["run_id"]
    assert (tmp_path / "hook.cursor").read_text().strip() == got[-1]["event"]["id"]


def test_a_failing_command_is_reported_and_the_hook_goes_on(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    hook = subprocess.Popen(
        [sys.executable, "-m", "gpuplanectl", "event-hook", "--types", "JOB_FAILED", "--max-events", "2",
         "--cursor-file", str(tmp_path / "c"), "--", "sh", "-c", "cat >/dev/null; exit 7"],
        env=jobs.daemon.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: (tmp_path / "c").exists(), what="the cursor")
    ids = [_fail(jobs), _fail(jobs)]
    _out, err = hook.communicate(timeout=30)
    assert hook.returncode == 0
    assert err.count("exited 7") == 2, err
    assert ids  # both handled: the cursor moved past the failed ones
    events = jobs.client.get("/api/v1/events?type=JOB_FAILED&limit=1")["events"]
    assert (tmp_path / "c").read_text().strip() == events[0]["id"]


def test_a_bad_type_is_refused(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    done = jobs.daemon.run_ctl("event-hook", "--types", "NOPE", "--cursor-file", str(tmp_path / "c"), "--", "true")
    assert done.returncode != 0 and "NOPE" in done.stderr
    assert not (tmp_path / "c").exists()
