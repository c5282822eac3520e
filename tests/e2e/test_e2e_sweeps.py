"""Sweeps on a real daemon with real trial processes (issue 31 item 3): --max-parallel never lets
more than K trials run at once and says why the others wait; pause, resume, cancel and
retry-failed; the best combination from a metric the trials log through the SDK; and a kill -9
of the daemon halfway through a 500-trial submit leaves all of it or none, so a resubmit makes
each trial exactly once."""

from __future__ import annotations

import signal
import sqlite3
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from helpers import Jobs, wait_for

from gpuplanectl.client import DaemonUnreachable
from gpuplaned.protocol.errors import ApiError

pytestmark = pytest.mark.e2e

SWEEPS = "/api/v1/sweeps"
SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"
# A trial that says it started, then runs until the test lets it go.
HELD = "touch started-$GPUPLANE_SWEEP_TRIAL; while [ ! -e release-$GPUPLANE_SWEEP_TRIAL ]; do sleep 0.02; done"


@pytest.fixture
def jobs(daemon_factory, tmp_path):
    return Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:2")


def submit(jobs, **body):
    return jobs.client.post(SWEEPS, {"job": {"cwd": str(jobs.workdir), "gpu": 0, **body.pop("job")}, **body})


def show(jobs, sweep_id):
    return jobs.client.get(f"{SWEEPS}/{sweep_id}")["sweep"]


def act(jobs, sweep_id, verb):
    return jobs.client.post(f"{SWEEPS}/{sweep_id}/{verb}")["sweep"]


def statuses(sweep):
    return [t["status"] for t in sweep["trials"]]


def started(jobs):
    return {int(p.name.removeprefix("started-")) for p in jobs.workdir.glob("started-*")}


def test_max_parallel_runs_at_most_k_trials_at_once_and_says_why_the_rest_wait(jobs):
    made = submit(jobs, name="throttled", job={"command": ["sh", "-c", HELD]}, grid={"i": list(range(6))},
                  max_parallel=2)["sweep"]
    assert made["max_parallel"] == 2
    released: set[int] = set()
    while len(released) < 6:
        running = wait_for(lambda: (s := started(jobs) - released) and len(s) == min(2, 6 - len(released)) and s,
                           what="two trials to run")
        sweep = show(jobs, made["id"])
        on_node = [t for t in sweep["trials"] if t["status"] in ("DISPATCHING", "RUNNING")]
        assert len(on_node) <= 2 and len(started(jobs) - released) <= 2
        waiting = [t for t in sweep["trials"] if t["status"] == "QUEUED"]
        wait_for(lambda: all(t["queue_reason"] == "sweep max-parallel 2 reached"
                             for t in show(jobs, made["id"])["trials"] if t["status"] == "QUEUED"),
                 what="the queued trials to say why they wait")
        assert len(waiting) == 6 - len(released) - len(running)
        first = min(running)
        jobs.file(f"release-{first}").touch()
        wait_for(lambda: show(jobs, made["id"])["trials"][first]["status"] == "SUCCEEDED", what=f"trial {first}")
        released.add(first)
    done = wait_for(lambda: (s := show(jobs, made["id"]))["status"] == "SUCCEEDED" and s, what="the sweep to end")
    assert done["counts"]["succeeded"] == 6
    listed = jobs.client.get(f"/api/v1/jobs?sweep={made['id']}&status=QUEUED")["jobs"]
    assert listed == []


def test_pause_holds_the_queued_trials_resume_lets_them_run(jobs):
    made = submit(jobs, name="pausing", job={"command": ["sh", "-c", HELD], "gpu": 1}, grid={"i": [0, 1, 2, 3]})["sweep"]
    wait_for(lambda: started(jobs) == {0, 1}, what="two trials to take the two GPUs")
    paused = act(jobs, made["id"], "pause")
    assert (paused["paused"], paused["pause_reason"], paused["status"]) == (True, "paused by user", "PAUSED")
    for trial in (0, 1):
        jobs.file(f"release-{trial}").touch()  # its running trials go on, and end
    sweep = wait_for(lambda: (s := show(jobs, made["id"]))["counts"]["succeeded"] == 2 and s, what="two to end")
    wait_for(lambda: [t["queue_reason"] for t in show(jobs, made["id"])["trials"][2:]] == ["sweep pausing paused"] * 2,
             what="the held trials to say why")
    assert statuses(sweep)[2:] == ["QUEUED", "QUEUED"] and started(jobs) == {0, 1}  # GPUs free, nothing started
    resumed = act(jobs, made["id"], "resume")
    assert (resumed["paused"], resumed["pause_reason"]) == (False, None)
    wait_for(lambda: started(jobs) == {0, 1, 2, 3}, what="the held trials to start")
    for trial in (2, 3):
        jobs.file(f"release-{trial}").touch()
    assert wait_for(lambda: (s := show(jobs, made["id"]))["status"] == "SUCCEEDED" and s)["counts"]["succeeded"] == 4


def test_cancel_stops_running_trials_and_cancels_queued_ones(jobs):
    made = submit(jobs, name="cancelling", job={"command": ["sh", "-c", HELD], "gpu": 1, "stop_grace_s": 5},
                  grid={"i": [0, 1, 2]})["sweep"]
    wait_for(lambda: started(jobs) == {0, 1}, what="two trials to run")
    cancelled = act(jobs, made["id"], "cancel")
    assert cancelled["cancelled_at"] is not None
    done = wait_for(lambda: (s := show(jobs, made["id"]))["counts"]["cancelled"] == 3 and s, timeout=30,
                    what="every trial to be cancelled")
    assert done["status"] == "CANCELLED" and statuses(done) == ["CANCELLED"] * 3
    assert started(jobs) == {0, 1}  # the queued one never started
    with pytest.raises(ApiError) as refused:
        act(jobs, made["id"], "resume")
    assert refused.value.code.value == "conflict" and "cancelled" in refused.value.message
    # A cancelled sweep's name is free again: the same sweep makes a new one.
    again = submit(jobs, name="cancelling", job={"command": ["true"]}, grid={"i": [0]})
    assert again["sweep"]["id"] != made["id"] and again["created"] == 1


def test_retry_failed_queues_the_failed_trials_again(jobs):
    # Trial "b" fails the first time only (it leaves a mark); "a" succeeds.
    script = 'if [ "$0" = b ] && [ ! -e mark-b ]; then touch mark-b; exit 3; fi'
    made = submit(jobs, name="flaky", job={"command": ["sh", "-c", script, "{x}"]},
                  trials_list=[{"x": "a"}, {"x": "b"}])["sweep"]
    ended = wait_for(lambda: (s := show(jobs, made["id"]))["status"] in ("DONE", "FAILED", "SUCCEEDED") and s)
    assert (ended["status"], statuses(ended)) == ("DONE", ["SUCCEEDED", "FAILED"])
    assert ended["trials"][1]["failure_reason"] == "EXIT_CODE"
    act(jobs, made["id"], "retry-failed")
    done = wait_for(lambda: (s := show(jobs, made["id"]))["status"] == "SUCCEEDED" and s, what="the retry to succeed")
    assert [t["attempt"] for t in done["trials"]] == [1, 2]


TRAIN = textwrap.dedent("""
    import os
    import gpuplane
    lr = float(os.environ["GPUPLANE_SWEEP_LR"])
    run = gpuplane.init(config={"script": "train"})
    for step in range(3):
        run.log({"val/loss": abs(lr - 0.01) * 10 + 1 / (step + 1)}, step=step)
    run.finish()
""")


def test_sweep_show_gives_each_trials_best_and_the_best_combination(jobs):
    (jobs.workdir / "train.py").write_text(TRAIN)
    made = submit(jobs, name="lr-study", metric="val/loss", goal="min",
                  job={"command": [sys.executable, "train.py", "--lr", "{lr}"], "env": {"PYTHONPATH": str(SDK_DIR)}},
                  grid={"lr": [0.1, 0.01, 0.001]})["sweep"]
    done = wait_for(lambda: (s := show(jobs, made["id"]))["status"] == "SUCCEEDED" and s, timeout=60,
                    what="the sweep to end")
    assert [t["best"] for t in done["trials"]] == pytest.approx([0.9 + 1 / 3, 1 / 3, 0.09 + 1 / 3])
    assert [t["step_of_best"] for t in done["trials"]] == [2, 2, 2]
    best = done["best"]
    assert (best["trial"], best["values"], best["step"]) == (1, {"lr": 0.01}, 2)
    assert best["value"] == pytest.approx(1 / 3) and best["job_id"] == done["trials"][1]["job_id"]
    # The run is in the sweep's experiment, its config the trial's values with the script's own over them.
    run = jobs.client.get(f"/api/v1/runs/{done['trials'][1]['run_id']}")["run"]
    assert (run["experiment"], run["config"]) == ("lr-study", {"lr": 0.01, "script": "train"})
    experiments = jobs.client.get("/api/v1/projects/default/experiments")["experiments"]
    assert [e["primary_metric"] for e in experiments if e["name"] == "lr-study"] == ["val/loss"]
    # goal max: the other end wins.
    assert show(jobs, made["id"])["best"]["trial"] == 1
    listed = jobs.client.get(SWEEPS)["sweeps"]
    assert [s["best"]["trial"] for s in listed if s["id"] == made["id"]] == [1]


def _trials(home: Path, name: str) -> list[tuple[int, str]]:
    with sqlite3.connect(home / "gpuplane.db") as conn:
        return conn.execute("SELECT j.sweep_trial, j.sweep_values FROM jobs j JOIN sweeps s ON s.id = j.sweep_id "
                            "WHERE s.name = ? ORDER BY j.sweep_trial", (name,)).fetchall()


def test_a_kill_9_halfway_through_a_500_trial_submit_leaves_all_or_none_and_a_resubmit_makes_each_once(
        daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:2")
    jobs.client.post("/api/v1/queue/pause")  # the trials stay queued (the pause outlives a restart)
    body = {"job": {"command": ["echo", "{i}"], "cwd": str(jobs.workdir), "gpu": 0}, "grid": {"i": list(range(500))}}
    began = time.monotonic()
    jobs.client.post(SWEEPS, {**body, "name": "timing"})
    whole = time.monotonic() - began  # how long one such submit takes here
    outcomes = []
    for attempt, share in enumerate((0.5, 0.3, 0.7)):
        name = f"cut-{attempt}"
        replies: list[object] = []
        sender = threading.Thread(target=lambda: replies.append(_post(jobs, {**body, "name": name})))
        sender.start()
        time.sleep(whole * share)
        jobs.daemon.signal(signal.SIGKILL)
        jobs.daemon.proc.wait(10)
        sender.join(30)
        home = jobs.daemon.home
        jobs.restart(daemon_factory, "--gpus=fake:2")
        found = _trials(home, name)
        assert len(found) in (0, 500), f"a kill -9 left {len(found)} of 500 trials"
        outcomes.append(len(found))
        again = jobs.client.post(SWEEPS, {**body, "name": name})
        assert (again["created"], again["existing"]) == (500 - len(found), len(found))
        after = _trials(home, name)
        assert [t for t, _ in after] == list(range(500))  # each trial exactly once
        assert len({v for _, v in after}) == 500
        assert sorted(int(v.removeprefix('{"i":').removesuffix("}")) for _, v in after) == list(range(500))
    print(f"a whole submit took {whole:.3f} s; trials found after each kill: {outcomes}")


def _post(jobs, body):
    try:
        return jobs.client.post(SWEEPS, body)
    except (DaemonUnreachable, ApiError, OSError) as exc:
        return exc
