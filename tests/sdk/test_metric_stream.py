"""GET /api/v1/runs/{id}/metrics/stream against a real gpuplaned and the SDK: a follower that
disconnects mid-run and resumes with Last-Event-ID gets every point once."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys

import pytest
from helpers import Jobs, wait_for
from sdk_fake import sdk_env

pytestmark = pytest.mark.e2e

SCRIPT = """
import os, sys, time, gpuplane
go = sys.argv[1]
run = gpuplane.init(name="streamed")
print("run", run.id, flush=True)
for phase, steps in ((".1", range(0, 50)), (".2", range(50, 100))):
    while not os.path.exists(go + phase):  # the test's go-ahead: no timing in it
        time.sleep(0.01)
    for step in steps:
        run.log({"loss": 1.0 / (step + 1), "acc": float("nan") if step == 60 else step / 100}, step=step)
run.finish()
"""


def read_until(events, last_step: int, steps: dict[str, list[int]]) -> str:
    """Read ``points`` events until ``loss`` reached ``last_step``; returns the last id."""
    last_id = None
    for event in events:
        assert event.event in ("points", "ready"), event
        last_id = event.id
        if event.event == "points":
            for name, cols in json.loads(event.data)["series"].items():
                steps.setdefault(name, []).extend(cols["step"])
        if steps.get("loss") and steps["loss"][-1] >= last_step:
            return last_id
    raise AssertionError("the stream ended early")


def test_a_follower_resumes_with_last_event_id_and_gets_every_point_once(daemon_factory, tmp_path):
    daemon = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none").daemon
    go = tmp_path / "go"
    script = subprocess.Popen([sys.executable, "-c", SCRIPT, str(go)], env=sdk_env(daemon.runtime_dir),
                              stdout=subprocess.PIPE, text=True)
    try:
        run_id = script.stdout.readline().split()[1]
        path = f"/api/v1/runs/{run_id}/metrics/stream"
        steps: dict[str, list[int]] = {}
        with contextlib.closing(daemon.client().events(path, read_timeout=20)) as first:
            ready = next(first)
            assert ready.event == "ready" and ready.id
            (tmp_path / "go.1").touch()
            last_id = read_until(first, 49, steps)
        (tmp_path / "go.2").touch()  # the second half is logged while nobody follows
        assert script.wait(30) == 0
        with contextlib.closing(daemon.client().events(path, last_event_id=last_id, read_timeout=20)) as resumed:
            read_until(resumed, 99, steps)
        assert steps["loss"] == list(range(100)) and steps["acc"] == list(range(100))

        only = {}
        with contextlib.closing(daemon.client().events(f"{path}?names=acc", last_event_id=last_id)) as named:
            for event in named:
                data = json.loads(event.data)
                assert set(data["series"]) == {"acc"}
                only.setdefault("acc", []).extend(data["series"]["acc"]["step"])
                if 60 in data["series"]["acc"]["step"]:
                    i = data["series"]["acc"]["step"].index(60)
                    assert data["series"]["acc"]["value"][i] is None and data["series"]["acc"]["nonfinite"]["NaN"] == [i]
                if only["acc"][-1] == 99:
                    break
        assert only["acc"] == list(range(50, 100))  # phase 1 ended at step 49, before the go-ahead

        with contextlib.closing(daemon.client().events(path, last_event_id="00000000-1")) as stale:
            assert next(stale).event == "reset"
        bad = daemon.client()
        with pytest.raises(Exception, match="no run|not found"):
            bad.events("/api/v1/runs/run_01JD0000000000000000000000/metrics/stream")
    finally:
        script.kill()
        script.wait()
        script.stdout.close()
