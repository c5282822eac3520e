"""Checkpoints a job saves on its own, without the SDK, found by the node's watcher on a real
daemon: a real PyTorch script that saves with ``torch.save`` every N steps (one save paused
half-way, the file held open), and a Hugging Face style ``checkpoint-*/`` dir with a
``trainer_state.json``. Each is registered once, only when complete, with its step. Then
``gpuplanectl ckpt verify`` on them: unchanged, changed where only the full hash sees it,
changed in its fingerprint, gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from helpers import Jobs, wait_for

from gpuplaned.checkpoints.files import fingerprint

pytestmark = pytest.mark.e2e

TRAIN = textwrap.dedent("""
    import io, json, os, time
    import torch

    class Slow(io.FileIO):
        # One save stops half-way for longer than the watcher's window, its file still open.
        def __init__(self, path):
            super().__init__(path, "wb")
            self.pause = True
        def write(self, data):
            written = super().write(data)
            if self.pause and self.tell() > 4096:
                self.flush()
                time.sleep(1.5)
                self.pause = False
            return written

    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    os.makedirs("checkpoints", exist_ok=True)
    for step in range(1, 21):
        loss = model(torch.randn(8, 64)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        if step % 5 == 0:
            state = {"step": step, "model": model.state_dict(), "opt": opt.state_dict()}
            if step == 10:
                with Slow(f"checkpoints/step_{step}.pt") as f:
                    torch.save(state, f)
            else:
                torch.save(state, f"checkpoints/step_{step}.pt")
            time.sleep(0.3)
    hf = "outputs/checkpoint-30"
    os.makedirs(hf)
    torch.save(model.state_dict(), f"{hf}/pytorch_model.bin")
    with open(f"{hf}/trainer_state.json", "w") as f:
        json.dump({"global_step": 30, "epoch": 1.5, "log_history": [{"loss": float(loss), "step": 30}],
                   "best_metric": None, "max_steps": 30}, f)
    print("done", flush=True)
""")


def _checkpoints(jobs: Jobs, run_id: str) -> list[dict]:
    return jobs.client.get(f"/api/v1/runs/{run_id}/checkpoints")["checkpoints"]


def _quick_watcher(tmp_path) -> None:
    """The daemon's config (``XDG_CONFIG_HOME`` of ``daemon_factory``'s "d"): a short window."""
    config = tmp_path / "d" / "config" / "gpuplane"
    config.mkdir(parents=True)
    (config / "gpuplaned.toml").write_text("[checkpoints]\nstable_s = 0.5\nrescan_interval_s = 0.2\n")


def _ctl(jobs: Jobs, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuplanectl", *args], env=jobs.daemon.env, cwd=jobs.workdir,
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def test_a_pytorch_scripts_saves_are_registered_once_when_complete(daemon_factory, tmp_path):
    _quick_watcher(tmp_path)
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    old = jobs.workdir / "checkpoints" / "step_999.pt"  # an earlier run's: not this one's
    old.parent.mkdir()
    old.write_bytes(b"old")
    os.utime(old, (1_000_000_000, 1_000_000_000))
    (jobs.workdir / "train.py").write_text(TRAIN)
    job = jobs.submit([sys.executable, "train.py"], gpu=0)
    done = jobs.wait(job["id"], timeout=60)
    assert done["status"] == "SUCCEEDED", jobs.daemon.log()
    run_id = done["run_id"]

    def all_found():
        found = _checkpoints(jobs, run_id)
        return found if len(found) == 5 else None

    found = wait_for(all_found, timeout=20, what="the five checkpoints")
    assert [(c["path"], c["step"], c["epoch"]) for c in found] == [
        *((str(jobs.workdir / f"checkpoints/step_{s}.pt"), s, None) for s in (5, 10, 15, 20)),
        (str(jobs.workdir / "outputs/checkpoint-30"), 30, 1.5)]
    for ck in found:  # registered as they are now: complete
        assert ck["fingerprint"] == fingerprint(ck["path"]), ck
        assert ck["metadata"]["source"] == "watcher"
    sizes = {c["path"]: c["size_bytes"] for c in found}
    assert sizes[str(jobs.workdir / "checkpoints/step_10.pt")] == (jobs.workdir / "checkpoints/step_10.pt").stat().st_size
    assert [c["metadata"]["kind"] for c in found] == ["file"] * 4 + ["hf"]
    events = jobs.client.get(f"/api/v1/events?run_id={run_id}&type=CHECKPOINT_CREATED")["events"]
    assert sorted(e["context"]["path"] for e in events) == sorted(c["path"] for c in found)  # one each
    one = jobs.client.get(f"/api/v1/checkpoints/{found[0]['id']}")["checkpoint"]
    assert one["fingerprint"] == found[0]["fingerprint"]


SAVE = "import torch; torch.save({'w': torch.ones(2_000_000)}, 'models/epoch=1-step=10.ckpt'); " \
       "torch.save({'w': torch.zeros(1000)}, 'models/weights.pt')"


def test_ckpt_verify_flags_a_file_that_changed_since_it_was_registered(daemon_factory, tmp_path):
    _quick_watcher(tmp_path)
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    (jobs.workdir / "models").mkdir()
    submitted = _ctl(jobs, "submit", "--gpu", "0", "--quiet", "--ckpt-dir", "models", "--", sys.executable, "-c", SAVE)
    assert submitted.returncode == 0, submitted.stderr
    done = jobs.wait(submitted.stdout.strip(), timeout=60)
    assert done["status"] == "SUCCEEDED", jobs.daemon.log()
    found = wait_for(lambda: (f := _checkpoints(jobs, done["run_id"])) and len(f) == 2 and f, timeout=20,
                     what="the two checkpoints in the declared folder")
    lightning, weights = found  # step 10 first, then the one with no step
    assert (lightning["step"], lightning["epoch"], weights["step"]) == (10, 1.0, None)

    ok = _ctl(jobs, "ckpt", "verify", lightning["id"])
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("ok  ") and "sha256:" in ok.stdout
    kept = jobs.client.get(f"/api/v1/checkpoints/{lightning['id']}")["checkpoint"]
    assert kept["full_hash"].startswith("sha256:") and kept["verified_at"] is not None

    path = lightning["path"]  # 8 MB; one byte in the middle, same size and mtime: only the full hash sees it
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    middle = _ctl(jobs, "ckpt", "verify", "--json", lightning["id"])
    assert middle.returncode == 1
    body = json.loads(middle.stdout)
    assert (body["changed"], body["present"], body["fingerprint"]) == (True, True, lightning["fingerprint"])
    assert body["full_hash"] != kept["full_hash"]
    assert jobs.client.get(f"/api/v1/checkpoints/{lightning['id']}")["checkpoint"]["full_hash"] == kept["full_hash"]

    with open(weights["path"], "ab") as f:  # never verified: its fingerprint tells
        f.write(b"more")
    appended = _ctl(jobs, "ckpt", "verify", weights["id"])
    assert appended.returncode == 1 and appended.stdout.startswith("CHANGED  ")
    assert f"(registered {weights['fingerprint']})" in appended.stdout
    os.remove(weights["path"])
    gone = _ctl(jobs, "ckpt", "verify", weights["id"])
    assert gone.returncode == 1 and "the file is gone" in gone.stdout
    unknown = _ctl(jobs, "ckpt", "verify", "ck_nope")
    assert unknown.returncode == 1 and "no checkpoint ck_nope" in unknown.stderr


RESUMABLE = textwrap.dedent("""
    import os, time
    import torch
    os.makedirs("checkpoints", exist_ok=True)
    torch.save({"step": 1}, "checkpoints/step_1.pt")
    while not os.path.exists("go"):
        time.sleep(0.02)
    torch.save({"step": 2}, "extra/step_2.pt")  # a declared folder: the adopted job's own variable tells
    while not os.path.exists("done"):
        time.sleep(0.02)
""")


def test_after_the_daemon_is_killed_an_adopted_jobs_saves_are_still_registered_once(daemon_factory, tmp_path):
    _quick_watcher(tmp_path)
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    first = jobs.daemon
    (jobs.workdir / "train.py").write_text(RESUMABLE)
    (jobs.workdir / "extra").mkdir()
    job = jobs.submit([sys.executable, "train.py"], gpu=0, env={"GPUPLANE_CKPT_DIR": str(jobs.workdir / "extra")})
    run_id = jobs.wait(job["id"], "RUNNING")["run_id"]
    wait_for(lambda: _checkpoints(jobs, run_id), timeout=20, what="step_1.pt")
    first.signal(signal.SIGKILL)
    first.proc.wait(10)
    jobs.restart(daemon_factory, "--gpus=fake:1")  # re-adopts the job; its watcher knows nothing yet
    jobs.file("go").touch()
    found = wait_for(lambda: (f := _checkpoints(jobs, run_id)) and len(f) == 2 and f, timeout=20, what="step_2.pt")
    jobs.file("done").touch()
    assert jobs.wait(job["id"], timeout=60)["status"] == "SUCCEEDED"
    assert [(os.path.basename(os.path.dirname(c["path"])), c["step"]) for c in found] == [("checkpoints", 1),
                                                                                          ("extra", 2)]
    events = jobs.client.get(f"/api/v1/events?run_id={run_id}&type=CHECKPOINT_CREATED")["events"]
    assert sorted(e["step"] for e in events) == [1, 2]  # step_1.pt, found again after the restart: once
