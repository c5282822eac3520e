"""Script events and checkpoints from the SDK: they ride in the metric batches, so they arrive
once, through a live daemon or through the spool, and the best checkpoint is marked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Jobs, wait_for
from sdk_fake import SDK_DIR, sdk_env

from gpuplaned.protocol.sdk_spool import spool_files

sys.path.insert(0, str(SDK_DIR))

from gpuplane._run import Run  # noqa: E402

pytestmark = pytest.mark.e2e

SCRIPT = """
import json, os, sys, gpuplane
out = sys.argv[1]
run = gpuplane.init(project="records", name="ckpts")
for step in range(100):
    val = abs(step - 60) / 10.0  # best (lowest) at step 60
    run.log({"loss": 1.0 / (step + 1), "val/loss": val})
    if step % 20 == 0:
        path = os.path.join(out, "step_%d.pt" % step)
        with open(path, "wb") as f:
            f.write(b"x" * (step + 1))
        run.log_checkpoint(path, metadata={"kind": "periodic"})
run.log_event("phase", {"name": "eval", "epoch": 2}, step=50)
run.log_event("odd", {"x": object()})  # not JSON: skipped and counted, never raised
run.log_event("", {})  # no name: skipped too
run.log_checkpoint(os.path.join(out, "last.pt"), step=99, epoch=1.5)
run.log_checkpoint(os.path.join(out, "last.pt"), step=99)  # the same path again: one checkpoint
print(json.dumps({"run": run.id, "summary_before": run.summary() is not None}), flush=True)
run.finish()
print(json.dumps({"summary": run.summary(), "stats": run.stats()}), flush=True)
"""


def test_events_and_checkpoints_arrive_once_and_the_best_is_marked(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    out = tmp_path / "ckpt"
    out.mkdir()
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], env=sdk_env(jobs.daemon.runtime_dir),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    first, second = (json.loads(line) for line in done.stdout.splitlines())
    run_id = first["run"]
    assert second["stats"]["skipped"] == 2  # the nameless event at the call, the odd one on the sender
    assert first["summary_before"] is True
    assert second["summary"]["metrics"]["val/loss"]["best"]["value"] == 0.0
    api = jobs.client
    table = api.get(f"/api/v1/runs/{run_id}/checkpoints?metric=val/loss")
    got = [(Path(c["path"]).name, c["step"], c["size_bytes"], c["metric_value"], c["best"])
           for c in table["checkpoints"]]
    assert got == [("step_0.pt", 0, 1, 6.0, False), ("step_20.pt", 20, 21, 4.0, False),
                   ("step_40.pt", 40, 41, 2.0, False), ("step_60.pt", 60, 61, 0.0, True),
                   ("step_80.pt", 80, 81, 2.0, False), ("last.pt", 99, None, 3.9, False)]
    assert table["direction"] == "minimize" and table["checkpoints"][0]["metadata"] == {"kind": "periodic"}
    one = api.get(f"/api/v1/checkpoints/{table['best_id']}")["checkpoint"]
    assert one["path"] == str(out / "step_60.pt")
    events = api.get(f"/api/v1/events?type=USER_EVENT,CHECKPOINT_CREATED&run_id={run_id}&limit=100")["events"]
    user = [e for e in events if e["type"] == "USER_EVENT"]
    assert [(e["message"], e["step"], e["context"]) for e in user] == \
        [("phase", 50, {"name": "phase", "data": {"name": "eval", "epoch": 2}})]
    assert sum(e["type"] == "CHECKPOINT_CREATED" for e in events) == 7  # last.pt twice: registered, moved


def test_records_logged_without_a_daemon_are_spooled_and_replayed_once(daemon_factory, tmp_path):
    home = tmp_path / "d" / "home"  # the home of the daemon started below
    run = Run(env={"GPUPLANE_RUNTIME_DIR": str(tmp_path / "none"), "GPUPLANE_HOME": str(home)}, name="offline",
              run_id="offline-run", wait=0)
    for step in range(10):
        run.log({"acc": step / 10})
    run.log_event("phase", {"name": "done"})
    run.log_checkpoint(tmp_path / "model.pt", step=9)
    run.finish()
    [path] = spool_files(home / "spool")
    assert b'"checkpoints"' in path.read_bytes() and b'"events"' in path.read_bytes()
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")  # replays the spool at start
    api = jobs.client
    wait_for(lambda: not path.exists(), timeout=30, what="the spool to be replayed")
    [ck] = api.get("/api/v1/runs/offline-run/checkpoints?metric=acc")["checkpoints"]
    assert (ck["path"], ck["step"], ck["metric_value"], ck["best"]) == (str(tmp_path / "model.pt"), 9, 0.9, True)
    events = api.get("/api/v1/events?type=USER_EVENT&run_id=offline-run")["events"]
    assert [e["message"] for e in events] == ["phase"]
