"""The SDK's spool: batches go to disk while no daemon takes them and arrive exactly once later.

The reading side is the daemon's (``gpuplaned.protocol.sdk_spool``), so these tests are also
the contract between the SDK that writes a spool and the daemon and CLI that replay it.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import pytest
from helpers import Jobs, wait_for
from sdk_fake import SDK_DIR, FakeDaemon, sdk_env

from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.sdk_spool import Replay, SpoolBusy, SpoolClaim, spool_files

sys.path.insert(0, str(SDK_DIR))

from gpuplane._run import DROPPED_METRIC, Run  # noqa: E402


def no_daemon(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"GPUPLANE_RUNTIME_DIR": str(tmp_path / "no-daemon"), "GPUPLANE_HOME": str(tmp_path / "home"), **extra}


def spool_of(tmp_path: Path) -> Path:
    return tmp_path / "home" / "spool"


def read_spool(path: Path) -> Replay:
    """The steps a replay would make of ``path`` (through the daemon's reader)."""
    replay = Replay(path)
    replay.steps = []
    with SpoolClaim.take(path) as claim:
        while lines := claim.read():
            replay.steps.extend(replay.feed(lines))
    return replay


def batch_points(replay: Replay, name: str) -> list[tuple[int, float]]:
    out = []
    for step in replay.steps:
        if step.kind == "batch" and name in step.body["metrics"]:
            cols = step.body["metrics"][name]
            out.extend(zip(cols["step"], cols["value"]))
    return out


def test_without_a_daemon_every_point_is_spooled_under_a_lock_and_the_daemon_can_read_it(tmp_path):
    run = Run(env=no_daemon(tmp_path), project="p", name="offline", config={"lr": 0.1}, tags=["t"], wait=0)
    for step in range(25_000):
        run.log({"loss": float(step), "nan": math.nan})
    wait_for(lambda: spool_files(spool_of(tmp_path)), what="the spool file")
    [path] = spool_files(spool_of(tmp_path))
    assert path.name == f"sdk-{run.stats()['session_id']}.jsonl"
    with pytest.raises(SpoolBusy):  # the run holds it: no replay may take it meanwhile
        SpoolClaim.take(path)
    run.finish()
    assert run.session_id is None and run.stats()["spool"] == str(path)
    replay = read_spool(path)
    kinds = [step.kind for step in replay.steps]
    assert kinds[0] == "open" and kinds[-1] == "finish" and "env" in kinds
    opened = replay.steps[0].body
    assert opened["session_id"] == run.stats()["session_id"]
    assert (opened["project"], opened["name"], opened["config"], opened["tags"]) == ("p", "offline", {"lr": 0.1},
                                                                                   ["t"])
    assert replay.steps[-1].body == {"status": "SUCCEEDED"}
    assert [s for s, _ in batch_points(replay, "loss")] == list(range(25_000))
    assert all(math.isnan(v) for _, v in batch_points(replay, "nan"))
    seqs = [step.body["seq"] for step in replay.steps if step.kind == "batch"]
    assert len(seqs) == len(set(seqs)) and replay.report.corrupt_lines == []
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_a_daemon_that_appears_later_gets_the_spool_replayed_by_the_run_itself(tmp_path):
    rdir = tmp_path / "run"
    run = Run(env={"GPUPLANE_RUNTIME_DIR": str(rdir), "GPUPLANE_HOME": str(tmp_path / "home")}, name="late", wait=0)
    for step in range(30_000):
        run.log({"x": float(step)})
    wait_for(lambda: run.stats()["spooled"] == 30_000, what="the points to reach the spool")
    with FakeDaemon(rdir) as fake:
        wait_for(lambda: len(fake.points("x")) == 30_000, timeout=20, what="the spooled points")
        for step in range(30_000, 31_000):  # sent directly once the spool is caught up
            run.log({"x": float(step)})
        run.finish()
        assert [s for s, _ in fake.points("x")] == list(range(31_000))
        assert fake.finished == {run.session_id: "SUCCEEDED"}
        assert fake.sessions[run.session_id]["name"] == "late" and run.session_id in fake.envs
    assert spool_files(spool_of(tmp_path)) == []  # delivered, so removed


def test_a_daemon_gone_mid_run_gets_everything_once_when_it_answers_again(tmp_path):
    with FakeDaemon(tmp_path / "run") as fake:
        run = Run(env={"GPUPLANE_RUNTIME_DIR": str(fake.runtime_dir), "GPUPLANE_HOME": str(tmp_path / "home")})
        for step in range(10_000):
            run.log({"x": float(step)})
        wait_for(lambda: len(fake.points("x")) == 10_000, what="the first points")
        fake.down = True
        for step in range(10_000, 40_000):
            run.log({"x": float(step)})
            if step % 10_000 == 0:
                time.sleep(0.3)
        wait_for(lambda: run.stats()["spooled"] > 0, what="the outage to reach the spool")
        fake.down = False
        for step in range(40_000, 41_000):
            run.log({"x": float(step)})
        run.finish(timeout=20)
        assert [s for s, _ in fake.points("x")] == list(range(41_000))
        assert fake.finished == {run.session_id: "SUCCEEDED"}
        assert len({sid for sid, _ in fake.batches}) == 1  # one session throughout
    assert spool_files(spool_of(tmp_path)) == []


CAP_SCRIPT = """
import sys, time, gpuplane
run = gpuplane.init(name="capped")
for step in range(200_000):
    run.log({"x": float(step)})
    if step % 20_000 == 19_999:
        time.sleep(0.2)  # let the sender spill into the spool
run.finish()
print("stats", run.stats(), flush=True)
"""


def test_the_spool_is_capped_with_one_warning_and_the_dropped_total_is_spooled_too(tmp_path):
    cap = 300_000
    env = sdk_env(tmp_path / "no-daemon", home=tmp_path / "home")
    env["GPUPLANE_SPOOL_MAX_BYTES"] = str(cap)
    done = subprocess.run([sys.executable, "-c", CAP_SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("reached its cap of 300000 bytes (GPUPLANE_SPOOL_MAX_BYTES)") == 1, done.stderr
    [path] = spool_files(spool_of(tmp_path))
    assert path.stat().st_size <= cap + 512  # the cap, then only the dropped total and the finish
    replay = read_spool(path)
    spooled = len(batch_points(replay, "x"))
    dropped = batch_points(replay, DROPPED_METRIC)[-1][1]
    assert 0 < spooled < 200_000 and spooled + dropped == 200_000  # every point stored or counted
    assert replay.steps[-1].body == {"status": "SUCCEEDED"}


def test_memory_stays_bounded_while_the_daemon_is_gone_for_long(tmp_path):
    run = Run(env=no_daemon(tmp_path), max_queue=10_000, wait=0)
    try:
        tracemalloc.start()
        for i in range(20_000):
            run.log({"a": float(i), "b": float(i), "c": float(i), "d": float(i)})
        after_some, _ = tracemalloc.get_traced_memory()
        for i in range(50_000):
            run.log({"a": float(i), "b": float(i), "c": float(i), "d": float(i)})
        after_many, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        # 200k more points held in memory would be ~17 MB; a batch being spilled is ~1 MB.
        assert after_many - after_some < 4 * 1024 * 1024, after_many - after_some
        wait_for(lambda: run.stats()["spooled"] + run.stats()["dropped"] >= 280_000 - 10_000,
                 what="the sender to spool what it could")
        assert run.stats()["spooled"] > 100_000  # most went to disk, not to the floor
    finally:
        run.finish(timeout=0)


def test_the_spool_can_be_turned_off(tmp_path):
    run = Run(env=no_daemon(tmp_path, GPUPLANE_SPOOL_MAX_BYTES="0"), wait=0)
    run.log({"a": 1.0})
    run.finish()
    assert not spool_of(tmp_path).exists() and run.stats()["spool"] is None


def test_a_forked_child_does_not_keep_the_parents_spool_locked(tmp_path):
    script = textwrap.dedent("""
        import os, sys, time, gpuplane
        run = gpuplane.init(name="fork")
        run.log({"x": 1.0})
        while not run.stats()["spool"]:
            time.sleep(0.01)
        child = os.fork()
        if child == 0:  # a long-lived child (a dataloader worker...) outlives the parent
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 1)
            os.dup2(null, 2)
            time.sleep(60)
            os._exit(0)
        print("spool", run.stats()["spool"], child, flush=True)
        run.finish()
    """)
    done = subprocess.run([sys.executable, "-c", script], env=sdk_env(tmp_path / "none", home=tmp_path / "home"),
                          capture_output=True, text=True, timeout=30)
    _, spool, child = done.stdout.split()
    try:
        assert done.returncode == 0, done.stderr
        os.kill(int(child), 0)  # still alive
        with SpoolClaim.take(Path(spool)):  # the parent ended: the file is free although its child lives
            pass
    finally:
        os.kill(int(child), 9)


# ------------------------------------------------------------------ the daemon's side


@pytest.fixture
def api(daemon_factory, tmp_path):
    return Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none").client


SID = "0190f5d2-7a3c-7b1e-9f00-0123456789ab"
SID_MS = 1_722_111_130_172  # when it was made: its first 48 bits


@pytest.mark.e2e
def test_a_client_named_session_is_opened_once_and_refuses_another_run(api):
    first = api.post("/api/v1/sessions", {"session_id": SID, "name": "mine"})
    assert first["session_id"] == SID
    again = api.post("/api/v1/sessions", {"session_id": SID})
    assert (again["session_id"], again["run_id"]) == (SID, first["run_id"])
    assert api.post("/api/v1/sessions", {"session_id": SID, "run_id": first["run_id"]})["session_id"] == SID
    with pytest.raises(ApiError) as err:
        api.post("/api/v1/sessions", {"session_id": SID, "run_id": "another-run"})
    assert err.value.code is ErrorCode.CONFLICT and first["run_id"] in err.value.message
    for bad in ("not-a-uuid", SID.upper(), "0190f5d2-7a3c-4b1e-9f00-0123456789ab", 7):
        with pytest.raises(ApiError) as err:
            api.post("/api/v1/sessions", {"session_id": bad})
        assert err.value.code is ErrorCode.BAD_REQUEST and err.value.details["field"] == "session_id"
    with pytest.raises(ApiError) as err:  # a new run may only name a job that exists
        api.post("/api/v1/sessions", {"job_id": "job_nope"})
    assert err.value.code is ErrorCode.BAD_REQUEST and err.value.details["field"] == "job_id"
    assert len(api.get("/api/v1/runs")["runs"]) == 1


@pytest.mark.e2e
def test_a_stored_batch_stays_a_duplicate_after_the_finish(api):
    api.post("/api/v1/sessions", {"session_id": SID})
    body = {"seq": 0, "metrics": {"x": {"step": [0, 1], "ts": [1, 2], "value": [1.0, 2.0]}}}
    assert api.post(f"/api/v1/sessions/{SID}/batches", body)["duplicate"] is False
    api.post(f"/api/v1/sessions/{SID}/finish", {"status": "SUCCEEDED"})
    assert api.post(f"/api/v1/sessions/{SID}/batches", body) == {"seq": 0, "duplicate": True, "points": 0}
    with pytest.raises(ApiError) as err:  # a new batch still is refused
        api.post(f"/api/v1/sessions/{SID}/batches", {**body, "seq": 1})
    assert err.value.code is ErrorCode.CONFLICT


KILL_SCRIPT = """
import sys, time, gpuplane
run = gpuplane.init(project="spool", name="killed", config={"lr": 0.5})
print("run", run.id, flush=True)
for step in range(10_000):
    run.log({"loss": 1.0 / (step + 1), "step2": float(step * 2)})
    if step % 100 == 99:
        time.sleep(0.025)  # about 2.5 s of logging: the daemon dies early and stays dead
run.finish(timeout=1)
print("stats", run.stats(), flush=True)
"""


@pytest.mark.e2e
def test_kill_9_mid_run_then_the_next_daemon_start_replays_the_spool_exactly_once(daemon_factory, tmp_path):
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    script = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT], env=sdk_env(jobs.daemon.runtime_dir),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_id = script.stdout.readline().split()[1]
        time.sleep(0.6)
        assert script.poll() is None
        jobs.daemon.kill()
        out, err = script.communicate(timeout=60)
    finally:
        script.kill()
    assert script.returncode == 0, err
    assert "gpuplanectl sync" in err  # the warning says where the points wait and what delivers them
    spool = jobs.daemon.home / "spool"
    [path] = spool_files(spool)
    jobs.restart(daemon_factory, "--gpus=none")  # same home: it replays the file at start
    api = jobs.client
    wait_for(lambda: api.get(f"/api/v1/runs/{run_id}")["run"]["status"] == "SUCCEEDED", timeout=30,
             what="the replayed finish")
    wait_for(lambda: not path.exists(), what="the replayed spool file to be removed")
    m = api.get(f"/api/v1/runs/{run_id}/metrics?names=loss,step2&x=step&points=10000")
    assert m["x"] == list(range(10_000)) and m["width"] == 1
    for name in ("loss", "step2"):
        assert m["series"][name]["count"] == [1] * 10_000, name
    assert m["series"]["step2"]["last"] == [float(s * 2) for s in range(10_000)]  # the checksum, point by point
    run = api.get(f"/api/v1/runs/{run_id}")["run"]
    assert run["name"] == "killed" and run["env_snapshot"]["argv"] == ["-c"]
    assert "replayed" in jobs.daemon.log() and spool_files(spool) == []


def test_the_spool_format_is_what_the_daemon_reads(tmp_path):
    """Golden lines: the SDK's writer and the daemon's reader agree on every record type."""
    run = Run(env=no_daemon(tmp_path), wait=0, name="golden")
    run.log({"a": 1.0, "b": {"c": 2}}, step=3)
    run.finish("FAILED")
    [path] = spool_files(spool_of(tmp_path))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in records] == ["session", "env", "batch", "finish"]
    assert records[0]["v"] == 1 and records[0]["session_id"] == path.name[4:-6]
    assert records[2]["metrics"]["b/c"]["step"] == [3] and records[3] == {"type": "finish", "status": "FAILED"}
    replay = read_spool(path)
    assert [s.kind for s in replay.steps] == ["open", "env", "batch", "finish"]
    assert replay.steps[2].path == f"/api/v1/sessions/{records[0]['session_id']}/batches"
    assert replay.report.warnings == []


def test_a_live_writers_lock_keeps_replayers_out(tmp_path):
    path = tmp_path / "sdk-0190f5d2-7a3c-7b1e-9f00-0123456789ab.jsonl"
    path.write_text("")
    with open(path, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(SpoolBusy):
            SpoolClaim.take(path)
    with SpoolClaim.take(path) as claim:
        claim.done(keep=False)
    assert not path.exists()
    with pytest.raises(FileNotFoundError):
        SpoolClaim.take(path)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------ the reader's decisions (pure)


def _lines(*records) -> list[tuple[int, bytes]]:
    return [(i + 1, r if isinstance(r, bytes) else json.dumps(r).encode()) for i, r in enumerate(records)]


HEADER = {"type": "session", "v": 1, "session_id": SID, "open": {"name": "n"}}
BATCH = {"type": "batch", "seq": 0, "metrics": {"x": {"step": [0], "ts": [0], "value": [1.0]}}}


def test_replay_steps_follow_the_file_and_refusals_decide_what_goes_on():
    replay = Replay(Path(f"/s/sdk-{SID}.jsonl"))
    steps = replay.feed(_lines(HEADER, BATCH, {**BATCH, "seq": 1}, {"type": "finish", "status": "FAILED"}))
    assert [s.kind for s in steps] == ["open", "batch", "batch", "finish"]
    assert steps[0].body == {"name": "n", "session_id": SID, "started_at": SID_MS} and steps[1].path == f"/api/v1/sessions/{SID}/batches"
    replay.answered(steps[0], {"run_id": "run_1"})
    replay.answered(steps[1], {"duplicate": True, "points": 0})
    assert replay.refused(steps[2], 400, "bad metrics") is True  # refused for good: counted, skipped
    replay.answered(steps[3], {})
    assert replay.ended() is False
    r = replay.report
    assert (r.run_id, r.duplicates, r.rejected, r.finished, r.status) == ("run_1", 1, 1, "FAILED", "replayed")
    for status, kind, outcome in ((503, "batch", "interrupted"), (429, "open", "interrupted"),
                                  (400, "open", "failed"), (404, "batch", "failed")):
        replay = Replay(Path(f"/s/sdk-{SID}.jsonl"))
        step = [s for s in replay.feed(_lines(HEADER, BATCH)) if s.kind == kind][0]
        assert replay.refused(step, status, "no") is False and replay.report.status == outcome


def test_a_file_without_a_readable_header_still_opens_its_session_from_its_name():
    replay = Replay(Path(f"/s/sdk-{SID}.jsonl"))
    steps = replay.feed(_lines(b'{"type": "sess', BATCH, {"type": "what"}, [1], HEADER,
                               {**HEADER, "v": 99}, {"type": "batch", "seq": -1, "metrics": {}}))
    assert [s.kind for s in steps] == ["open", "batch"] and steps[0].body == {"session_id": SID, "started_at": SID_MS}
    assert replay.report.corrupt_lines == [1, 3, 4, 5, 6, 7]
    assert any("no readable session header" in w for w in replay.report.warnings)
    assert replay.ended() is True  # kept, as *.corrupt


@pytest.mark.e2e
def test_a_run_replayed_from_the_spool_keeps_the_time_it_began(daemon_factory, tmp_path, monkeypatch):
    """A run spooled while no daemon answered took the replay's time as its created time."""
    from gpuplane import _run as sdk_run

    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")
    jobs.daemon.kill()
    began = time.time() - 3600  # the script's clock: init() ran an hour before the daemon hears of it
    monkeypatch.setattr(sdk_run, "_time", lambda: began)
    run = Run(env={"GPUPLANE_RUNTIME_DIR": str(jobs.daemon.runtime_dir), "GPUPLANE_HOME": str(jobs.daemon.home)},
              name="offline", wait=0)
    run.log({"loss": 0.5}, step=0)
    run.finish(timeout=1)
    [path] = spool_files(jobs.daemon.home / "spool")
    assert read_spool(path).steps[0].body["started_at"] == int(began * 1000)
    jobs.restart(daemon_factory, "--gpus=none")  # same home: it replays the file at start
    api = jobs.client
    found = wait_for(lambda: [r for r in api.get("/api/v1/runs")["runs"] if r["status"] == "SUCCEEDED"] or None,
                     timeout=30, what="the replayed run")
    [replayed] = found
    assert replayed["name"] == "offline" and replayed["created_at"] == int(began * 1000)
    shown = api.get(f"/api/v1/runs/{replayed['id']}")["run"]
    assert shown["created_at"] == int(began * 1000) and shown["finished_at"] > shown["created_at"] + 3_000_000


def test_a_spool_from_an_sdk_that_did_not_say_when_it_began_uses_its_session_ids_time(tmp_path):
    """The session id is a UUIDv7 made at init(): its first 48 bits are that time in ms."""
    header = {"type": "session", "v": 1, "session_id": SID, "open": {"name": "old"}}
    replay = Replay(tmp_path / f"sdk-{SID}.jsonl")
    [opened] = replay.feed(_lines(header))
    assert opened.body["started_at"] == int(SID.replace("-", "")[:12], 16) == SID_MS
    said = Replay(tmp_path / f"sdk-{SID}.jsonl").feed(_lines({**header, "open": {"started_at": 5}}))[0]
    assert said.body["started_at"] == 5  # what the SDK said wins
    nameless = Replay(tmp_path / f"sdk-{SID}.jsonl").feed(_lines(b"not json", BATCH))[0]
    assert nameless.kind == "open" and nameless.body["started_at"] == SID_MS
