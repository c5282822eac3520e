"""examples/train.py and examples/train_ddp.py for real: PyTorch on the CPU, a real gpuplaned.

Each test trains a few dozen steps and checks what a user would look at: the run's metrics
on the daemon (every step once), the TensorBoard event files and the checkpoints, and for
DDP the two ranks' sessions on one run. torch comes with the ``examples`` extra, which
``make test`` installs.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Jobs, base_env

# PyTorch publishes wheels for these; anywhere else the examples cannot run at all.
TORCH_PLATFORMS = {("linux", "x86_64"), ("linux", "aarch64"), ("darwin", "arm64"), ("win32", "AMD64")}
if importlib.util.find_spec("torch") is None:  # looked up, not imported: collecting stays light
    if (sys.platform, platform.machine()) not in TORCH_PLATFORMS:
        pytest.skip(f"no torch wheel for {sys.platform}/{platform.machine()}", allow_module_level=True)
    raise ImportError("torch is missing: `make test` installs it (the `examples` extra: "
                      "pip install -e '.[test,examples]')")

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STEPS = 40


def metrics(client, run_id: str, names: str) -> dict:
    return client.get(f"/api/v1/runs/{run_id}/metrics?names={names}&x=step&points=1000")


def assert_every_step_once(m: dict, name: str, steps: int = STEPS) -> None:
    assert m["x"][0] == 1 and m["x"][-1] == steps, m["x"]
    assert m["series"][name]["count"] == [1] * steps, name


def tensorboard_scalars(directory: Path) -> dict[str, list[int]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert list(directory.glob("events.out.tfevents.*")), directory
    acc = EventAccumulator(str(directory))
    acc.Reload()
    return {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def assert_checkpoints(directory: Path, steps: list[int]) -> None:
    import torch

    assert sorted(p.name for p in directory.iterdir()) == [f"step_{s:06d}.pt" for s in steps]
    last = torch.load(directory / f"step_{steps[-1]:06d}.pt", weights_only=True)
    assert last["step"] == steps[-1] and "model" in last and "optimizer" in last


def job_output(jobs: Jobs, job: dict, stream: str = "stdout") -> str:
    path = jobs.daemon.home / "jobs" / job["id"] / "attempt-1" / f"{stream}.log"
    return path.read_text() if path.exists() else ""


def submit(jobs: Jobs, *argv: str) -> dict:
    """``gpuplanectl submit --gpu 0 -- python EXAMPLE ...`` from the work dir; waits for the end."""
    done = jobs.daemon.run_ctl("submit", "--gpu", "0", "--quiet", "--dir", str(jobs.workdir), "--",
                               sys.executable, *argv)
    assert done.returncode == 0, done.stderr
    job = jobs.wait(done.stdout.strip(), timeout=90)
    assert job["status"] == "SUCCEEDED", (job, job_output(jobs, job, "stderr"))
    return job


def test_train_submitted_as_a_job_reports_metrics_and_writes_events_and_checkpoints(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    # No PYTHONPATH: the SDK comes from the venv (make installs ./sdk) or, without it, from sdk/ beside it.
    job = submit(jobs, str(EXAMPLES / "train.py"), "--steps", str(STEPS), "--eval-every", "20",
                 "--ckpt-every", "25")
    run_id = job["run_id"]
    out = jobs.workdir / "runs" / run_id  # the default --out: runs/<the job's run>
    assert f"run {run_id} out runs/{run_id}" in job_output(jobs, job)

    client = jobs.client
    m = metrics(client, run_id, "loss,acc,lr")
    for name in ("loss", "acc", "lr"):
        assert_every_step_once(m, name)
    assert m["series"]["lr"]["last"][0] == pytest.approx(0.01)
    val = metrics(client, run_id, "val/*")
    assert val["x"] == [20, 40] and set(val["series"]) == {"val/loss", "val/acc"}
    run = client.get(f"/api/v1/runs/{run_id}")["run"]
    assert run["env_snapshot"]["argv"][0].endswith("train.py")

    scalars = tensorboard_scalars(out / "tb")
    assert scalars["loss"] == list(range(1, STEPS + 1)) and scalars["val/acc"] == [20, 40]
    assert_checkpoints(out / "checkpoints", [25, 40])
    # registered with the run too, ranked by val/loss at their steps
    table = client.get(f"/api/v1/runs/{run_id}/checkpoints?metric=val/loss")
    assert [(Path(c["path"]).name, c["step"]) for c in table["checkpoints"]] == \
        [("step_000025.pt", 25), ("step_000040.pt", 40)]
    assert all(c["size_bytes"] > 0 for c in table["checkpoints"]) and table["best_id"] is not None


def test_train_runs_on_its_own_with_no_daemon_and_stops_cleanly_on_sigterm(tmp_path):
    env = base_env(tmp_path)  # a runtime dir where no daemon lives
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(EXAMPLES / "train.py"), "--steps", "1000000", "--eval-every", "10",
                             "--ckpt-every", "10", "--out", str(out)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith(f"run - out {out} ")
        while not proc.stdout.readline().startswith("checkpoint "):  # trained (and saved) 10 steps
            assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGTERM)  # what `gpuplanectl job cancel` sends first
        rest, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    last = int(re.search(r"^SIGTERM: stopped after step (\d+)$", rest, re.M).group(1))
    saved = list(range(10, last, 10)) + [last]  # every 10 steps, and where it stopped
    assert_checkpoints(out / "checkpoints", saved)
    assert tensorboard_scalars(out / "tb")["loss"] == list(range(1, last + 1))


SESSION_LINE = re.compile(r"^rank (\d) run (\S+) session (\S+) out (\S+)$", re.M)


def assert_two_ranks_on_one_run(client, output: str, run_id: str | None = None) -> str:
    """The two ``rank R run RUN session SID`` lines: two sessions, ranks 0 and 1, one run."""
    found = SESSION_LINE.findall(output)
    assert sorted(rank for rank, *_ in found) == ["0", "1"], output
    assert len({run for _, run, _, _ in found}) == 1, found
    run_id = run_id or found[0][1]
    for rank, run, session_id, _ in found:
        assert run == run_id
        session = client.get(f"/api/v1/sessions/{session_id}")["session"]
        assert session["run_id"] == run_id and session["rank"] == int(rank), session
        assert session["status"] == "SUCCEEDED" and session["points"] > 0, session
    m = metrics(client, run_id, "loss,acc,lr,rank0/loss,rank1/loss")
    for name in ("loss", "acc", "lr", "rank0/loss", "rank1/loss"):  # rank 0 alone logs the means
        assert_every_step_once(m, name)
    return run_id


def test_train_ddp_submitted_as_a_job_runs_two_ranks_in_the_jobs_run(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    job = submit(jobs, str(EXAMPLES / "train_ddp.py"), "--steps", str(STEPS), "--ckpt-every", "25",
                 "--eval-every", "20")
    run_id = assert_two_ranks_on_one_run(jobs.client, job_output(jobs, job), job["run_id"])
    out = jobs.workdir / "runs" / run_id
    scalars = tensorboard_scalars(out / "tb")  # rank 0's only: one point a step
    assert scalars["loss"] == list(range(1, STEPS + 1)) and "rank1/loss" not in scalars
    assert_checkpoints(out / "checkpoints", [25, 40])
    registered = jobs.client.get(f"/api/v1/runs/{run_id}/checkpoints")["checkpoints"]
    assert [c["step"] for c in registered] == [25, 40]  # rank 0's, once each


def test_train_ddp_on_its_own_shares_one_new_run_between_its_ranks(daemon_factory, tmp_path):
    daemon = daemon_factory("--gpus=none").start()
    daemon.wait_ready()
    env = dict(daemon.env)
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, str(EXAMPLES / "train_ddp.py"), "--steps", str(STEPS),
                           "--out", str(tmp_path / "out")], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    client = daemon.client()
    run_id = assert_two_ranks_on_one_run(client, done.stdout)
    assert run_id.startswith("run_ddp-")  # made by the parent, not by either rank's session
    run = client.get(f"/api/v1/runs/{run_id}")["run"]
    assert run["status"] == "SUCCEEDED" and run["name"] == "spiral-mlp-ddp"
    assert tensorboard_scalars(tmp_path / "out" / "tb")["loss"] == list(range(1, STEPS + 1))
    assert_checkpoints(tmp_path / "out" / "checkpoints", [STEPS])
    assert not os.path.exists(tmp_path / "runs")  # --out was honoured
