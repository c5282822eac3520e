"""Remote agents end to end (issue 18): one ``--role server`` daemon and two ``--role agent``
daemons, each agent with its own home, runtime dir, fake GPU and node name, dialing the server
through its own TCP proxy (``tests/netproxy.py``), with ``[uplink] heartbeat_s = 0.3``.

- Jobs land on the node their selector names.
- The link cut (RST) for 60 s while a job prints 100k lines and logs 100k SDK points: the node goes
  OFFLINE, the job LOST with an AGENT_DISCONNECTED event; after the restore the job is RUNNING
  again, then SUCCEEDED, and every point is stored once (the run's series holds each step once),
  the stored log tail is the file's last lines, and the full log read through the server is the
  file, byte for byte (sha256).
- The same with the link stalled (open, nothing moving) for longer than 3 heartbeats.
- kill -9 of the agent mid-run and a restart: the job is re-adopted and ends once, same counts.
- kill -9 of the server mid-run and a restart on the same home: the agent reconnects, same counts.
- A bad token and a revoked token: refused, the agent exits 2 naming the token, no node is made.
- A job that ends while the link is down is reconciled to how it ended (exit code 3: FAILED).
- A cancel made while the node is away reaches the job when the link is back.
- A remote node's checkpoints are verified and pruned through its agent; while it is away, verify
  is unavailable and prune refuses, naming the node.

The server and the two agents are shared by the module (each test uses its own job and its own
agent's link); the server-restart test runs last.
"""

from __future__ import annotations

import hashlib
import sqlite3
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import daemon_info, wait_for
from remote_cluster import Agent, Cluster, running

from gpuplaned.protocol.errors import ApiError

pytestmark = pytest.mark.e2e

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"
# 3 heartbeats, then the scheduler's next tick (2 s) marks the node OFFLINE: allow a margin.
LOST_WITHIN = 15.0
CUT_S = 60.0  # the cut: the agent runs its job and spools everything for a minute
TAIL_LINES = 2000  # [node] log_tail_lines' default: what the server's store keeps

# A job in three steps, with gates the test opens (marker files in its cwd): write the first half,
# wait for "go" (the test breaks the link before), write the second half while the link is down,
# finish the SDK session (every batch acknowledged), wait for "end", exit 0.
JOB = textwrap.dedent("""
    import os, sys, time
    import gpuplane

    lines, points = int(sys.argv[1]), int(sys.argv[2])
    run = gpuplane.init()

    def write(part):
        for i in range(part * lines // 2, (part + 1) * lines // 2):
            sys.stdout.write(f"line {i:07d} {'x' * (i % 50)}\\n")
        sys.stdout.flush()
        for step in range(part * points // 2, (part + 1) * points // 2):
            run.log({"loss": 1.0 / (step + 1)}, step=step)

    def gate(mark, wait):
        open(mark, "w").close()
        while not os.path.exists(wait):
            time.sleep(0.02)

    write(0)
    gate("half", "go")
    write(1)
    open("written", "w").close()
    run.finish(timeout=120)
    print("stats", run.stats(), file=sys.stderr, flush=True)
    gate("finished", "end")
""")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(tmp_path_factory.mktemp("remote"), "a1", "a2") as cluster:
        yield cluster


def agent_named(cluster: Cluster, name: str) -> Agent:
    return next(a for a in cluster.agents if a.name == name)


# -- the checks ---------------------------------------------------------------------------


def stored_steps(cluster: Cluster, run_id: str) -> list[int]:
    series = cluster.api.get(f"/api/v1/runs/{run_id}/series?name=loss&columns=step&limit=1000000")
    assert series["next_cursor"] is None
    return series["step"]


def full_log(cluster: Cluster, job: dict, stream: str = "stdout") -> bytes:
    """The whole file, read through the server page by page (for a remote job: from the agent)."""
    out: list[str] = []
    offset = 0
    while True:
        page = cluster.api.get(f"/api/v1/jobs/{job['id']}/logs?stream={stream}&offset={offset}&limit=100000")
        if not page["lines"]:
            return "".join(f"{line}\n" for line in out).encode()
        out.extend(line["line"] for line in page["lines"])
        offset = page["next_offset"]


def stored_tail(cluster: Cluster, job: dict) -> list[tuple[int, str]]:
    """The server's copy of the job's last stdout lines, read from its database (read-only)."""
    db = sqlite3.connect(f"file:{cluster.server.home / 'gpuplane.db'}?mode=ro", uri=True, timeout=10)
    try:
        return db.execute("SELECT offset, line FROM job_logs WHERE job_id = ? AND attempt = ? AND stream = 'stdout' "
                          "ORDER BY offset", (job["id"], job["attempt"])).fetchall()
    finally:
        db.close()


def file_lines(path: Path) -> list[tuple[int, str]]:
    found, offset = [], 0
    for raw in path.read_bytes().splitlines(keepends=True):
        found.append((offset, raw.rstrip(b"\n").decode()))
        offset += len(raw)
    return found


def assert_exactly_once(cluster: Cluster, agent: Agent, job: dict, lines: int, points: int) -> None:
    assert job["status"] == "SUCCEEDED" and job["exit_code"] == 0 and job["attempt"] == 1, job
    assert stored_steps(cluster, job["run_id"]) == list(range(points))
    path = agent.log_file(job)
    on_disk = file_lines(path)
    assert len(on_disk) == lines
    # The tail the logs actor reports over the uplink: the file's last lines, each once.
    assert stored_tail(cluster, job) == on_disk[-TAIL_LINES:]
    tail = cluster.api.get(f"/api/v1/jobs/{job['id']}/logs?stream=stdout&tail=100")["lines"]
    assert [(line["offset"], line["line"]) for line in tail] == on_disk[-100:]
    assert hashlib.sha256(full_log(cluster, job)).hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()


def disconnect_events(cluster: Cluster, job_id: str) -> list[dict]:
    events = cluster.api.get("/api/v1/events?type=AGENT_DISCONNECTED&limit=100")["events"]
    return [e for e in events if job_id in str(e["context"])]


def run_through_outage(cluster: Cluster, agent: Agent, work: Path, *, lines: int, points: int,
                       down: Callable[[], None], up: Callable[[], None], expect_lost: bool = True,
                       hold_s: float = 0.0) -> dict:
    """A JOB on ``agent`` whose second half is written while ``down()`` holds (for at least
    ``hold_s``); then ``up()``."""
    work.mkdir(parents=True, exist_ok=True)
    job = cluster.api.post("/api/v1/jobs", {
        "command": [sys.executable, "-c", JOB, str(lines), str(points)], "cwd": str(work), "gpu": 0,
        "node": agent.name, "env": {"PYTHONPATH": str(SDK_DIR)}})["job"]
    cluster.wait_job(job["id"], "RUNNING")
    wait_for((work / "half").exists, 60, what="the job's first half")

    down()
    went_down = time.monotonic()
    (work / "go").touch()
    wait_for((work / "written").exists, 60, what="the job's second half, written while the link is down")
    if expect_lost:
        cluster.wait_job(job["id"], "LOST", timeout=LOST_WITHIN)
        assert agent.node()["status"] == "OFFLINE"
        assert len(disconnect_events(cluster, job["id"])) == 1
    time.sleep(max(0.0, hold_s - (time.monotonic() - went_down)))  # the outage itself, not a timer under test

    up()
    wait_for(lambda: (agent.node() or {}).get("status") == "ONLINE", 30, what=f"{agent.name} ONLINE again")
    cluster.wait_job(job["id"], "RUNNING", timeout=30)  # reconciled: LOST -> RUNNING
    wait_for((work / "finished").exists, 90, interval=0.05, what="the SDK to have every batch acknowledged")
    (work / "end").touch()
    done = cluster.wait_job(job["id"], "SUCCEEDED", "FAILED", "CANCELLED", timeout=30)
    assert_exactly_once(cluster, agent, done, lines, points)
    if expect_lost:
        assert len(disconnect_events(cluster, job["id"])) == 1  # one per disconnection, not per sweep
    return done


# -- the tests ----------------------------------------------------------------------------


def test_jobs_land_on_the_node_their_selector_names(cluster, tmp_path):
    by_name = {n["name"]: n for n in cluster.nodes()}
    assert {"a1", "a2"} <= set(by_name)
    jobs = {}
    for name in ("a1", "a2", "a2", "a1"):
        job = cluster.api.post("/api/v1/jobs", {"command": ["sh", "-c", 'echo "home=$GPUPLANE_HOME"'],
                                                "cwd": str(tmp_path), "gpu": 0, "node": name})["job"]
        jobs[job["id"]] = name
    for job_id, name in jobs.items():
        job = cluster.wait_job(job_id, "SUCCEEDED", "FAILED", "CANCELLED")
        assert job["status"] == "SUCCEEDED", job
        assert job["node_id"] == by_name[name]["id"]
        home = agent_named(cluster, name).daemon.home
        # The log record may reach the server after the status record (they are separate streams).
        out = wait_for(lambda: cluster.api.get(f"/api/v1/jobs/{job_id}/logs?stream=stdout")["lines"] or None, 15,
                       what="the job's stored log line")
        assert [line["line"] for line in out] == [f"home={home}"]


def test_a_cut_link_loses_and_repeats_nothing(cluster, tmp_path):
    agent = agent_named(cluster, "a1")
    run_through_outage(cluster, agent, tmp_path / "work", lines=100_000, points=100_000,
                       down=agent.proxy.cut, up=agent.proxy.restore, hold_s=CUT_S)


def test_a_stalled_link_is_dropped_after_three_heartbeats_and_loses_nothing(cluster, tmp_path):
    agent = agent_named(cluster, "a2")
    run_through_outage(cluster, agent, tmp_path / "work", lines=5_000, points=20_000,
                       down=agent.proxy.stall, up=agent.proxy.restore)


def test_kill_9_of_the_agent_mid_run_then_a_restart_adopts_the_job(cluster, tmp_path):
    agent = agent_named(cluster, "a1")
    run_through_outage(cluster, agent, tmp_path / "work", lines=5_000, points=20_000,
                       down=agent.daemon.kill, up=agent.restart)


@pytest.mark.parametrize("kind", ["bad", "revoked"])
def test_a_bad_or_revoked_token_is_refused_and_the_agent_exits_2(cluster, kind):
    name = f"{kind}-agent"
    if kind == "bad":
        token = "gpp_" + "0" * 26 + "_" + "x" * 43  # well formed, never issued
    else:
        token = cluster.token(f"{kind}-token", ["agent"])
        cluster.api.post(f"/api/v1/tokens/{kind}-token/revoke", {})
    agent = Agent(cluster, name, token, proxied=False)
    agent.daemon.start()
    started = time.monotonic()
    assert agent.daemon.wait_exit(20) == 2, agent.daemon.log()
    assert time.monotonic() - started < 20
    assert "token" in agent.daemon.log().lower()
    assert token not in agent.daemon.log()  # never logged
    assert cluster.node(name) is None


def _outage_job(cluster: Cluster, agent: Agent, work: Path, script: str) -> dict:
    """A job on ``agent`` that writes ``started`` and then does ``script`` (a shell line)."""
    work.mkdir(parents=True, exist_ok=True)
    job = cluster.api.post("/api/v1/jobs", {"command": ["sh", "-c", f"touch started; {script}"], "cwd": str(work),
                                            "gpu": 0, "node": agent.name})["job"]
    running = cluster.wait_job(job["id"], "RUNNING")
    wait_for((work / "started").exists, 30, what="the job to start")
    return running


def _cut_until_lost(cluster: Cluster, agent: Agent, job: dict) -> None:
    agent.proxy.cut()
    cluster.wait_job(job["id"], "LOST", timeout=LOST_WITHIN)


def test_a_job_that_ends_while_the_link_is_down_is_reconciled_to_how_it_ended(cluster, tmp_path):
    agent = agent_named(cluster, "a1")
    work = tmp_path / "work"
    job = _outage_job(cluster, agent, work, "while [ ! -e go ]; do sleep 0.02; done; echo done; exit 3")
    _cut_until_lost(cluster, agent, job)
    (work / "go").touch()
    wait_for(lambda: agent.log_file(job).read_text() == "done\n", 30, what="the job to end while the link is down")
    agent.proxy.restore()
    done = cluster.wait_job(job["id"], "SUCCEEDED", "FAILED", "CANCELLED", timeout=30)
    assert (done["status"], done["exit_code"], done["failure_reason"]) == ("FAILED", 3, "EXIT_CODE"), done
    lines = cluster.api.get(f"/api/v1/jobs/{job['id']}/logs?stream=stdout")["lines"]
    assert [line["line"] for line in lines] == ["done"]


def test_a_cancel_made_while_the_node_is_away_reaches_it_when_it_is_back(cluster, tmp_path):
    agent = agent_named(cluster, "a1")
    work = tmp_path / "work"
    job = _outage_job(cluster, agent, work, "trap 'touch stopped; exit 143' TERM; while :; do sleep 0.05; done")
    _cut_until_lost(cluster, agent, job)
    cancelled = cluster.api.post(f"/api/v1/jobs/{job['id']}/cancel", {})["job"]
    assert cancelled["cancel_requested"] is True
    time.sleep(1.0)  # the outage itself: nothing can reach the job now
    assert not (work / "stopped").exists()
    agent.proxy.restore()
    done = cluster.wait_job(job["id"], "SUCCEEDED", "FAILED", "CANCELLED", timeout=30)
    assert done["status"] == "CANCELLED", done
    assert (work / "stopped").exists()  # SIGTERM reached the job on the agent


SAVES = textwrap.dedent("""
    import os, time
    import torch
    import gpuplane

    run = gpuplane.init()
    os.makedirs("checkpoints", exist_ok=True)
    for step, loss in ((10, 0.5), (20, 0.1), (30, 0.3), (40, 0.4)):
        torch.save({"step": step, "w": torch.zeros(64)}, f"checkpoints/step_{step}.pt")
        run.log({"val/loss": loss}, step=step)
    run.finish(timeout=60)
    open("saved", "w").close()
    while not os.path.exists("end"):
        time.sleep(0.05)
""")


def test_checkpoints_of_a_remote_node_are_verified_and_pruned_there(cluster, tmp_path):
    """verify and prune go through the agent (whose checkpoints they are); while it is away,
    verify is unavailable and prune refuses, both naming the node, and nothing is marked."""
    agent = agent_named(cluster, "a2")
    work = tmp_path / "work"
    work.mkdir()
    cluster.api.request("PUT", "/api/v1/primary-metric", {"metric": "val/loss"})
    job = cluster.api.post("/api/v1/jobs", {"command": [sys.executable, "-c", SAVES], "cwd": str(work), "gpu": 0,
                                            "node": agent.name, "env": {"PYTHONPATH": str(SDK_DIR)}})["job"]
    wait_for((work / "saved").exists, 90, what="the job's checkpoints")
    run_id = cluster.wait_job(job["id"], "RUNNING")["run_id"]

    def listed() -> list[dict] | None:
        found = cluster.api.get(f"/api/v1/runs/{run_id}/checkpoints")["checkpoints"]
        return found if len(found) == 4 and all(c.get("fingerprint") for c in found) else None

    by_step = {c["step"]: c for c in wait_for(listed, 30, what="the agent's watcher to register 4 checkpoints")}
    best, first = by_step[20], by_step[10]
    verified = cluster.api.post(f"/api/v1/checkpoints/{best['id']}/verify", {})
    assert (verified["present"], verified["changed"]) == (True, False) and verified["full_hash"]

    _cut_until_lost(cluster, agent, job)
    with pytest.raises(ApiError) as away:
        cluster.api.post(f"/api/v1/checkpoints/{best['id']}/verify", {})
    assert away.value.code.value == "unavailable" and "node 'a2'" in away.value.message
    held = cluster.api.post(f"/api/v1/runs/{run_id}/checkpoints/prune",
                            {"keep_best": 1, "keep_last": 1, "dry_run": False})
    assert held["deleted"] == [] and {r["step"] for r in held["refused"]} == {10, 30}
    assert all("node 'a2', whose agent is not connected" in r["reason"] for r in held["refused"])
    assert Path(first["path"]).exists()

    agent.proxy.restore()
    cluster.wait_job(job["id"], "RUNNING", timeout=30)
    done = cluster.api.post(f"/api/v1/runs/{run_id}/checkpoints/prune",
                            {"keep_best": 1, "keep_last": 1, "dry_run": False})
    assert sorted(d["step"] for d in done["deleted"]) == [10, 30] and done["refused"] == []
    assert not Path(first["path"]).exists() and Path(best["path"]).exists() and Path(by_step[40]["path"]).exists()
    (work / "end").touch()
    cluster.wait_job(job["id"], "SUCCEEDED", timeout=30)


# Last: it restarts the module's server.
def test_an_sdk_run_begun_while_the_link_is_down_keeps_the_time_it_began(cluster, tmp_path, monkeypatch):
    """A script on an agent's node that starts while the server is unreachable spools its run (the
    agent answers 503); the run the server makes when the link is back began at the script's init(),
    not at the replay."""
    if str(SDK_DIR) not in sys.path:
        sys.path.insert(0, str(SDK_DIR))
    from gpuplane import _run as sdk_run

    agent = agent_named(cluster, "a2")
    runtime_dir = agent.daemon.runtime_dir
    began = time.time() - 3600  # the script's clock: well before the replay, whenever that comes
    monkeypatch.setattr(sdk_run, "_time", lambda: began)
    agent.proxy.cut()
    try:
        wait_for(lambda: (daemon_info(runtime_dir) or {}).get("uplink", {}).get("state") != "connected", 15,
                 what="the agent to see its link down")
        run = sdk_run.Run(env={"GPUPLANE_RUNTIME_DIR": str(runtime_dir), "GPUPLANE_HOME": str(tmp_path / "sdk")},
                          name="begun-offline", wait=0)
        run.log({"loss": 0.25}, step=0)
        wait_for(lambda: run.stats()["spooled"] == 1, 30, what="the point to reach the SDK's spool")
    finally:
        agent.proxy.restore()
    # The script replays its spool itself once the agent answers (a finish before any answer gives up).
    wait_for(lambda: run.id is not None, 60, what="the SDK to open its run through the agent")
    run.finish(timeout=60)
    shown = cluster.api.get(f"/api/v1/runs/{run.id}")["run"]
    assert (shown["name"], shown["status"], shown["created_at"]) == ("begun-offline", "SUCCEEDED", int(began * 1000))


def test_kill_9_of_the_server_mid_run_then_a_restart_loses_nothing(cluster, tmp_path):
    agent = agent_named(cluster, "a2")

    def down() -> None:
        cluster.server.kill()
        refused = agent.proxy.refused
        # The agent's redials meet nothing for a while (its backoff runs) before the server is back.
        wait_for(lambda: agent.proxy.refused > refused, 15, what="the agent to redial the dead server")

    def up() -> None:
        cluster.restart_server()

    # The restarted server may see the node away (LOST) or the agent back first: either way, the end.
    run_through_outage(cluster, agent, tmp_path / "work", lines=5_000, points=20_000,
                       down=down, up=up, expect_lost=False)
