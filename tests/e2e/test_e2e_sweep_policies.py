"""A sweep's policies on a real daemon with real trial processes (issue 31 items 3 and 4):

- early stopping: trials that log a clearly worse loss through the SDK are stopped (SIGTERM with
  their grace; CANCELLED, EARLY_STOPPED, and an event naming the rule, the value, the threshold
  and the step), while the best, a noisy good trial and a slow starter that ends best run to
  their end;
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

# A trial logging its loss through the SDK. The ones to keep end after 150 steps; one to stop would
# log for ever: only a stop ends it. On SIGTERM it notes the signal, then exits.
TRAIN = textwrap.dedent("""\
    import math, random, signal, sys, time
    import gpuplane

    kind = sys.argv[1]

    def stopped(signum, frame):
        open(f"sigterm-{kind}", "w").write("SIGTERM")
        sys.exit(0)

    signal.signal(signal.SIGTERM, stopped)
    rng = random.Random(kind)
    curves = {
        "best": lambda s: 0.1 + 1 / (s + 1),
        "noisy": lambda s: (0.2 + 1 / (s + 1)) * (1 + 2 * rng.random()),  # up to three times its level
        "slow": lambda s: 0.05 + 2 * math.exp(-s / 15),  # behind the best until step 30, then ahead
        "bad": lambda s: 3 + 1 / (s + 1),
        "worse": lambda s: 5 + 1 / (s + 1),
        "flat": lambda s: 2.3 * (1 + 0.01 * rng.random()),  # never learns
    }
    run = gpuplane.init()
    step = 0
    while kind in ("bad", "worse", "flat") or step < 150:
        run.log({"loss": curves[kind](step)}, step=step)
        step += 1
        time.sleep(0.02)
    run.finish()
""")
KEEP = ("best", "noisy", "slow")
STOP = ("bad", "worse", "flat")
ENDED = ("SUCCEEDED", "CANCELLED", "FAILED")


@pytest.fixture
def jobs(daemon_factory, tmp_path):
    return Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1", "--max-cpu-jobs", "10")


def submit(jobs, **body):
    return jobs.client.post(SWEEPS, {"job": {"cwd": str(jobs.workdir), "gpu": 0, **body.pop("job")}, **body})


def show(jobs, sweep_id):
    return jobs.client.get(f"{SWEEPS}/{sweep_id}")["sweep"]


def events(jobs, kind):
    return list(reversed(jobs.client.get(f"/api/v1/events?type={kind}&limit=100")["events"]))


def by_kind(sweep):
    return {t["values"]["kind"]: t for t in sweep["trials"]}


def test_early_stopping_stops_the_trials_behind_and_lets_the_good_ones_finish(jobs):
    """Two sweeps at once, each with two trials to keep and three clearly worse: one with the best
    and a noisy good trial (min_steps 10), one with the best and a slow starter that ends best
    (min_steps 40: past the step where it catches up). Two to keep and three to stop: however the
    trials' starts and paces fall, at most one trial better than a kept one is among the others
    counted (at least three), so the median never stops it."""
    jobs.file("train.py").write_text(TRAIN)
    job = {"command": [sys.executable, "train.py", "{kind}"], "env": {"PYTHONPATH": str(SDK_DIR)}, "stop_grace_s": 10}
    made = {name: submit(jobs, name=name, metric="loss", goal="min", job=job,
                         early_stop={"rule": "median", "min_steps": min_steps},
                         trials_list=[{"kind": k} for k in kept + STOP])["sweep"]
            for name, kept, min_steps in (("es", ("best", "noisy"), 10), ("es-slow", ("best", "slow"), 40))}
    for name, sweep in made.items():
        done = wait_for(lambda: (s := show(jobs, sweep["id"])) and all(t["status"] in ENDED for t in s["trials"]) and s,
                        timeout=60, what=f"every trial of {name} to end")
        trials = by_kind(done)
        assert {k: t["status"] for k, t in trials.items()} == {k: "SUCCEEDED" if k in KEEP else "CANCELLED"
                                                               for k in trials}, name
        assert done["best"]["values"] == {"kind": "slow" if name == "es-slow" else "best"}
        stops = {e["job_id"]: e for e in events(jobs, "EARLY_STOPPED")}
        for kind in STOP:
            trial = trials[kind]
            assert trial["failure_reason"] == "EARLY_STOPPED"
            stopped = jobs.get(trial["job_id"])
            assert (stopped["status"], stopped["failure_reason"]) == ("CANCELLED", "EARLY_STOPPED")
            run = jobs.client.get(f"/api/v1/runs/{trial['run_id']}")["run"]
            assert run["status"] == "CANCELLED" and run["failure_reason"] == "EARLY_STOPPED"
            event = stops[trial["job_id"]]
            context = event["context"]
            assert context["rule"] == "median" and context["metric"] == "loss" and context["sweep_id"] == sweep["id"]
            assert context["step"] >= (40 if name == "es-slow" else 10) and event["step"] == context["step"]
            assert context["threshold"] < context["value"] and context["value"] >= 2.3  # its best so far, behind
            assert context["compared"] >= 3 and context["evidence"][0]["run_id"] == trial["run_id"]
            assert "stopped early by the median rule" in event["message"] and "worse than the median" in event["message"]
        assert not {trials[k]["job_id"] for k in KEEP if k in trials} & set(stops)
    # Each stopped trial had SIGTERM and its grace (not a SIGKILL): it noted the signal; no kept one did.
    assert all(jobs.file(f"sigterm-{kind}").read_text() == "SIGTERM" for kind in STOP)
    assert not any(jobs.file(f"sigterm-{kind}").exists() for kind in KEEP)
    assert len(stops) == 6


KILLED = textwrap.dedent("""\
    case "$GPUPLANE_SWEEP_KIND" in
      flaky) [ "$GPUPLANE_ATTEMPT" -ge 2 ] && exit 0; kill -KILL $$ ;;
      always) kill -KILL $$ ;;
      oom) [ "$GPUPLANE_ATTEMPT" -ge 2 ] && exit 0; sleep 0.5; echo "RuntimeError: CUDA out of memory" >&2; exit 1 ;;
      exits) exit 1 ;;
    esac
""")


def _retry_sweep(jobs, name, expected, retry_on):
    """A sweep of ``expected``'s kinds; waits until each trial is at its (status, attempt), then
    until nothing is in flight, and returns each trial's job by kind."""
    made = submit(jobs, name=name, job={"command": ["sh", "-c", KILLED]}, retry_on=retry_on,
                  trials_list=[{"kind": k} for k in expected])["sweep"]

    def ended():
        trials = {k: jobs.get(t["job_id"]) for k, t in by_kind(show(jobs, made["id"])).items()}
        return trials if {k: (j["status"], j["attempt"]) for k, j in trials.items()} == expected else None

    return wait_for(ended, timeout=40, what=f"sweep {name}'s trials to end as {expected}")


def test_retry_on_queues_again_a_trial_killed_from_outside_up_to_the_count(jobs):
    trials = _retry_sweep(jobs, "preempt", {"flaky": ("SUCCEEDED", 2), "always": ("FAILED", 2)},
                          {"causes": ["PREEMPTED"], "times": 1})
    assert trials["always"]["failure_reason"] == "SIGNAL(SIGKILL)"
    retries = [e for e in events(jobs, "POLICY_ACTION") if e["context"]["policy"] == "retry_on"]
    assert sorted(e["job_id"] for e in retries) == sorted([trials["flaky"]["id"], trials["always"]["id"]])
    assert all("PREEMPTED (SIGNAL(SIGKILL)): retry 1 of 1" in e["context"]["reason"] for e in retries)
    # The second kill was final: it stays FAILED (a pass on each failure, and one every 10 s).
    assert jobs.get(trials["always"]["id"])["status"] == "FAILED"
    assert not show(jobs, trials["always"]["sweep_id"])["paused"]  # two trials failing fast: no flapping


def test_retry_on_retries_only_its_causes(jobs):
    trials = _retry_sweep(jobs, "oom", {"oom": ("SUCCEEDED", 2), "exits": ("FAILED", 1)},
                          {"causes": ["OOM"], "times": 2})
    assert trials["exits"]["failure_reason"] == "EXIT_CODE"  # final: not a cause of retry_on
    [retry] = [e for e in events(jobs, "POLICY_ACTION") if e["context"]["policy"] == "retry_on"]
    assert retry["job_id"] == trials["oom"]["id"] and "OOM (OOM): retry 1 of 2" in retry["context"]["reason"]
    # exits failed half a second before oom: the pass that queued oom again saw it FAILED, and left it.
    assert jobs.get(trials["exits"]["id"])["attempt"] == 1


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
