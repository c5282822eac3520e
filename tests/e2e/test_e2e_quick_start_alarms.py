"""The README's quick start for real (examples/train.py, 2000 steps of PyTorch on the CPU,
as a job of a real gpuplaned): a healthy run raises no alarm and its diagnosis finds no
problem. The old LOSS_SPIKE raised seven on it, OVERFITTING_SUSPECTED one, and `diagnose`
counted "3 problem(s)" (tests/alarm_corpus holds the same run recorded)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from helpers import Jobs, wait_for

if importlib.util.find_spec("torch") is None:
    pytest.skip("torch is missing (the `examples` extra)", allow_module_level=True)

pytestmark = pytest.mark.e2e

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train.py"


def test_the_quick_start_raises_no_alarm_and_its_diagnosis_finds_no_problem(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    done = jobs.daemon.run_ctl("submit", "--gpu", "0", "--quiet", "--dir", str(jobs.workdir), "--",
                               sys.executable, str(TRAIN), "--seed", "0")
    assert done.returncode == 0, done.stderr
    job = jobs.wait(done.stdout.strip(), timeout=240)
    assert job["status"] == "SUCCEEDED", job
    run_id = job["run_id"]
    wait_for(lambda: sum(jobs.client.get(f"/api/v1/runs/{run_id}/metrics?names=loss&points=1")["series"]
                         .get("loss", {}).get("count") or [0]) == 2000, timeout=30, what="the run's 2000 loss points")
    events = jobs.client.get(f"/api/v1/events?run_id={run_id}")["events"]
    alarms = [(e["type"], e["step"]) for e in events if e["severity"] != "info"]
    assert alarms == [], alarms
    report = jobs.client.get(f"/api/v1/runs/{run_id}/diagnosis")
    assert "no problem found" in report["summary"], report
    shown = jobs.daemon.run_ctl("diagnose", run_id)
    assert shown.returncode == 0 and "no problem found" in shown.stdout, shown.stdout + shown.stderr
