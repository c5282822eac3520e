"""Retention and lineage on a real daemon (``--gpus fake:1``, a quick checkpoint watcher).

A real PyTorch job logs ``val/loss`` with the SDK and ``torch.save``s a checkpoint every 10 steps
(registered with ``run.log_checkpoint`` and found by the watcher, which gives each its
fingerprint), then an HF-style ``checkpoint-70/`` dir with a ``trainer_state.json``.
``gpuplanectl ckpt prune`` is a dry run first, then with ``--yes`` keeps exactly the best 1 and
the last 2, never the one an unfinished evaluation uses, refuses the one changed since it was
registered, and records each deletion as an event; ``gpuplanectl checkpoints`` shows the chain,
the evaluation and the deleted ones. A job's ``retention`` policy deletes as checkpoints arrive
(through the watcher alone), and a retry with ``--resume-from`` links the new run's first
checkpoint to the one it resumed from, which stays while that run lives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jsonschema
import pytest
from helpers import Jobs, wait_for

from gpuplaned.http import openapi
from gpuplaned.protocol.errors import ApiError, ErrorCode

pytestmark = pytest.mark.e2e

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"
LOSSES = {10: 0.9, 20: 0.1, 30: 0.5, 40: 0.4, 50: 0.6, 60: 0.7, 70: 0.8}  # the best at 20

TRAIN = textwrap.dedent(f"""
    import json, os
    import torch
    import gpuplane

    losses = {LOSSES!r}
    run = gpuplane.init()
    os.makedirs("checkpoints", exist_ok=True)
    model = torch.nn.Linear(16, 16)
    for step in range(10, 70, 10):
        path = f"checkpoints/step_{{step}}.pt"
        torch.save({{"step": step, "model": model.state_dict()}}, path)
        run.log({{"val/loss": losses[step]}}, step=step)
        run.log_checkpoint(path, step=step)
    hf = "outputs/checkpoint-70"
    os.makedirs(hf)
    torch.save(model.state_dict(), f"{{hf}}/pytorch_model.bin")
    with open(f"{{hf}}/trainer_state.json", "w") as f:
        json.dump({{"global_step": 70, "epoch": 1.0, "log_history": []}}, f)
    run.log({{"val/loss": losses[70]}}, step=70)
    run.finish()
""")

WAIT = "import os, time\nwhile not os.path.exists('{0}'): time.sleep(0.05)"


def _quick_watcher(tmp_path) -> None:
    config = tmp_path / "d" / "config" / "gpuplane"
    config.mkdir(parents=True)
    (config / "gpuplaned.toml").write_text("[checkpoints]\nstable_s = 0.3\nrescan_interval_s = 0.1\n")


def _ctl(jobs: Jobs, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuplanectl", *args], env=jobs.daemon.env, cwd=jobs.workdir,
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def _fits(body: dict, schema: str) -> None:
    jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{schema}",
                                     "components": openapi.document()["components"]}).validate(body)


def _listing(jobs: Jobs, run_id: str) -> dict:
    return jobs.client.get(f"/api/v1/runs/{run_id}/checkpoints")


def _deleted_events(jobs: Jobs, run_id: str) -> list[dict]:
    return jobs.client.get(f"/api/v1/events?run_id={run_id}&type=CHECKPOINT_DELETED")["events"]


@pytest.fixture
def jobs(daemon_factory, tmp_path):
    _quick_watcher(tmp_path)
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    jobs.client.request("PUT", "/api/v1/primary-metric", {"metric": "val/loss"})
    return jobs


def _train(jobs: Jobs, **fields) -> str:
    """The ended job's run."""
    (jobs.workdir / "train.py").write_text(TRAIN)
    job = jobs.submit([sys.executable, "train.py"], gpu=0, env={"PYTHONPATH": str(SDK_DIR)}, **fields)
    done = jobs.wait(job["id"], timeout=60)
    assert done["status"] == "SUCCEEDED", jobs.daemon.log()
    return done["run_id"]


def _trained(jobs: Jobs) -> tuple[str, dict[int, dict]]:
    """The job's run, once all seven checkpoints carry the watcher's fingerprint."""
    run_id = _train(jobs)

    def fingerprinted():
        found = _listing(jobs, run_id)["checkpoints"]
        return found if len(found) == 7 and all(c["fingerprint"] for c in found) else None

    found = wait_for(fingerprinted, timeout=20, what="seven fingerprinted checkpoints")
    return run_id, {c["step"]: c for c in found}


def test_prune_is_a_dry_run_then_keeps_exactly_the_best_and_the_last_and_what_is_in_use(jobs):
    run_id, cks = _trained(jobs)
    listing = _listing(jobs, run_id)
    _fits(listing, "CheckpointList")
    assert [cks[s]["parent_id"] for s in sorted(cks)] == [None, *(cks[s]["id"] for s in sorted(cks)[:-1])]
    assert listing["best_id"] == cks[20]["id"] and cks[70]["metadata"]["kind"] == "hf"
    assert cks[30]["metrics"] == [{"name": "val/loss", "value": 0.5, "step": 30}]

    evaldir = jobs.workdir.parent / "eval"  # not the training's folder: its own watcher would find those files
    evaldir.mkdir()
    evaluating = jobs.client.post(f"/api/v1/checkpoints/{cks[30]['id']}/evaluations",
                                  {"command": [sys.executable, "-c", WAIT.format(jobs.file("eval-done"))], "gpu": 0,
                                   "cwd": str(evaldir)})
    jobs.wait(evaluating["job"]["id"], "RUNNING")
    path40 = cks[40]["path"]  # its first byte changed, its size and mtime kept: only the fingerprint tells
    st = os.stat(path40)
    with open(path40, "r+b") as f:
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 0xFF]))
    os.utime(path40, ns=(st.st_atime_ns, st.st_mtime_ns))

    dry = _ctl(jobs, "ckpt", "prune", run_id, "--keep-best", "1", "--keep-last", "2")
    assert dry.returncode == 1, dry.stderr  # something is refused
    out = dry.stdout
    assert out.splitlines()[0].startswith("would delete 2 (") and "dry run: nothing was deleted" in out
    assert f"{cks[20]['id']}  step 20  {cks[20]['path']}  best" in out
    assert f"step 30  {cks[30]['path']}  in use: evaluation {evaluating['evaluation']['id']}" in out
    assert f"step 70  {cks[70]['path']}  last 2" in out
    assert f"step 40  {path40}  changed since it was registered (its fingerprint differs)" in out
    assert all(os.path.exists(c["path"]) for c in cks.values())
    assert _deleted_events(jobs, run_id) == []

    done = _ctl(jobs, "ckpt", "prune", run_id, "--keep-best", "1", "--keep-last", "2", "--yes", "--json")
    body = json.loads(done.stdout)
    assert done.returncode == 1, done.stderr
    _fits(body, "PruneResult")
    assert sorted(d["step"] for d in body["deleted"]) == [10, 50]
    assert {k["step"] for k in body["kept"]} == {20, 30, 60, 70} and [r["step"] for r in body["refused"]] == [40]
    assert sorted(s for s, c in cks.items() if os.path.exists(c["path"])) == [20, 30, 40, 60, 70]
    events = _deleted_events(jobs, run_id)
    assert sorted((e["step"], e["context"]["checkpoint_id"]) for e in events) == [
        (10, cks[10]["id"]), (50, cks[50]["id"])]
    after = {c["step"]: c for c in _listing(jobs, run_id)["checkpoints"]}
    assert [s for s, c in after.items() if c["deleted_at"]] == [10, 50]
    assert after[30]["evaluations"][0]["id"] == evaluating["evaluation"]["id"]

    shown = _ctl(jobs, "checkpoints", run_id)
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[2] if line.startswith(("*", "x")) else line.split()[1]: line
            for line in shown.stdout.splitlines()[1:8]}
    assert rows["10"].startswith("x ") and rows["20"].startswith("* ") and f"{cks[60]['path']}" in rows["60"]
    assert f"{cks[30]['id']} step 30: {evaluating['evaluation']['id']} RUNNING" in shown.stdout
    assert "x deleted" in shown.stdout

    jobs.file("eval-done").touch()  # the evaluation ends: its checkpoint is no longer in use
    jobs.wait(evaluating["job"]["id"], timeout=30)
    last = jobs.client.post(f"/api/v1/runs/{run_id}/checkpoints/prune",
                            {"keep_best": 1, "keep_last": 2, "dry_run": False})
    assert [d["step"] for d in last["deleted"]] == [30] and not os.path.exists(cks[30]["path"])
    assert len(_deleted_events(jobs, run_id)) == 3
    for body, status, field in (({"keep_best": 0, "keep_last": 0}, 400, "keep_last"),
                                ({"keep_best": -1}, 400, "keep_best"), ({"dry_run": "no"}, 400, "dry_run")):
        with pytest.raises(ApiError) as refused:
            jobs.client.post(f"/api/v1/runs/{run_id}/checkpoints/prune", body)
        assert (refused.value.code.http_status, refused.value.details["field"]) == (status, field), body
    with pytest.raises(ApiError) as unknown:
        jobs.client.post("/api/v1/runs/run_nope/checkpoints/prune")
    assert unknown.value.code == ErrorCode.NOT_FOUND


def test_a_jobs_retention_policy_deletes_as_its_checkpoints_arrive(jobs):
    # keep_best 0: the best is kept all the same. The SDK registers the files (with their size,
    # which is what is checked when the watcher has not fingerprinted one yet); the HF dir
    # arrives last, through the watcher only.
    run_id = _train(jobs, retention={"keep_best": 0, "keep_last": 1})

    def settled():
        events = _deleted_events(jobs, run_id)
        return events if len(events) == 5 else None

    events = wait_for(settled, timeout=20, what="five CHECKPOINT_DELETED events")
    assert sorted(e["step"] for e in events) == [10, 30, 40, 50, 60]
    assert all(e["context"]["retention"] == "keep_best=0, keep_last=1" for e in events)
    found = _listing(jobs, run_id)["checkpoints"]
    assert {c["step"] for c in found if not c["deleted_at"]} == {20, 70}
    assert sorted(c["step"] for c in found if os.path.exists(c["path"])) == [20, 70]
    assert sorted(os.listdir(jobs.file("checkpoints"))) == ["step_20.pt"]


def test_a_resumed_attempts_first_checkpoint_hangs_from_what_it_resumed_from(jobs):
    run_id, cks = _trained(jobs)
    first_job = jobs.client.get(f"/api/v1/runs/{run_id}")["run"]["job_id"]
    (jobs.workdir / "train.py").write_text(
        "import os, time, torch\n"
        "torch.save({'resumed': os.environ['GPUPLANE_RESUME_FROM']}, 'checkpoints/step_80.pt')\n"
        + WAIT.format("resume-done") + "\n")
    # The retried attempt's watcher takes files saved since its start, less a second of clock
    # slack (MTIME_SLACK_NS): let that second pass, or it would count the first run's last saves.
    newest = max(os.stat(c["path"]).st_mtime_ns for c in cks.values())
    wait_for(lambda: time.time_ns() > newest + 1_200_000_000, timeout=5, what="the watcher's slack to pass")
    retried = _ctl(jobs, "job", "retry", first_job, "--resume-from", cks[30]["id"])
    assert retried.returncode == 0, retried.stderr
    second_run = wait_for(lambda: (r := jobs.wait(first_job, "RUNNING")["run_id"]) != run_id and r,
                          what="the retried attempt's run")
    found = wait_for(lambda: _listing(jobs, second_run)["checkpoints"], timeout=20, what="step_80.pt")
    assert (found[0]["step"], found[0]["parent_id"]) == (80, cks[30]["id"])
    shown = _ctl(jobs, "checkpoints", second_run)
    assert shown.returncode == 0 and cks[30]["id"] in shown.stdout.splitlines()[1]  # its parent: another run's
    # While the job and its resumed run live, what they resume from stays, whatever the counts say.
    held = jobs.client.post(f"/api/v1/runs/{run_id}/checkpoints/prune",
                            {"keep_best": 0, "keep_last": 1, "dry_run": False})
    kept = {k["step"]: k["reasons"] for k in held["kept"]}
    assert kept[30] == [f"in use: job {first_job} will resume from it",
                        f"in use: run {second_run} resumed from it and has not finished"]
    assert sorted(d["step"] for d in held["deleted"]) == [10, 40, 50, 60]
    assert os.path.exists(cks[30]["path"])
    jobs.file("resume-done").touch()
    jobs.wait(first_job, timeout=30)
