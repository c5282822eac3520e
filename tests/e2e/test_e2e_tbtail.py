"""TensorBoard event files a job writes, read by the node's tailer on a real daemon and
queryable as the run's points: a real ``SummaryWriter`` script (old-style and
``new_style=True`` scalars, ``add_scalars`` folders, a ``--tb-dir`` folder), the daemon killed
-9 mid-file and restarted with every point stored exactly once, a job that ends while the
daemon is down (its last points and its last checkpoint taken after the restart, once),
and a step rewind across two files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from helpers import Jobs, wait_for

from gpuplaned.home import attempt_dir

pytestmark = pytest.mark.e2e

TRAIN = textwrap.dedent("""
    import os, time
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter("tb/exp")

    def log(lo, hi):
        for s in range(lo, hi):
            w.add_scalar("train/loss", 1.0 / (s + 1), s)
            w.add_scalar("train/lr", 0.5, s, new_style=True)
            w.add_scalars("acc", {"train": s / 100, "val": s / 200}, s)
        w.flush()

    def step(done, wait):
        open(done, "w").close()
        while not os.path.exists(wait):
            time.sleep(0.02)

    log(0, 50)
    step("half", "go")    # the daemon is killed here, the file still open
    log(50, 100)          # written while no daemon runs
    step("more", "done")
    log(100, 120)
    w.close()
""")

RESUMED = textwrap.dedent("""
    from torch.utils.tensorboard import SummaryWriter
    first = SummaryWriter("runs/exp")
    for s in range(10):
        first.add_scalar("loss", 1.0, s)
    first.close()
    again = SummaryWriter("runs/exp")  # a resumed run: a new file, from step 5 again
    for s in range(5, 8):
        again.add_scalar("loss", 2.0, s)
    again.close()
""")

ENDS_AWAY = textwrap.dedent("""
    import os, time
    import torch
    from torch.utils.tensorboard import SummaryWriter

    os.makedirs("saved", exist_ok=True)
    w = SummaryWriter("tb/exp")  # both folders declared: --tb-dir, --ckpt-dir
    for s in range(30):
        w.add_scalar("loss", 1.0 / (s + 1), s)
    w.flush()
    torch.save({"step": 30}, "saved/step_30.pt")
    open("half", "w").close()
    while not os.path.exists("go"):  # the daemon is killed here
        time.sleep(0.02)
    for s in range(30, 60):
        w.add_scalar("loss", 1.0 / (s + 1), s)
    w.close()
    torch.save({"step": 60}, "saved/step_60.pt")  # and the job ends before it is back
""")

SERIES = ("acc/train", "acc/val", "train/loss", "train/lr")


def _quick_tailer(tmp_path) -> None:
    config = tmp_path / "d" / "config" / "gpuplane"
    config.mkdir(parents=True)
    (config / "gpuplaned.toml").write_text("[tensorboard]\npoll_interval_s = 0.1\n")


def _series(jobs: Jobs, run_id: str, name: str) -> list[tuple[int, float]]:
    try:
        body = jobs.client.get(f"/api/v1/runs/{run_id}/series?name={name}")
    except Exception:  # noqa: BLE001 - no such series yet
        return []
    return list(zip(body["step"], body["value"]))


def test_a_summary_writer_jobs_points_are_stored_exactly_once_across_a_kill_9(daemon_factory, tmp_path):
    _quick_tailer(tmp_path)
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    (jobs.workdir / "train.py").write_text(TRAIN)
    submitted = subprocess.run([sys.executable, "-m", "gpuplanectl", "submit", "--gpu", "0", "--quiet", "--tb-dir",
                                "tb", "--", sys.executable, "train.py"], env=jobs.daemon.env, cwd=jobs.workdir,
                               capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    run_id = jobs.wait(job_id, "RUNNING", timeout=30)["run_id"]
    wait_for(lambda: jobs.file("half").exists(), timeout=30, what="the first 50 steps")
    wait_for(lambda: all(len(_series(jobs, run_id, n)) == 50 for n in SERIES), timeout=20,
             what="the first 50 steps of every series")

    first = jobs.daemon
    first.signal(signal.SIGKILL)
    first.proc.wait(10)
    jobs.file("go").touch()
    wait_for(lambda: jobs.file("more").exists(), timeout=20, what="steps 50..99, written with no daemon")
    jobs.restart(daemon_factory, "--gpus=fake:1")  # re-adopts the job; its tailer starts from the stored cursors
    wait_for(lambda: len(_series(jobs, run_id, "train/loss")) >= 100, timeout=20, what="steps 50..99")
    jobs.file("done").touch()
    assert jobs.wait(job_id, timeout=60)["status"] == "SUCCEEDED", jobs.daemon.log()
    wait_for(lambda: all(len(_series(jobs, run_id, n)) >= 120 for n in SERIES), timeout=20, what="all 120 steps")

    for name in SERIES:
        assert [s for s, _ in _series(jobs, run_id, name)] == list(range(120)), name  # each once
    assert _series(jobs, run_id, "acc/val")[10] == (10, pytest.approx(0.05))
    assert {v for _, v in _series(jobs, run_id, "train/lr")} == {0.5}
    run = jobs.client.get(f"/api/v1/runs/{run_id}")["run"]
    assert run["metric_sources"] == ["tensorboard"]
    listed = jobs.client.get(f"/api/v1/runs?job_id={job_id}")["runs"]
    assert [r["metric_sources"] for r in listed] == [["tensorboard"]]
    summary = jobs.client.get(f"/api/v1/runs/{run_id}/summary")["summary"]
    assert summary["metrics"]["train/loss"]["count"] == 120
    assert summary["metrics"]["train/loss"]["latest"]["step"] == 119


def test_a_resumed_runs_new_file_replaces_the_older_files_steps(daemon_factory, tmp_path):
    _quick_tailer(tmp_path)
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    (jobs.workdir / "resume.py").write_text(RESUMED)
    job = jobs.submit([sys.executable, "resume.py"], gpu=0)
    done = jobs.wait(job["id"], timeout=60)
    assert done["status"] == "SUCCEEDED", jobs.daemon.log()
    expected = [(s, 1.0) for s in range(5)] + [(s, 2.0) for s in range(5, 8)]
    wait_for(lambda: _series(jobs, done["run_id"], "loss") == expected, timeout=20, what="the rewound series")
    summary = jobs.client.get(f"/api/v1/runs/{done['run_id']}/summary")["summary"]
    assert summary["metrics"]["loss"]["count"] == 8
    assert summary["metrics"]["loss"]["latest"]["step"] == 7


def test_a_job_that_ends_while_the_daemon_is_down_has_its_last_points_and_checkpoint_taken(daemon_factory,
                                                                                            tmp_path):
    _quick_tailer(tmp_path)
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    (jobs.workdir / "train.py").write_text(ENDS_AWAY)
    declared = {"GPUPLANE_TB_DIR": str(jobs.workdir / "tb"), "GPUPLANE_CKPT_DIR": str(jobs.workdir / "saved")}
    job = jobs.submit([sys.executable, "train.py"], gpu=0, env=declared)
    run_id = jobs.wait(job["id"], "RUNNING", timeout=30)["run_id"]
    wait_for(lambda: jobs.file("half").exists() and len(_series(jobs, run_id, "loss")) == 30, timeout=30,
             what="the first 30 steps")
    first = jobs.daemon
    first.signal(signal.SIGKILL)
    first.proc.wait(10)
    exit_file = attempt_dir(first.home, job["id"], 1) / "exit.json"
    jobs.file("go").touch()
    wait_for(lambda: exit_file.exists(), timeout=30, what="the job's end, with no daemon")
    # The restarted daemon finds it ended (exit.json): never live again, its declared folders
    # known from the job as submitted.
    jobs.restart(daemon_factory, "--gpus=fake:1")
    assert jobs.wait(job["id"], timeout=30)["status"] == "SUCCEEDED"
    wait_for(lambda: len(_series(jobs, run_id, "loss")) >= 60, timeout=20, what="steps 30..59, read after the restart")
    assert [s for s, _ in _series(jobs, run_id, "loss")] == list(range(60))  # each once
    found = wait_for(lambda: (c := jobs.client.get(f"/api/v1/runs/{run_id}/checkpoints")["checkpoints"])
                     and len(c) == 2 and c, timeout=20, what="step_60.pt")
    assert sorted((os.path.basename(c["path"]), c["step"]) for c in found) == [("step_30.pt", 30), ("step_60.pt", 60)]
