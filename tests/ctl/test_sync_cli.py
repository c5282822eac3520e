"""``gpuplanectl sync``: what a training script spooled without a daemon arrives exactly once.

The scripts run with their spool in a home of their own (as when the daemon is configured
with another ``home``), so the daemon's own replay at start leaves the files to ``sync``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gpuplanectl.client import DaemonClient
from helpers import Jobs, wait_for

from gpuplaned.protocol.errors import ApiError
from gpuplaned.protocol.sdk_spool import Refused, replay_file, spool_files

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"
STEPS = 20_000

SCRIPT = """
import sys, gpuplane
run = gpuplane.init(project="offline", name=sys.argv[1], config={"lr": 0.25})
for step in range(%d):
    run.log({"loss": 1.0 / (step + 1), "twice": float(2 * step)})
print("session", run.stats()["session_id"], flush=True)
""" % STEPS


def train_without_daemon(tmp_path: Path, name: str) -> Path:
    """Run a script while no daemon is up anywhere; returns its spool file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANE_")}
    env.update(PYTHONPATH=str(SDK_DIR), GPUPLANE_RUNTIME_DIR=str(tmp_path / "nowhere"),
               GPUPLANE_HOME=str(tmp_path / "sdk-home"))
    done = subprocess.run([sys.executable, "-c", SCRIPT, name], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "undelivered" in done.stderr and "gpuplanectl sync" in done.stderr
    session = done.stdout.split()[1]
    path = tmp_path / "sdk-home" / "spool" / f"sdk-{session}.jsonl"
    assert path.exists()
    return path


@pytest.fixture
def jobs(daemon_factory, tmp_path) -> Jobs:
    return Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")


def sync(jobs: Jobs, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(jobs.daemon.env, GPUPLANE_HOME=str(tmp_path / "sdk-home"))
    return subprocess.run([sys.executable, "-m", "gpuplanectl", "sync", *args], env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def assert_exactly_once(api: DaemonClient, run_id: str, steps: int = STEPS) -> None:
    m = api.get(f"/api/v1/runs/{run_id}/metrics?names=loss,twice&x=step&points=10000")
    width = m["width"]
    assert m["x"] == list(range(0, steps, width))
    for name in ("loss", "twice"):
        assert m["series"][name]["count"] == [width] * (steps // width), name
    # a checksum of the values: each bucket's max is the last (largest) step's 2*step
    assert m["series"]["twice"]["max"] == [float(2 * (x + width - 1)) for x in m["x"]]


@pytest.mark.e2e
def test_daemon_down_for_the_whole_run_then_sync_stores_every_point_once(jobs, tmp_path):
    path = train_without_daemon(tmp_path, "whole-run")
    done = sync(jobs, tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    [file] = report["files"]
    assert (file["status"], file["finished"], file["duplicates"], file["rejected"]) == ("replayed", "SUCCEEDED", 0, 0)
    assert report["points"] == file["points"] == 2 * STEPS and file["corrupt_lines"] == []
    assert not path.exists()
    api = jobs.client
    run = api.get(f"/api/v1/runs/{file['run_id']}")["run"]
    assert (run["name"], run["status"], run["source"]) == ("whole-run", "SUCCEEDED", "sdk")
    assert run["env_snapshot"]["argv"] == ["-c", "whole-run"]
    assert_exactly_once(api, file["run_id"])
    again = sync(jobs, tmp_path)
    assert again.returncode == 0 and again.stdout.startswith("nothing to sync in ")


@pytest.mark.e2e
def test_an_interrupted_or_repeated_replay_stores_nothing_twice(jobs, tmp_path):
    path = train_without_daemon(tmp_path, "interrupted")
    backup = tmp_path / "backup.jsonl"
    shutil.copy(path, backup)
    api = jobs.client
    sent = []

    def flaky(step):  # the daemon "goes away" after the open, the env and two batches
        if len(sent) == 4:
            raise ConnectionError("gone")
        sent.append(step.kind)
        try:
            return api.post(step.path, step.body)
        except ApiError as exc:
            raise Refused(exc.code.http_status, exc.message) from None

    first = replay_file(path, flaky)
    assert first.status == "interrupted" and first.batches == 2 and path.exists()
    done = sync(jobs, tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    [file] = json.loads(done.stdout)["files"]
    assert file["duplicates"] == 2 and first.points + file["points"] == 2 * STEPS  # the two it had, once
    assert file["run_id"] == first.run_id
    shutil.copy(backup, path)  # the same spool once more: every batch is a duplicate
    done = sync(jobs, tmp_path, "--json")
    [file] = json.loads(done.stdout)["files"]
    assert (file["points"], file["batches"], file["status"]) == (0, 0, "replayed") and file["duplicates"] > 2
    assert_exactly_once(api, first.run_id)
    assert len(api.get("/api/v1/runs")["runs"]) == 1
    assert api.get(f"/api/v1/runs/{first.run_id}")["run"]["status"] == "SUCCEEDED"


@pytest.mark.e2e
def test_corrupt_lines_are_named_and_the_rest_is_replayed(jobs, tmp_path):
    path = train_without_daemon(tmp_path, "corrupt")
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    kinds = [json.loads(line)["type"] for line in lines[:-1]]
    bad = kinds.index("batch") + 1  # the first batch's line number
    lost = sum(len(c["value"]) for c in json.loads(lines[bad - 1])["metrics"].values())
    lines[bad - 1] = b'{"type": "batch", "seq": 1, "metr'  # torn
    path.write_bytes(b"\n".join(lines) + b'{"type": "fin')  # and a last line cut short
    done = sync(jobs, tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    [file] = json.loads(done.stdout)["files"]
    last = len(lines)
    assert file["corrupt_lines"] == [bad, last]
    assert f"warning: {path} line {bad}: not valid JSON" in done.stderr
    assert f"warning: {path} line {last}: not valid JSON" in done.stderr
    assert file["points"] == 2 * STEPS - lost and file["finished"] == "SUCCEEDED"
    kept = Path(file["kept"])
    assert not path.exists() and kept.name == path.name + ".corrupt" and kept.exists()  # nothing thrown away
    assert spool_files(path.parent) == []  # and it is not replayed again
    text = sync(jobs, tmp_path)
    assert text.stdout.startswith("nothing to sync")


@pytest.mark.e2e
def test_a_file_its_live_process_holds_is_left_to_it(jobs, tmp_path):
    path = train_without_daemon(tmp_path, "busy")
    with open(path, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as the SDK does while its process lives
        done = sync(jobs, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "busy: its process is still running" in done.stdout and path.exists()
    assert jobs.client.get("/api/v1/runs")["runs"] == []
    done = sync(jobs, tmp_path)
    assert "synced 1 of 1 spool file(s)" in done.stdout and not path.exists()


def test_nothing_to_sync_needs_no_daemon(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANE_")}
    env.update(GPUPLANE_RUNTIME_DIR=str(tmp_path / "run"), GPUPLANE_HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, "-m", "gpuplanectl", "sync", "--json"], env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"dir": str(tmp_path / "home" / "spool"), "files": [], "points": 0,
                                       "batches": 0, "duplicates": 0}


def test_spool_files_but_no_daemon_is_an_error_that_keeps_them(tmp_path):
    path = train_without_daemon(tmp_path, "no-daemon")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANE_")}
    env.update(GPUPLANE_RUNTIME_DIR=str(tmp_path / "run"), GPUPLANE_HOME=str(tmp_path / "sdk-home"))
    done = subprocess.run([sys.executable, "-m", "gpuplanectl", "sync"], env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1 and "gpuplanectl daemon" in done.stderr
    assert path.exists()


# ------------------------------------------------------------------ a line nested too deeply

def spool_with_a_deep_line(spool: Path, session_id: str, deep: bytes) -> Path:
    """A hand-written spool file: a header, two one-point batches around ``deep`` (line 3), a finish."""
    def batch(seq: int) -> dict:
        return {"type": "batch", "seq": seq, "metrics": {"loss": {"step": [seq], "ts": [1000 + seq], "value": [0.5]}}}

    header = {"type": "session", "v": 1, "session_id": session_id, "open": {"name": f"deep-{session_id[-1]}"}}
    lines = [json.dumps(r).encode() for r in (header, batch(0))] + [deep]
    lines += [json.dumps(r).encode() for r in (batch(2), {"type": "finish", "status": "SUCCEEDED"})]
    spool.mkdir(parents=True, exist_ok=True)
    path = spool / f"sdk-{session_id}.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


DEEP_LINES = {  # the first file's line would raise RecursionError, the second's decodes but is too deep
    "0190f5d2-7a3c-7b1e-9f00-00000000000a": b'{"type": "batch", "seq": 1, "metrics": ' + b"[" * 100_000,
    "0190f5d2-7a3c-7b1e-9f00-00000000000b": b'{"type": "batch", "seq": 1, "metrics": ' + b'{"a": ' * 70
                                            + b"1" + b"}" * 71,
}


def deep_spools(spool: Path) -> list[Path]:
    return [spool_with_a_deep_line(spool, sid, deep) for sid, deep in DEEP_LINES.items()]


@pytest.mark.e2e
def test_a_deep_line_is_reported_and_skipped_and_every_file_is_replayed(jobs, tmp_path):
    paths = deep_spools(tmp_path / "sdk-home" / "spool")
    done = sync(jobs, tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    files = json.loads(done.stdout)["files"]
    assert [(f["status"], f["corrupt_lines"], f["points"], f["finished"]) for f in files] == [
        ("replayed", [3], 2, "SUCCEEDED")] * 2
    for path in paths:
        assert f"warning: {path} line 3: not valid JSON (nested deeper than 64 levels); skipped" in done.stderr
        assert Path(str(path) + ".corrupt").exists()
    runs = jobs.client.get("/api/v1/runs")["runs"]
    assert sorted((r["name"], r["status"]) for r in runs) == [("deep-a", "SUCCEEDED"), ("deep-b", "SUCCEEDED")]


@pytest.mark.e2e
def test_the_daemons_own_replay_skips_a_deep_line_and_goes_on(daemon_factory, tmp_path):
    daemon = daemon_factory("--gpus=none")
    deep_spools(daemon.home / "spool")
    daemon.start().wait_ready()
    api = daemon.client()

    def both_finished():
        runs = api.get("/api/v1/runs")["runs"]
        return len(runs) == 2 and all(r["status"] == "SUCCEEDED" for r in runs)

    wait_for(both_finished, timeout=20, what="both spool files to be replayed")
    wait_for(lambda: daemon.log().count("line 3: not valid JSON (nested deeper than 64 levels)") == 2,
             what="the deep lines to be named in the log")
    assert spool_files(daemon.home / "spool") == [] and "spool replay failed" not in daemon.log()


def test_sync_of_a_dir_that_does_not_exist_is_a_usage_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANE_")}
    env.update(GPUPLANE_RUNTIME_DIR=str(tmp_path / "run"), GPUPLANE_HOME=str(tmp_path / "home"))
    (tmp_path / "a-file").write_text("")
    for where in (tmp_path / "nonexistent", tmp_path / "a-file"):
        done = subprocess.run([sys.executable, "-m", "gpuplanectl", "sync", "--dir", str(where)], env=env,
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 2, done
        assert f"--dir {where}: no such directory" in done.stderr and done.stdout == ""
    done = subprocess.run([sys.executable, "-m", "gpuplanectl", "sync", "--json", "--dir", str(tmp_path / "no")],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and json.loads(done.stdout)["error"]["details"] == {"field": "dir"}
