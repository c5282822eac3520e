"""Groups and queue control (issue 31 item 2) on a real daemon running real jobs, driven through
gpuplanectl: a group's parallel limit, pausing a group or the whole queue while a job runs,
changing a queued job's priority, removing jobs and cleaning ended ones."""

from __future__ import annotations

import json
import re

from helpers import wait_for
from jobhelpers import ctl, show, submit, wait_job

from gpuplaned.store import job_removal_rows
from gpuplaned.store.database import open_writer

# Waits for its own `go-NAME` file, then leaves `done-NAME`: the test says when each job ends.
GATED = 'echo "$0" >> order; while [ ! -e "go-$0" ]; do sleep 0.05; done'


def _gated(daemon, work, name, *flags):
    return submit(daemon, "--name", name, *flags, "--", "sh", "-c", GATED, name, cwd=work)["id"]


def _wait_cell(out: str, job_id: str) -> str:
    line = next(line for line in out.splitlines() if line.startswith(job_id))
    return re.split(r"\s{2,}", line)[-1]


def _ok(result):
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _waits(daemon, job_id, reason):
    return wait_job(daemon, job_id, lambda j: j["status"] == "QUEUED" and j["queue_reason"] == reason,
                    what=f"{job_id} to wait: {reason}")


def test_a_group_of_parallel_1_runs_its_jobs_one_at_a_time(gpu_daemon, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    assert _ok(ctl(gpu_daemon, "group", "set", "train", "--parallel", "1")) == \
        "group train: parallel 1; 0 running, 0 queued\n"
    ids = [_gated(gpu_daemon, work, f"t{i}", "--group", "train") for i in range(3)]
    free = _gated(gpu_daemon, work, "free")  # no group: the second GPU is its
    wait_job(gpu_daemon, free, lambda j: j["status"] == "RUNNING", what="the job in no group to run")
    for i, job_id in enumerate(ids):
        wait_job(gpu_daemon, job_id, lambda j: j["status"] == "RUNNING", what=f"t{i} to run")
        for later in ids[i + 1:]:
            _waits(gpu_daemon, later, "group train: 1 of 1 running")
        listed = _ok(ctl(gpu_daemon, "job", "list"))
        for later in ids[i + 1:]:
            assert _wait_cell(listed, later) == "group train: 1 of 1 running"
        groups = json.loads(_ok(ctl(gpu_daemon, "group", "list", "--json")))
        assert groups["groups"] == [{"name": "train", "parallel": 1, "paused": False, "queued": 2 - i, "running": 1}]
        (work / f"go-t{i}").touch()
        assert wait_job(gpu_daemon, job_id)["status"] == "SUCCEEDED"
    assert [n for n in (work / "order").read_text().split() if n != "free"] == ["t0", "t1", "t2"]
    assert show(gpu_daemon, ids[0])["group"] == "train"
    (work / "go-free").touch()


def test_pausing_a_group_leaves_its_running_job_alone_and_holds_the_queued_ones(gpu_daemon, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    running = _gated(gpu_daemon, work, "r", "--group", "exp")
    wait_job(gpu_daemon, running, lambda j: j["status"] == "RUNNING", what="r to run")
    assert _ok(ctl(gpu_daemon, "group", "pause", "exp")) == "group exp: no limit, paused; 1 running, 0 queued\n"
    held = submit(gpu_daemon, "--group", "exp", "--", "true", cwd=work)["id"]
    _waits(gpu_daemon, held, "group exp paused")
    other = submit(gpu_daemon, "--", "true", cwd=work)["id"]  # another group's (none) job runs meanwhile
    assert wait_job(gpu_daemon, other)["status"] == "SUCCEEDED"
    assert show(gpu_daemon, running)["status"] == "RUNNING"
    shown = _ok(ctl(gpu_daemon, "job", "show", held))
    assert re.search(r"^waits:\s+group exp paused$", shown, re.M) and re.search(r"^group:\s+exp$", shown, re.M), shown
    dry = ctl(gpu_daemon, "submit", "--dry-run", "--group", "exp", "--", "true", cwd=work)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[:2] == ["would wait in the queue at position 2", "  group exp paused"]

    (work / "go-r").touch()
    assert wait_job(gpu_daemon, running)["status"] == "SUCCEEDED"  # the pause let it finish
    assert _waits(gpu_daemon, held, "group exp paused")["status"] == "QUEUED"  # a GPU is free; still held
    _ok(ctl(gpu_daemon, "group", "resume", "exp"))
    assert wait_job(gpu_daemon, held)["status"] == "SUCCEEDED"


def test_unknown_and_bad_group_names_are_refused_naming_them(gpu_daemon, tmp_path):
    missing = ctl(gpu_daemon, "group", "pause", "nope")
    assert missing.returncode == 1 and "no group 'nope' (there are no groups yet)" in missing.stderr
    bad = ctl(gpu_daemon, "submit", "--group", "a b", "--", "true", cwd=tmp_path)
    assert bad.returncode != 0 and "group" in bad.stderr and "1 to 64 letters" in bad.stderr
    both = ctl(gpu_daemon, "group", "set", "x")
    assert both.returncode == 2 and "--parallel K or --no-limit" in both.stderr


def test_a_paused_queue_starts_nothing_survives_a_restart_and_resumes(daemon_factory, tmp_path):
    first = daemon_factory("--gpus", "fake:2").start()
    first.wait_ready()
    work = tmp_path / "w"
    work.mkdir()
    assert _ok(ctl(first, "queue", "pause")) == "the queue is paused: no queued job starts\n"
    job_id = submit(first, "--", "true", cwd=work)["id"]
    _waits(first, job_id, "queue paused")
    assert json.loads(_ok(ctl(first, "group", "list", "--json")))["queue_paused"] is True

    _ok(ctl(first, "shutdown"))
    first.wait_exit()
    again = daemon_factory("--gpus", "fake:2").start()
    again.wait_ready()
    assert _ok(ctl(again, "queue", "status")) == "the queue is paused: no queued job starts\n"
    wait_job(again, job_id, lambda j: j["status"] == "QUEUED" and j["queue_reason"] == "queue paused")
    _ok(ctl(again, "queue", "resume"))
    assert wait_job(again, job_id)["status"] == "SUCCEEDED"


def test_changing_priority_reorders_the_queue_and_is_refused_for_a_job_not_queued(gpu_daemon, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    _ok(ctl(gpu_daemon, "group", "set", "seq", "--parallel", "1"))
    _ok(ctl(gpu_daemon, "queue", "pause"))
    ids = [submit(gpu_daemon, "--group", "seq", "--", "sh", "-c", f"echo {n} >> order", cwd=work)["id"]
           for n in ("a", "b", "c")]
    assert _ok(ctl(gpu_daemon, "job", "priority", ids[2], "5")) == f"{ids[2]} QUEUED priority 5\n"
    _ok(ctl(gpu_daemon, "queue", "resume"))
    for job_id in ids:
        assert wait_job(gpu_daemon, job_id)["status"] == "SUCCEEDED"
    assert (work / "order").read_text().split() == ["c", "a", "b"]
    ended = ctl(gpu_daemon, "job", "priority", ids[0], "1")
    assert ended.returncode == 1 and f"job {ids[0]} is SUCCEEDED, not QUEUED" in ended.stderr


def test_remove_takes_queued_and_ended_jobs_and_refuses_a_running_one_or_one_others_wait_for(gpu_daemon, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "checkpoints").mkdir()
    done = submit(gpu_daemon, "--", "sh", "-c", "echo hi; echo w > checkpoints/model.pt", cwd=work)["id"]
    assert wait_job(gpu_daemon, done)["status"] == "SUCCEEDED"
    folder = gpu_daemon.home / "jobs" / done
    assert folder.is_dir()
    removed = json.loads(_ok(ctl(gpu_daemon, "job", "remove", done, "--json")))
    assert removed["removed"] == [done] and removed["files_removed"] == [str(folder.resolve())]
    assert not folder.exists()
    assert (work / "checkpoints" / "model.pt").read_text() == "w\n"  # the user's files stay
    gone = ctl(gpu_daemon, "job", "show", done)
    assert gone.returncode == 1 and f"no job '{done}'" in gone.stderr

    running = _gated(gpu_daemon, work, "r")
    wait_job(gpu_daemon, running, lambda j: j["status"] == "RUNNING", what="r to run")
    dependant = submit(gpu_daemon, "--after", running, "--", "true", cwd=work)["id"]
    refused = ctl(gpu_daemon, "job", "remove", running)
    assert refused.returncode == 1 and f"job {running} is RUNNING: cancel it first" in refused.stderr
    _ok(ctl(gpu_daemon, "queue", "pause"))
    (work / "go-r").touch()
    assert wait_job(gpu_daemon, running)["status"] == "SUCCEEDED"
    _waits(gpu_daemon, dependant, "queue paused")
    waited_for = ctl(gpu_daemon, "job", "remove", running)
    assert waited_for.returncode == 1
    assert f"job {running} cannot be removed: {dependant} depend on it" in waited_for.stderr
    assert _ok(ctl(gpu_daemon, "job", "remove", dependant)) == f"removed 1 job(s): {dependant}\n"  # queued
    assert _ok(ctl(gpu_daemon, "job", "remove", running)) == f"removed 1 job(s): {running}\n"  # none waits now


def test_clean_removes_ended_jobs_of_a_group_and_keeps_those_not_old_enough(gpu_daemon, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    a = [submit(gpu_daemon, "--group", "a", "--", "true", cwd=work)["id"] for _ in range(2)]
    b = submit(gpu_daemon, "--group", "b", "--", "false", cwd=work)["id"]
    for job_id in (*a, b):
        wait_job(gpu_daemon, job_id)
    _ok(ctl(gpu_daemon, "queue", "pause"))
    queued = submit(gpu_daemon, "--group", "a", "--", "true", cwd=work)["id"]

    in_a = json.loads(_ok(ctl(gpu_daemon, "job", "list", "--group", "a", "--json")))["jobs"]
    assert sorted(j["id"] for j in in_a) == sorted([*a, queued])
    assert _ok(ctl(gpu_daemon, "clean", "--older-than", "1h")) == "removed 0 job(s)\n"
    cleaned = json.loads(_ok(ctl(gpu_daemon, "clean", "--group", "a", "--json")))
    assert cleaned["removed"] == sorted(a)
    assert {p.rsplit("/", 1)[-1] for p in cleaned["files_removed"]} == set(a)
    assert show(gpu_daemon, b)["status"] == "FAILED" and show(gpu_daemon, queued)["status"] == "QUEUED"
    assert _ok(ctl(gpu_daemon, "clean")) == f"removed 1 job(s): {b}\n"
    bad = ctl(gpu_daemon, "clean", "--older-than", "soon")
    assert bad.returncode == 2 and "--older-than" in bad.stderr


def test_a_batchs_entries_join_their_group_and_its_limit_holds_them(gpu_daemon, tmp_path):
    _ok(ctl(gpu_daemon, "group", "set", "sweep", "--parallel", "1"))
    _ok(ctl(gpu_daemon, "queue", "pause"))
    entry = {"command": ["true"], "cwd": str(tmp_path), "group": "sweep"}
    queued = gpu_daemon.client().post("/api/v1/jobs:batch", {"jobs": [entry, entry]})["jobs"]
    assert [j["group"] for j in queued] == ["sweep", "sweep"]
    assert json.loads(_ok(ctl(gpu_daemon, "group", "list", "--json")))["groups"][0]["queued"] == 2
    _ok(ctl(gpu_daemon, "queue", "resume"))
    for job in queued:
        assert wait_job(gpu_daemon, job["id"])["status"] == "SUCCEEDED"


def test_a_folder_a_crash_left_behind_is_removed_at_the_next_start(gpu_daemon, tmp_path):
    """A daemon killed between the removal's commit and the folder's deletion: the folder is
    recorded as still to delete, and the next start deletes it."""
    work = tmp_path / "w"
    work.mkdir()
    done = submit(gpu_daemon, "--", "sh", "-c", "echo hi", cwd=work)["id"]
    assert wait_job(gpu_daemon, done)["status"] == "SUCCEEDED"
    folder = gpu_daemon.home / "jobs" / done
    assert folder.is_dir()
    gpu_daemon.kill()
    conn = open_writer(gpu_daemon.home / "gpuplane.db")  # the removal's transaction, committed; no rmtree after
    conn.execute("BEGIN IMMEDIATE")
    job_removal_rows.remove_job(conn, done, 1)
    conn.execute("COMMIT")
    conn.close()
    assert folder.is_dir()

    gpu_daemon.start()
    gpu_daemon.wait_ready()

    wait_for(lambda: not folder.exists(), 15, what="the folder to be removed at start")
    again = json.loads(_ok(ctl(gpu_daemon, "clean", "--json")))
    assert again["files_removed"] == []  # done once, and forgotten
