"""Each checkpoint on the run that saved it (issue 28 item 2), on a real daemon: two jobs
started from one folder save into the same ``checkpoints/``, and a third saves nothing. Each
run registers only its own save (the watcher saw the job's process hold it open), the silent
one nothing; a file no job wrote there (this test's) is reported once and registered by none."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest
from helpers import Jobs, wait_for

pytestmark = pytest.mark.e2e

SAVER = textwrap.dedent("""
    import os, sys, time
    name = sys.argv[1]
    if name != "silent":
        os.makedirs("checkpoints", exist_ok=True)
        with open(f"checkpoints/{name}_step_10.pt", "wb") as f:  # a long save, as a big model's is
            f.write(b"w" * 4096)
            f.flush()
            time.sleep(3)
            f.write(b"w" * 4096)
    open(f"saved_{name}", "w").close()
    while not os.path.exists("go"):
        time.sleep(0.05)
""")


def _quick_watcher(tmp_path) -> None:
    config = tmp_path / "d" / "config" / "gpuplane"
    config.mkdir(parents=True)
    (config / "gpuplaned.toml").write_text("[checkpoints]\nstable_s = 0.5\nrescan_interval_s = 0.2\n"
                                           "[node]\nmax_cpu_jobs = 3\n")


def _saved(jobs: Jobs, run_id: str) -> list[str]:
    found = jobs.client.get(f"/api/v1/runs/{run_id}/checkpoints")["checkpoints"]
    return sorted(os.path.basename(c["path"]) for c in found)


def _watching(jobs: Jobs) -> int | None:
    [watcher] = [a for a in jobs.client.get("/api/v1/actors")["actors"] if a["name"] == "ckptwatch"]
    return (watcher["stats"] or {}).get("attempts")


def test_two_jobs_saving_into_one_folder_register_only_their_own(daemon_factory, tmp_path):
    _quick_watcher(tmp_path)
    jobs = Jobs.start(daemon_factory, tmp_path / "work")
    (jobs.workdir / "save.py").write_text(SAVER)
    submitted = {name: jobs.submit([sys.executable, "save.py", name], gpu=0) for name in ("a", "b", "silent")}
    runs = {name: jobs.wait(job["id"], "RUNNING", timeout=30)["run_id"] for name, job in submitted.items()}
    wait_for(lambda: all(jobs.file(f"saved_{n}").exists() for n in submitted), timeout=30, what="both saves")
    stray = jobs.workdir / "checkpoints" / "stray_step_5.pt"
    stray.write_bytes(b"s" * 1024)  # saved by a process of no job: this test's

    for name in ("a", "b"):
        wait_for(lambda: _saved(jobs, runs[name]), timeout=30, what=f"job {name}'s checkpoint")
    reported = wait_for(lambda: jobs.client.get("/api/v1/events?type=UNATTRIBUTED_FILE")["events"], timeout=20,
                        what="the stray checkpoint reported")
    jobs.file("go").touch()
    for job in submitted.values():
        assert jobs.wait(job["id"], timeout=60)["status"] == "SUCCEEDED", jobs.daemon.log()
    wait_for(lambda: _watching(jobs) == 0, timeout=20, what="the ended attempts' final passes")

    assert _saved(jobs, runs["a"]) == ["a_step_10.pt"]
    assert _saved(jobs, runs["b"]) == ["b_step_10.pt"]
    assert _saved(jobs, runs["silent"]) == []
    reported = jobs.client.get("/api/v1/events?type=UNATTRIBUTED_FILE")["events"]
    assert [(e["context"]["path"], e["context"]["kind"]) for e in reported] == [(str(stray), "checkpoint")]
