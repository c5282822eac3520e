"""A sweep's policies on a real daemon with real trial processes (issue 31 items 3 and 4):

- early stopping: trials that log a clearly worse loss through the SDK are stopped (SIGTERM with
  their grace; CANCELLED, EARLY_STOPPED, and an event naming the rule, the value, the threshold
  and the step), while the best, a good and a noisy good trial run to their end;
- retry_on: a trial killed from outside or out of memory is queued again, up to the count, and
  one that exits 1 is not;
- three trials failing within their first minute pause the sweep, with a SWEEP_PAUSED event;
  the trials left wait, and a resumed sweep is not paused again by the old failures.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from helpers import Jobs, wait_for

pytestmark = pytest.mark.e2e

SWEEPS = "/api/v1/sweeps"
SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"

# A trial logging its loss through the SDK. The good ones end after 150 steps; a bad one would log
# for ever: only a stop ends it. On SIGTERM it notes the signal, then exits.
TRAIN = textwrap.dedent("""\
    import random, signal, sys, time
    import gpuplane

    kind = sys.argv[1]

    def stopped(signum, frame):
        open(f"sigterm-{kind}", "w").write("SIGTERM")
        sys.exit(0)

    signal.signal(signal.SIGTERM, stopped)
    rng = random.Random(kind)
    level = {"best": 0.1, "good": 0.3, "noisy": 0.2, "bad": 3.0, "worse": 5.0}[kind]
    run = gpuplane.init()
    step = 0
    while kind in ("bad", "worse") or step < 150:
        value = level + 1 / (step + 1)
        if kind == "noisy":
            value *= 1 + 2 * rng.random()  # up to three times its level, never under it
        run.log({"loss": value}, step=step)
        step += 1
        time.sleep(0.02)
    run.finish()
""")


@pytest.fixture
def jobs(daemon_factory, tmp_path):
    return Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1", "--max-cpu-jobs", "8")


def submit(jobs, **body):
    return jobs.client.post(SWEEPS, {"job": {"cwd": str(jobs.workdir), "gpu": 0, **body.pop("job")}, **body})


def show(jobs, sweep_id):
    return jobs.client.get(f"{SWEEPS}/{sweep_id}")["sweep"]


def events(jobs, kind):
    return list(reversed(jobs.client.get(f"/api/v1/events?type={kind}&limit=100")["events"]))


def by_kind(sweep):
    return {t["values"]["kind"]: t for t in sweep["trials"]}


def test_early_stopping_stops_the_trials_behind_and_lets_the_good_ones_finish(jobs):
    jobs.file("train.py").write_text(TRAIN)
    kinds = ["best", "good", "noisy", "bad", "worse"]
    made = submit(jobs, name="es", metric="loss", goal="min", early_stop={"rule": "median", "min_steps": 10},
                  job={"command": [sys.executable, "train.py", "{kind}"], "env": {"PYTHONPATH": str(SDK_DIR)},
                       "stop_grace_s": 10},
                  trials_list=[{"kind": k} for k in kinds])["sweep"]
    done = wait_for(lambda: (s := show(jobs, made["id"])) and all(t["status"] in ("SUCCEEDED", "CANCELLED", "FAILED")
                                                                  for t in s["trials"]) and s,
                    timeout=60, what="every trial to end")
    trials = by_kind(done)
    assert {k: trials[k]["status"] for k in kinds} == {"best": "SUCCEEDED", "good": "SUCCEEDED", "noisy": "SUCCEEDED",
                                                       "bad": "CANCELLED", "worse": "CANCELLED"}
    for kind in ("bad", "worse"):
        trial = trials[kind]
        assert trial["failure_reason"] == "EARLY_STOPPED"
        job = jobs.get(trial["job_id"])
        assert (job["status"], job["failure_reason"]) == ("CANCELLED", "EARLY_STOPPED")
        run = jobs.client.get(f"/api/v1/runs/{trial['run_id']}")["run"]
        assert run["status"] == "CANCELLED" and run["failure_reason"] == "EARLY_STOPPED"
        assert jobs.file(f"sigterm-{kind}").read_text() == "SIGTERM"  # SIGTERM, not a SIGKILL: it had its grace
    stops = {e["job_id"]: e for e in events(jobs, "EARLY_STOPPED")}
    assert set(stops) == {trials["bad"]["job_id"], trials["worse"]["job_id"]}
    for kind, level in (("bad", 3.0), ("worse", 5.0)):
        event = stops[trials[kind]["job_id"]]
        context = event["context"]
        assert context["rule"] == "median" and context["metric"] == "loss" and context["sweep_id"] == made["id"]
        assert context["step"] >= 10 and event["step"] == context["step"]
        assert context["value"] == pytest.approx(level + 1 / (context["step"] + 1))  # its best so far at the step
        assert context["threshold"] < 1.5 < context["value"]  # the median of the others: far below it
        assert context["evidence"][0]["run_id"] == trials[kind]["run_id"]
        assert f"stopped early by the median rule" in event["message"] and "worse than the median" in event["message"]
    assert not any(jobs.file(f"sigterm-{k}").exists() for k in ("best", "good", "noisy"))
    assert done["best"]["values"] == {"kind": "best"}


KILLED = textwrap.dedent("""\
    case "$GPUPLANE_SWEEP_KIND" in
      flaky) [ "$GPUPLANE_ATTEMPT" -ge 2 ] && exit 0; kill -KILL $$ ;;
      always) kill -KILL $$ ;;
      oom) [ "$GPUPLANE_ATTEMPT" -ge 2 ] && exit 0; echo "RuntimeError: CUDA out of memory" >&2; exit 1 ;;
      exits) exit 1 ;;
    esac
""")


def _retry_sweep(jobs, name, kinds, retry_on):
    made = submit(jobs, name=name, job={"command": ["sh", "-c", KILLED]}, retry_on=retry_on,
                  trials_list=[{"kind": k} for k in kinds])["sweep"]
    return wait_for(lambda: (s := show(jobs, made["id"])) and all(t["status"] in ("SUCCEEDED", "FAILED")
                                                                  for t in s["trials"]) and s,
                    timeout=40, what=f"sweep {name}'s trials to end")


def test_retry_on_queues_again_a_trial_killed_from_outside_up_to_the_count(jobs):
    done = _retry_sweep(jobs, "preempt", ["flaky", "always"], {"causes": ["PREEMPTED"], "times": 1})
    trials = by_kind(done)
    flaky, always = jobs.get(trials["flaky"]["job_id"]), jobs.get(trials["always"]["job_id"])
    assert (flaky["status"], flaky["attempt"]) == ("SUCCEEDED", 2)
    assert (always["status"], always["attempt"], always["failure_reason"]) == ("FAILED", 2, "SIGNAL(SIGKILL)")
    retries = [e for e in events(jobs, "POLICY_ACTION") if e["context"]["policy"] == "retry_on"]
    assert sorted(e["job_id"] for e in retries) == sorted([flaky["id"], always["id"]])
    assert all("PREEMPTED (SIGNAL(SIGKILL)): retry 1 of 1" in e["context"]["reason"] for e in retries)
    assert not show(jobs, done["id"])["paused"]  # two trials failing fast: no flapping


def test_retry_on_retries_only_its_causes(jobs):
    done = _retry_sweep(jobs, "oom", ["oom", "exits"], {"causes": ["OOM"], "times": 2})
    trials = by_kind(done)
    oom, exits = jobs.get(trials["oom"]["job_id"]), jobs.get(trials["exits"]["job_id"])
    assert (oom["status"], oom["attempt"]) == ("SUCCEEDED", 2)
    assert (exits["status"], exits["attempt"], exits["failure_reason"]) == ("FAILED", 1, "EXIT_CODE")  # final
    [retry] = [e for e in events(jobs, "POLICY_ACTION") if e["context"]["policy"] == "retry_on"]
    assert retry["job_id"] == oom["id"] and "OOM (OOM): retry 1 of 2" in retry["context"]["reason"]


def test_three_trials_failing_in_their_first_minute_pause_the_sweep(jobs):
    made = submit(jobs, name="flap", job={"command": ["sh", "-c", "sleep 0.3; exit 1"]}, max_parallel=1,
                  grid={"i": list(range(5))})["sweep"]
    paused = wait_for(lambda: (s := show(jobs, made["id"]))["paused"] and s, timeout=30, what="the sweep to pause")
    assert paused["pause_reason"] == "3 trials failed within their first minute"
    [event] = events(jobs, "SWEEP_PAUSED")
    assert event["context"]["sweep_id"] == made["id"] and event["severity"] == "warning"
    assert len(event["context"]["job_ids"]) == 3 and "3 trials failed within their first minute" in event["message"]
    # The trials left wait, saying why; at most the one dispatched before the pause went on.
    settled = wait_for(lambda: (s := show(jobs, made["id"])) and not any(t["status"] in ("DISPATCHING", "RUNNING")
                                                                          for t in s["trials"]) and s,
                       what="the trial in flight to end")
    queued = [t for t in settled["trials"] if t["status"] == "QUEUED"]
    assert 1 <= len(queued) <= 2 and {t["status"] for t in settled["trials"]} == {"FAILED", "QUEUED"}
    wait_for(lambda: all(t["queue_reason"] == "sweep flap paused" for t in show(jobs, made["id"])["trials"]
                         if t["status"] == "QUEUED"), what="the queued trials to say why they wait")
    # Resumed, the old failures do not pause it again: the rest run (and fail: fewer than three new ones).
    jobs.client.post(f"{SWEEPS}/{made['id']}/resume")
    ended = wait_for(lambda: (s := show(jobs, made["id"])) and all(t["status"] == "FAILED" for t in s["trials"]) and s,
                     timeout=30, what="the rest to run")
    assert len(events(jobs, "SWEEP_PAUSED")) == 1 and not ended["paused"]
