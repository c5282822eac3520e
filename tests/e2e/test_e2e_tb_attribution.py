"""Each TensorBoard curve on the run that wrote it (issue 28 item 2), on a real daemon: a sweep
of 8 jobs started together from one folder, all writing into the same ``runs/`` folder, each
its own constant (half of them from a child process, as a worker would), and a job that
writes nothing; each run gets its own curve and nothing else, the silent one nothing. A
file no job wrote (this test's own process) is reported once and read by no run."""

from __future__ import annotations

import os
import sys
import textwrap
import time

import pytest
from helpers import Jobs, wait_for

pytestmark = pytest.mark.e2e

WRITER = textwrap.dedent("""
    import os, sys, time
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    def write(value):
        w = EventFileWriter("runs")  # events.out.tfevents.<time>.<host>.<pid>.<n>
        for step in range(5):
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="loss", simple_value=value)])
            w.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
        w.flush()
        return w

    def until_go(w, k):
        while not os.path.exists(f"go{k}"):
            time.sleep(0.05)
        if w is not None:
            w.close()

    k, how = int(sys.argv[1]), sys.argv[2]
    if how == "child":  # written by a child of the job's main process
        pid = os.fork()
        if pid == 0:
            until_go(write(float(k)), k)
            os._exit(0)
        os.waitpid(pid, 0)
    else:
        until_go(write(float(k)) if how == "main" else None, k)
""")

SWEEP = 8


def _quick_tailer(tmp_path) -> None:
    config = tmp_path / "d" / "config" / "gpuplane"
    config.mkdir(parents=True)
    (config / "gpuplaned.toml").write_text(f"[tensorboard]\npoll_interval_s = 0.1\n"
                                           f"[node]\nmax_cpu_jobs = {SWEEP + 1}\n")


def _loss(jobs: Jobs, run_id: str) -> list[tuple[int, float]]:
    try:
        body = jobs.client.get(f"/api/v1/runs/{run_id}/series?name=loss")
    except Exception:  # noqa: BLE001 - no such series (yet)
        return []
    return list(zip(body["step"], body["value"]))


def _series_names(jobs: Jobs, run_id: str) -> list[str]:
    return sorted(jobs.client.get(f"/api/v1/runs/{run_id}/summary")["summary"].get("metrics", {}))


def test_a_sweep_from_one_folder_gets_each_curve_on_its_own_run(daemon_factory, tmp_path):
    _quick_tailer(tmp_path)
    jobs = Jobs.start(daemon_factory, tmp_path / "work")
    (jobs.workdir / "writer.py").write_text(WRITER)
    submitted = [jobs.submit([sys.executable, "writer.py", str(k), "main" if k % 2 else "child"], gpu=0)
                 for k in range(1, SWEEP + 1)]
    silent = jobs.submit([sys.executable, "writer.py", "0", "none"], gpu=0)
    runs = {k: jobs.wait(job["id"], "RUNNING", timeout=30)["run_id"] for k, job in enumerate(submitted, 1)}
    silent_run = jobs.wait(silent["id"], "RUNNING", timeout=30)["run_id"]
    # All named within seconds of every job's start: by time alone, each job would take them all.
    wait_for(lambda: len(list((jobs.workdir / "runs").glob("events.out.tfevents.*"))) == SWEEP, timeout=60,
             what="the 8 event files")
    for k, run_id in runs.items():
        wait_for(lambda: len(_loss(jobs, run_id)) == 5, timeout=30, what=f"job {k}'s 5 points")

    stray = jobs.workdir / "runs" / f"events.out.tfevents.{int(time.time())}.{os.uname().nodename}.{os.getpid()}.0"
    stray.write_bytes(b"")  # named by a process of no job: this test's
    for k in range(SWEEP + 1):
        jobs.file(f"go{k}").touch()
    for job in [*submitted, silent]:
        assert jobs.wait(job["id"], timeout=60)["status"] == "SUCCEEDED", jobs.daemon.log()

    for k, run_id in runs.items():
        assert _loss(jobs, run_id) == [(s, float(k)) for s in range(5)], k  # its own constant, each step once
        assert _series_names(jobs, run_id) == ["loss"]
    assert _series_names(jobs, silent_run) == []  # wrote nothing: got nothing
    reported = wait_for(lambda: jobs.client.get("/api/v1/events?type=UNATTRIBUTED_FILE")["events"], timeout=20,
                        what="the stray file reported")
    assert [e["context"]["path"] for e in reported] == [str(stray)]
    assert reported[0]["severity"] == "info" and str(os.getpid()) in reported[0]["message"]
