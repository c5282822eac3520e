"""The runner actor in virtual time: a FakeLauncher's scripted jobs, a MemoryNodeLink as the
server, ``autojump_clock``. Minutes of jobs run in milliseconds."""

from __future__ import annotations

import json

import pytest
import trio
from runnerkit import job, start_runner

from gpuplaned.home import attempt_dir
from gpuplaned.node_context import FollowLogs, LogsEnded
from gpuplaned.protocol.agent import ActiveJob
from gpuplaned.testing.launcher import FakeLauncher, Script


async def _reports(link, n):
    return [await link.next_report() for _ in range(n)]


async def test_a_job_runs_and_its_end_is_reported_when_it_comes(nursery, tmp_path, autojump_clock):
    node = await start_runner(nursery, tmp_path, FakeLauncher(default=Script(runs_s=300.0)))
    t0 = trio.current_time()
    await node.link.dispatch(job())
    running = await node.link.next_report()
    assert (running.status, trio.current_time() - t0) == ("RUNNING", 0)
    assert node.handle.live["job_1"].gpu_indexes == (0,)
    done = await node.link.next_report()
    assert (done.job_id, done.attempt, done.status, done.exit_code) == ("job_1", 1, "SUCCEEDED", 0)
    assert trio.current_time() - t0 == pytest.approx(300.0)  # five minutes, in a few milliseconds
    assert node.handle.live == {}
    assert (node.handle.started, node.handle.ended) == (1, 1)
    # The spawn request names its attempt, and its job dir is that attempt's.
    (request,) = node.launcher.spawn_requests
    assert (request.id, request.job_id, request.attempt) == ("job_1/1", "job_1", 1)
    assert request.job_dir == attempt_dir(node.config.home, "job_1", 1)
    assert request.env["CUDA_VISIBLE_DEVICES"] == "0"
    assert node.logs_seen() == [FollowLogs("job_1", 1, str(request.job_dir), resume=False), LogsEnded("job_1", 1)]


async def test_jobs_run_side_by_side_and_end_in_their_own_time(nursery, tmp_path, autojump_clock):
    launcher = FakeLauncher({"job_a": Script(runs_s=60.0), "job_b": Script(runs_s=20.0, exit_code=3)})
    node = await start_runner(nursery, tmp_path, launcher)
    t0 = trio.current_time()
    await node.link.dispatch(job("job_a", gpus=(0,)))
    await node.link.dispatch(job("job_b", gpus=(1,)))
    reports = await _reports(node.link, 4)
    assert [(r.job_id, r.status) for r in reports] == [
        ("job_a", "RUNNING"), ("job_b", "RUNNING"), ("job_b", "FAILED"), ("job_a", "SUCCEEDED")]
    failed = reports[2]
    assert (failed.failure_reason, failed.exit_code, failed.message) == ("EXIT_CODE", 3, "exit code 3")
    assert trio.current_time() - t0 == pytest.approx(60.0)


async def test_a_cancel_while_the_job_starts_waits_for_it_then_stops_it(nursery, tmp_path, autojump_clock):
    launcher = FakeLauncher(default=Script(runs_s=600.0, spawn_s=2.0, stops_after_s=3.0))
    node = await start_runner(nursery, tmp_path, launcher)
    await node.link.dispatch(job())
    await trio.sleep(1.0)  # the spawn is still with the launcher
    await node.link.cancel("job_1", 1)
    t0 = trio.current_time()
    running, cancelled = await _reports(node.link, 2)
    assert running.status == "RUNNING"
    assert launcher.cancels == ["job_1/1"]  # once it was up, through the launcher
    assert (cancelled.status, cancelled.signal) == ("CANCELLED", "SIGTERM")
    assert trio.current_time() - t0 == pytest.approx(1.0 + 3.0)  # the rest of its start, then its stop


async def test_a_cancel_of_a_running_job_goes_through_the_launcher(nursery, tmp_path, autojump_clock):
    node = await start_runner(nursery, tmp_path, FakeLauncher(default=Script(runs_s=600.0)))
    await node.link.dispatch(job())
    assert (await node.link.next_report()).status == "RUNNING"
    await trio.sleep(10.0)
    await node.link.cancel("job_1", 1)
    await node.link.cancel("job_1", 2)  # another attempt's: not this one's
    assert (await node.link.next_report()).status == "CANCELLED"
    assert node.launcher.cancels == ["job_1/1"]


async def test_a_job_past_its_timeout_fails_with_timeout(nursery, tmp_path, autojump_clock):
    node = await start_runner(nursery, tmp_path, FakeLauncher(default=Script(runs_s=3600.0, stops_after_s=1.0)))
    t0 = trio.current_time()
    await node.link.dispatch(job(timeout_s=90.0))
    running, failed = await _reports(node.link, 2)
    assert (failed.status, failed.failure_reason, failed.message) == ("FAILED", "TIMEOUT", "timed out")
    assert trio.current_time() - t0 == pytest.approx(91.0)


async def test_a_command_that_cannot_start_fails_with_spawn_failed(nursery, tmp_path, autojump_clock):
    launcher = FakeLauncher(default=Script(spawn_error="argv[0] 'nosuch' not found"))
    node = await start_runner(nursery, tmp_path, launcher)
    await node.link.dispatch(job())
    failed = await node.link.next_report()
    assert (failed.status, failed.failure_reason, failed.message) == (
        "FAILED", "SPAWN_FAILED", "argv[0] 'nosuch' not found")
    assert node.handle.live == {} and node.handle.started == 0


async def test_a_job_whose_launcher_dies_is_watched_by_its_shim_and_lost_without_a_record(
        nursery, tmp_path, autojump_clock):
    node = await start_runner(nursery, tmp_path, FakeLauncher(default=Script(runs_s=600.0)))
    await node.link.dispatch(job())
    assert (await node.link.next_report()).status == "RUNNING"
    await trio.sleep(5.0)
    node.launcher.die()
    # Its shim (a pid that names no process here) is gone, no process of it is left, and no
    # exit.json says how it ended.
    lost = await node.link.next_report()
    assert (lost.status, lost.failure_reason) == ("FAILED", "LOST")
    assert node.handle.live == {}


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


EXIT = {"exit_code": 0, "signal": None, "signal_name": None, "reason": "exited", "ended_at": 1.7e9, "pid": 42,
        "error": None}
RUNTIME = {"id": "job_1/1", "shim_pid": 1 << 22, "shim_start_time": 1, "pid": (1 << 22) + 1,
           "pgid": (1 << 22) + 1, "start_time": 1, "argv": ["x"], "cwd": "/", "env_keys": [],
           "started_at": 1.7e9, "timeout_s": None, "grace_s": 1.0}


@pytest.mark.parametrize("files, expected", [
    ({}, ("REQUEUE", None)),  # never started here: back to the queue
    ({"runtime.json": RUNTIME, "exit.json": EXIT}, ("SUCCEEDED", None)),  # ended while the runner was away
    ({"runtime.json": RUNTIME | {"job_id": "job_1", "attempt": 1},
      "exit.json": EXIT | {"job_id": "job_1", "attempt": 1}}, ("SUCCEEDED", None)),
    # An exit.json of another attempt is not this attempt's exit.
    ({"runtime.json": RUNTIME, "exit.json": EXIT | {"job_id": "job_1", "attempt": 2}}, ("FAILED", "LOST")),
    ({"runtime.json": RUNTIME | {"attempt": 2}}, ("FAILED", "LOST")),  # nor its runtime.json
    ({"runtime.json": RUNTIME | {"pid": "x"}}, ("FAILED", "LOST")),
])
async def test_after_a_restart_each_active_job_is_adopted_from_its_files(nursery, tmp_path, autojump_clock, files,
                                                                         expected):
    from runnerkit import config

    from gpuplaned.testing.node_link import MemoryNodeLink

    job_dir = attempt_dir(config(tmp_path).home, "job_1", 1)
    for name, data in files.items():
        _write(job_dir / name, data)
    link = MemoryNodeLink(active=(ActiveJob("job_1", 1, "run_1"),))
    node = await start_runner(nursery, tmp_path, FakeLauncher(), link)
    report = await node.link.next_report()
    assert (report.job_id, report.attempt, report.status, report.failure_reason) == ("job_1", 1, *expected)


async def test_attempts_that_ended_are_listed_for_the_watchers_those_ended_while_away_too(nursery, tmp_path,
                                                                                         autojump_clock):
    from runnerkit import config

    from gpuplaned.testing.node_link import MemoryNodeLink

    job_dir = attempt_dir(config(tmp_path).home, "job_0", 1)
    _write(job_dir / "runtime.json", RUNTIME | {"id": "job_0/1", "cwd": "/work"})
    _write(job_dir / "exit.json", EXIT)
    link = MemoryNodeLink(active=(ActiveJob("job_0", 1, "run_0", env={"GPUPLANE_CKPT_DIR": "saved"}),))
    node = await start_runner(nursery, tmp_path, FakeLauncher(default=Script(runs_s=5.0)), link)
    assert (await node.link.next_report()).status == "SUCCEEDED"
    [away] = node.handle.recent_ends.values()  # never live here: its end was in exit.json
    assert (away.job_id, away.attempt, away.run_id, away.cwd) == ("job_0", 1, "run_0", "/work")
    assert away.env == {"GPUPLANE_CKPT_DIR": "saved"}  # as submitted: its process is gone
    await node.link.dispatch(job())
    assert [r.status for r in await _reports(node.link, 2)] == ["RUNNING", "SUCCEEDED"]
    assert list(node.handle.recent_ends) == [("job_0", 1), ("job_1", 1)]
    assert node.handle.recent_ends[("job_1", 1)].run_id == "run_job_1_1"
    # The watchers' evidence that nothing of an attempt can be stored yet: this runner started it.
    assert node.handle.recent_ends[("job_1", 1)].started_here and not away.started_here
