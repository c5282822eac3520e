"""``gpuplanectl job submit-batch JOBS.TOML`` (issue 31 item 5) on a real daemon running real
jobs: [[jobs]] tables with a shared [defaults] queued in one request; one bad job refuses the
file whole, named by its place in it; a bad key is named before anything is sent."""

from __future__ import annotations

import json

from jobhelpers import ctl, wait_job

SWEEP = """
[defaults]
cwd = "work"
gpu = 0
env = {SHARED = "from-defaults"}

[[jobs]]
name = "lr-0.1"
command = "sh -c 'echo $SHARED $LR > out-0.1'"
env = {LR = "0.1"}

[[jobs]]
name = "lr-0.01"
command = ["sh", "-c", "echo $SHARED $LR > out-0.01"]
env = {LR = "0.01"}

[[jobs]]
name = "lr-0.001"
cwd = "other"
command = "sh -c 'echo $SHARED > out'"
"""


def listed(daemon) -> list[dict]:
    out = ctl(daemon, "job", "list", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["jobs"]


def test_a_sweep_file_is_queued_whole_and_each_job_runs_with_its_defaults(gpu_daemon, tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "sweep.toml").write_text(SWEEP)
    out = ctl(gpu_daemon, "job", "submit-batch", "sweep.toml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[-1] for line in lines] == ["lr-0.1", "lr-0.01", "lr-0.001"]
    for line in lines:
        assert wait_job(gpu_daemon, line.split()[0])["status"] == "SUCCEEDED"
    assert (tmp_path / "work" / "out-0.1").read_text() == "from-defaults 0.1\n"
    assert (tmp_path / "work" / "out-0.01").read_text() == "from-defaults 0.01\n"
    assert (tmp_path / "other" / "out").read_text() == "from-defaults\n"  # its own cwd, the shared env


def test_one_job_the_daemon_refuses_queues_none_and_is_named(gpu_daemon, tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "sweep.toml").write_text(SWEEP.replace('name = "lr-0.01"', 'name = "lr-0.01"\ngpu = 99'))
    out = ctl(gpu_daemon, "job", "submit-batch", "sweep.toml", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "sweep.toml: none of its 3 jobs was queued; refused:" in out.stderr
    assert "jobs[1].gpu: " in out.stderr
    assert listed(gpu_daemon) == []
    as_json = ctl(gpu_daemon, "job", "submit-batch", "--json", "sweep.toml", cwd=tmp_path)
    assert as_json.returncode == 2
    refused = json.loads(as_json.stdout)["error"]["details"]["refused"]
    assert [(r["index"], r["field"]) for r in refused] == [(1, "gpu")]


def test_a_bad_key_is_named_by_its_job_before_anything_is_sent(gpu_daemon, tmp_path):
    (tmp_path / "sweep.toml").write_text(SWEEP.replace('name = "lr-0.001"', 'name = "lr-0.001"\ncolour = "red"'))
    out = ctl(gpu_daemon, "job", "submit-batch", "sweep.toml", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "jobs[2].colour: unknown key" in out.stderr
    (tmp_path / "empty.toml").write_text("[defaults]\ngpu = 0\n")
    empty = ctl(gpu_daemon, "job", "submit-batch", "empty.toml", cwd=tmp_path)
    assert empty.returncode == 2 and "jobs: give the jobs as [[jobs]] tables" in empty.stderr
    assert listed(gpu_daemon) == []
