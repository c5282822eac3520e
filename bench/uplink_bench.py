#!/usr/bin/env python3
"""Benchmark the remote agent's uplink (issue 18): points/s and log lines/s end to end from one
agent, the replay of a 1M-record backlog, and the agent's idle cost.

One ``--role server --http 127.0.0.1:0`` daemon and one ``--role agent --gpus fake:1`` daemon
dialing it through ``tests/netproxy.py``'s TCP proxy (so the link can be cut), each in its own
temporary home and runtime dir, with an agent token made on the server's local socket. A
``--role all`` daemon (``--gpus fake:1``) runs the same loads through its local socket as the
peer figure (a ratio: what the uplink costs over the in-process node link).

1. points/s: ``--sdk-procs`` SDK processes (4; sdk/ on PYTHONPATH, the agent's runtime dir:
   their batches ride the uplink as session_call requests) log N points together (4 metrics
   x N/4 steps), unpaced (each SDK's 400k-point queue holds its N/4: nothing is dropped; one
   process logging 1M points unpaced outruns any delivery and the SDK drops the oldest, by
   design) or paced at ``--points-rate`` points/s offered in all, then ``finish()``; from the
   first ``log()`` of any (their wall clock) until the server's ``GET /api/v1/runs/{id}/metrics``
   counts all N points (polled every 2 ms), or until the count has stopped for 10 s (then
   the points lost are shown, with the SDKs' counters).
2. log lines/s: a job on the agent prints M lines; from the job's start (``runtime.json``
   ``started_at``) until a follower of the server's ``/api/v1/jobs/{id}/logs/stream`` (on the
   server's local socket, connected before the job starts printing) has every line; and until
   the server's stored tail holds the last line (its database, read-only).
3. replay: the agent is stopped, its spool (``<home>/uplink``) is filled with B records
   (``sys_metrics`` bodies of one point each: the smallest record, so the most of them a
   megabyte), the agent is started with the proxy cut (it answers on its socket but is not
   READY: its runner waits for the server's hello) and ``[uplink] reconnect_max_s = 0.5``
   (so that its backoff does not hide the replay), then the link is restored. Timed: from the
   first poll that sees the link ``connected`` until the agent's ``GET /api/v1/daemon`` says
   the spool's backlog is 0 (polled every 20 ms), with the default replay rate limits unless
   ``--replay-rate`` / ``--replay-bytes-rate`` set them; also from the restore. Before the
   start, the server is left to settle (under 5 % of a core over a second: what the sections
   before gave it, compaction and rollups of 2M points and lines, is done). Then the
   server's stored count of the points is checked (exactly once: B more, not fewer, not more).
4. idle (run first, on the fresh agent): the agent, connected and idle, 2 s settle, then
   utime+stime of its process tree over ``--idle-seconds`` as % of one core, and its RSS
   (sampled every second; max and end); then the same of the role-all peer, for comparison.

Usage::

    .venv/bin/python bench/uplink_bench.py                   # full run
    .venv/bin/python bench/uplink_bench.py --quick           # smoke run: 100k points/lines/records, 5 s idle
    .venv/bin/python bench/uplink_bench.py --skip points --skip lines --skip idle   # the replay alone
    .venv/bin/python bench/uplink_bench.py --json > out.json # figures as JSON, progress on stderr
    .venv/bin/python bench/uplink_bench.py --skip idle       # sections: points, lines, replay, idle

Always exits 0 (a benchmark, not a test) unless the arguments are wrong. Daemons and children
are stopped on the way out (Ctrl-C and SIGTERM included), then the temp dir is removed unless
``--keep``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

REPO = Path(__file__).resolve().parent.parent
SDK_DIR = REPO / "sdk"
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO / "tests"))  # netproxy

from daemon_bench import (  # noqa: E402
    READY_TIMEOUT,
    SETTLE_SECONDS,
    DaemonFailed,
    Daemons,
    _cpu_s,
    _rss,
    _tree,
    error_lines,
    guarded_run,
    heading,
    progress,
    raise_interrupt,
    report,
    run_meta,
    table_lines,
    wait_ready,
)
from netproxy import TcpProxy  # noqa: E402
from jobs_bench import wait_until  # noqa: E402
from sdk_bench import NAMES, Api, stored_counts  # noqa: E402

TARGET_POINTS_PER_S = 500_000
TARGET_REPLAY_S = 5.0
TARGET_IDLE_CPU_PCT = 0.5
TARGET_IDLE_RSS_MB = 60.0
POLL = 0.002
TIMEOUT = 300.0

SDK_SCRIPT = r"""
import json, sys, time, gpuplane
steps, rate = int(sys.argv[1]), float(sys.argv[3])
run = gpuplane.init(project="uplink-bench", name=sys.argv[2])
first = time.time()
for step in range(steps):
    if rate and step % 100 == 0 and (ahead := first + step / rate - time.time()) > 0:
        time.sleep(ahead)
    run.log({"train/loss": 1.0 / (step + 1), "train/acc": step / steps, "train/lr": 0.001,
             "train/grad_norm": 0.5})
loop = time.time()
run.finish(timeout=600)
print(json.dumps({"run_id": run.id, "first": first, "loop_end": loop, "finished": time.time(),
                  "stats": run.stats()}), flush=True)
"""
PRINT_SCRIPT = "import sys\nw = sys.stdout.write\nfor i in range(int(sys.argv[1])):\n    w(f'line {i}\\n')\n"


# --------------------------------------------------------------------------------------------
# Daemons


class Node:
    """One started daemon: its dirs, its socket API, its process."""

    def __init__(self, proc: subprocess.Popen[bytes], root: Path, home: Path, runtime_dir: Path,
                 info: dict[str, Any]) -> None:
        from gpuplanectl.client import DaemonClient

        self.proc, self.root, self.home, self.runtime_dir, self.info = proc, root, home, runtime_dir, info
        self.client = DaemonClient.discover(runtime_dir)
        self.api = Api(self.client.portfile.unix)
        self.work = root / "work"
        self.work.mkdir(exist_ok=True)

    def submit(self, command: list[str], **fields: Any) -> dict[str, Any]:
        return self.client.post("/api/v1/jobs", {"command": command, "cwd": str(self.work), "gpu": 0,
                                                 **fields})["job"]


class Cluster(Daemons):
    """``Daemons`` (daemon_bench) for a server, an agent behind a proxy and a role-all peer."""

    def __init__(self, python: str, root: Path, log_level: str | None) -> None:
        super().__init__(python, root, log_level)
        self.proxies: list[TcpProxy] = []

    def env(self, runtime_dir: Path | None = None) -> dict[str, str]:
        env = super().env(runtime_dir)
        for key in [k for k in env if k.startswith("GPUPLANE_") and k not in ("GPUPLANE_RUNTIME_DIR", "GPUPLANE_HTTP")]:
            del env[key]  # no testing hooks or tokens from the caller's shell
        return env

    def start(self, name: str, *flags: str, config: str = "", env: dict[str, str] | None = None,
              home: Path | None = None) -> Node:
        run_root = self.root / name
        run_root.mkdir(exist_ok=True)
        home = home or run_root / "home"
        runtime_dir = run_root / "run"
        runtime_dir.mkdir(mode=0o700, exist_ok=True)
        config_file = run_root / "gpuplaned.toml"
        config_file.write_text(config)
        cmd = [self.python, "-m", "gpuplaned", *flags, "--config", str(config_file)]
        if self.log_level:
            cmd += ["--log-level", self.log_level]
        full_env = {**self.env(runtime_dir), "GPUPLANE_HOME": str(home), **(env or {})}
        log_path = run_root / f"daemon-{len(list(run_root.glob('daemon-*.log')))}.log"
        with open(log_path, "wb") as log:
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=full_env, cwd=run_root, start_new_session=True)
        proc.log_path = log_path  # type: ignore[attr-defined]
        self.procs.append(proc)
        try:
            info = wait_ready(proc, runtime_dir, t0)["body"]
        except Exception:
            self.stop(proc, timeout=5)
            raise
        progress(f"{name}: pid {proc.pid} ready ({' '.join(flags)})")
        return Node(proc, run_root, home, runtime_dir, info)

    def stop_all(self) -> None:
        for proxy in self.proxies:
            proxy.close()
        super().stop_all()


def server_node(server: Node, name: str) -> dict[str, Any] | None:
    return next((n for n in server.client.get("/api/v1/nodes")["nodes"] if n["name"] == name), None)


def backlog_records(agent: Node) -> int | None:
    """The agent's spool backlog (``GET /api/v1/daemon``'s ``uplink.backlog_records``)."""
    return (agent.client.get("/api/v1/daemon").get("uplink") or {}).get("backlog_records")


def sdk_env(node: Node) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANE_")}
    env.pop("XDG_RUNTIME_DIR", None)
    env.update(PYTHONPATH=str(SDK_DIR), GPUPLANE_RUNTIME_DIR=str(node.runtime_dir), GPUPLANE_HOME=str(node.home),
               PYTHONUNBUFFERED="1")
    return env


# --------------------------------------------------------------------------------------------
# 1. points/s


def bench_points(via: Node, server: Node, points: int, label: str, rate: float, procs: int) -> dict[str, Any]:
    """``procs`` SDK processes on ``via``'s socket log ``points`` together (``rate`` points/s
    offered in all, 0: as fast as they can); until ``server`` counts them all."""
    steps = points // len(NAMES) // procs
    children = [subprocess.Popen([sys.executable, "-c", SDK_SCRIPT, str(steps), f"{label}-{i}",
                                  str(rate / len(NAMES) / procs)], env=sdk_env(via), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, cwd=via.work) for i in range(procs)]
    outs = []
    for child in children:
        stdout, stderr = child.communicate(timeout=TIMEOUT)
        if child.returncode != 0:
            raise RuntimeError(f"the SDK script failed: {stderr[-2000:]}")
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    expected = steps * len(NAMES) * procs
    stored, stalled_s = wait_all_stored(server, [out["run_id"] for out in outs], expected)
    first = min(out["first"] for out in outs)
    elapsed = time.time() - first
    total = {key: sum(out["stats"].get(key) or 0 for out in outs) for key in ("dropped", "errors", "rejected_batches")}
    res = {"label": label, "procs": procs, "points": expected, "offered_per_s": rate, "stored": stored,
           "loop_s": max(out["loop_end"] for out in outs) - first,
           "finish_s": max(out["finished"] - out["loop_end"] for out in outs), "to_stored_s": elapsed,
           "points_per_s": stored / elapsed, **total}
    if stored < expected:  # the count stopped moving: timed up to the last point that came
        res["to_stored_s"] = elapsed - stalled_s
        res["points_per_s"] = stored / res["to_stored_s"]
    return res


def wait_all_stored(server: Node, run_ids: list[str], expected: int, stall_s: float = 10.0) -> tuple[int, float]:
    """Poll until ``expected`` points are stored over ``run_ids``, or the count has not moved
    for ``stall_s`` (the SDK dropped some): (the count, seconds since it last moved)."""
    last, moved = -1, time.monotonic()
    deadline = moved + TIMEOUT
    while True:
        count = sum(sum(stored_counts(server.api, run_id, NAMES).values()) for run_id in run_ids)
        now = time.monotonic()
        if count >= expected:
            return count, 0.0
        if count != last:
            last, moved = count, now
        elif now - moved > stall_s or now > deadline:
            return count, now - moved
        time.sleep(POLL)


# --------------------------------------------------------------------------------------------
# 2. log lines/s


class Follower(threading.Thread):
    """Counts the stdout lines of a job's SSE stream on ``socket_path`` until its ``end`` event."""

    def __init__(self, socket_path: str, job_id: str) -> None:
        super().__init__(daemon=True)
        from gpuplanectl.client import UnixHTTPConnection

        self.conn = UnixHTTPConnection(socket_path, TIMEOUT)
        self.conn.request("GET", f"/api/v1/jobs/{job_id}/logs/stream?stream=stdout")
        self.resp = self.conn.getresponse()
        self.lines = 0
        self.last_at: float | None = None
        self.error: str | None = None

    def run(self) -> None:
        event = None
        try:
            while raw := self.resp.readline():
                text = raw.decode().rstrip("\n")
                if text.startswith("event:"):
                    event = text[6:].strip()
                elif text.startswith("data:") and event == "stdout":
                    self.lines += 1
                    self.last_at = time.time()
                elif text.startswith("data:") and event == "end":
                    return
                elif not text:
                    event = None
        except (OSError, http.client.HTTPException) as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.conn.close()


def stored_last_offset(db: Path, job_id: str) -> int | None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute("SELECT max(offset) FROM job_logs WHERE job_id = ? AND stream = 'stdout'",
                            (job_id,)).fetchone()[0]
    finally:
        conn.close()


def bench_lines(runs_on: Node, server: Node, lines: int, label: str, **fields: Any) -> dict[str, Any]:
    gate = runs_on.work / f"go-{label}"
    script = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.005)\n" + PRINT_SCRIPT
    job = server.submit([sys.executable, "-c", script, str(lines)], **fields)
    wait_until(lambda: server.client.get(f"/api/v1/jobs/{job['id']}")["job"]["status"] == "RUNNING", 30, 0.01,
               f"{label}: the job RUNNING")
    follower = Follower(server.client.portfile.unix, job["id"])
    follower.start()
    gate.touch()
    attempt = runs_on.home / "jobs" / job["id"] / "attempt-1"
    last_offset = None

    def ended() -> bool:
        nonlocal last_offset
        if not (attempt / "exit.json").exists():
            return False
        data = (attempt / "stdout.log").read_bytes()
        last_offset = data.rstrip(b"\n").rfind(b"\n") + 1
        return True

    wait_until(ended, TIMEOUT, 0.01, f"{label}: the job to end")
    wait_until(lambda: stored_last_offset(server.home / "gpuplane.db", job["id"]) == last_offset, TIMEOUT, POLL,
               f"{label}: the last line stored")
    stored_at = time.time()
    follower.join(TIMEOUT)
    started = json.loads((attempt / "runtime.json").read_text())["started_at"]
    out = {"label": label, "lines": lines, "tail_stored_s": stored_at - started,
           "followed_lines": follower.lines, "follower_error": follower.error}
    if follower.last_at and follower.lines == lines:
        out["followed_s"] = follower.last_at - started
        out["lines_per_s"] = lines / out["followed_s"]
    return out


# --------------------------------------------------------------------------------------------
# 3. replay


REPLAY_METRIC = "bench/replay"
REPLAY_POLL = 0.02


def fill_spool(home: Path, records: int) -> float:
    from gpuplaned.protocol.agent import RECORD_BODIES, SysMetrics
    from gpuplaned.uplink.spool import Spool

    t0 = time.perf_counter()
    now = int(time.time() * 1000)
    # One body through the converter, the rest as copies of its shape (the converter would
    # make the fill take longer than the replay). ``seq`` as the monitor's: its first point's ts.
    template = RECORD_BODIES.unstructure(SysMetrics(seq=1, points=((REPLAY_METRIC, now, 1.0),)))
    with Spool(home / "uplink", max_bytes=1 << 40, max_age_s=86_400, fsync="never") as spool:
        for i in range(records):
            spool.append("metrics", {**template, "seq": now + i, "points": [[REPLAY_METRIC, now + i, 1.0]]})
    return time.perf_counter() - t0


def start_answering(cluster: Cluster, name: str, flags: tuple[str, ...], config: str, env: dict[str, str],
                    home: Path) -> Node:
    """``Cluster.start`` for an agent that cannot be READY (its link is cut): until its socket answers."""
    from gpuplanectl.client import DaemonClient, DaemonUnreachable, NoDaemon

    from gpuplaned.protocol.errors import ApiError

    run_root = cluster.root / name
    runtime_dir = run_root / "run"
    config_file = run_root / "gpuplaned.toml"
    config_file.write_text(config)
    cmd = [cluster.python, "-m", "gpuplaned", *flags, "--config", str(config_file)]
    full_env = {**cluster.env(runtime_dir), "GPUPLANE_HOME": str(home), **env}
    log_path = run_root / f"daemon-{len(list(run_root.glob('daemon-*.log')))}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                cwd=run_root, start_new_session=True)
    proc.log_path = log_path  # type: ignore[attr-defined]
    cluster.procs.append(proc)
    deadline = time.monotonic() + READY_TIMEOUT + 60  # the spool's open reads every line of it
    while True:
        try:
            body = DaemonClient.discover(runtime_dir, timeout=2.0).get("/api/v1/daemon")
            break
        except (NoDaemon, DaemonUnreachable, ApiError):
            pass
        if proc.poll() is not None:
            raise DaemonFailed(f"gpuplaned exited with {proc.returncode}:\n{Daemons.log_tail(proc)}")
        if time.monotonic() > deadline:
            cluster.stop(proc, timeout=5)
            raise DaemonFailed(f"gpuplaned did not answer:\n{Daemons.log_tail(proc)}")
        time.sleep(0.01)
    return Node(proc, run_root, home, runtime_dir, body)


def link_state(agent: Node) -> str | None:
    return (agent.client.get("/api/v1/daemon").get("uplink") or {}).get("state")


def stored_node_points(server: Node, node_id: str) -> int:
    conn = sqlite3.connect(f"file:{server.home / 'gpuplane.db'}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute("SELECT coalesce(sum(c.n), 0) FROM ts_chunks c JOIN ts_series s ON s.id = c.series_id "
                            "WHERE s.kind = 'node' AND s.owner = ? AND s.name = ? AND c.res = 0",
                            (node_id, REPLAY_METRIC)).fetchone()[0]
    finally:
        conn.close()


def settle(node: Node, below_pct: float = 5.0, longest_s: float = 120.0) -> float:
    """Wait until ``node``'s daemon uses under ``below_pct`` of a core over a second (what the
    sections before left it to do: compaction, rollups); the seconds it took."""
    p = psutil.Process(node.proc.pid)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < longest_s:
        before = sum(p.cpu_times()[:2])
        time.sleep(1.0)
        if 100.0 * (sum(p.cpu_times()[:2]) - before) < below_pct:
            break
    return time.perf_counter() - t0


def bench_replay(cluster: Cluster, server: Node, agent: Node, proxy: TcpProxy, token: str, records: int,
                 rates: str, agent_flags: tuple[str, ...], config: str) -> tuple[dict[str, Any], Node]:
    node_id = (server_node(server, "bench-agent") or {}).get("id")
    stored_before = stored_node_points(server, node_id) if node_id else 0
    cluster.stop(agent.proc)
    fill_s = fill_spool(agent.home, records)
    progress(f"replay: spooled {records:,} records in {fill_s:.1f} s; agent restarted with the link cut")
    proxy.cut()
    settled_s = settle(server)
    t_start = time.perf_counter()
    agent = start_answering(cluster, "agent", agent_flags, config + rates + "reconnect_max_s = 0.5\n",
                            {"GPUPLANE_TOKEN": token}, agent.home)
    open_s = time.perf_counter() - t_start
    before = backlog_records(agent)
    procs = {"agent": psutil.Process(agent.proc.pid), "server": psutil.Process(server.proc.pid)}
    cpu0 = {name: sum(p.cpu_times()[:2]) for name, p in procs.items()}
    t0 = time.perf_counter()
    proxy.restore()
    wait_until(lambda: link_state(agent) == "connected", 60, 0.01, "the link up again")
    t_up = time.perf_counter()
    # Polled every 20 ms: each poll is a request the agent answers while it replays.
    wait_until(lambda: backlog_records(agent) == 0, TIMEOUT, REPLAY_POLL, "the spool's backlog to reach 0")
    took = time.perf_counter() - t_up
    cpu = {name: sum(p.cpu_times()[:2]) - cpu0[name] for name, p in procs.items()}
    wait_ready(agent.proc, agent.runtime_dir, time.perf_counter())
    stored = stored_node_points(server, node_id) - stored_before if node_id else None
    return {"records": records, "backlog_before": before, "rates": rates.strip().replace("\n", ", ") or "defaults",
            "fill_s": fill_s, "agent_open_s": open_s, "restore_to_up_s": t_up - t0, "replay_s": took,
            "from_restore_s": time.perf_counter() - t0, "records_per_s": records / took,
            "bytes_up": proxy.bytes_up, "stored_points": stored, "agent_cpu_s": cpu["agent"],
            "server_cpu_s": cpu["server"], "server_settled_s": settled_s}, agent


# --------------------------------------------------------------------------------------------
# 4. idle


def bench_idle(agent: Node, seconds: float) -> dict[str, Any]:
    """``agent`` (any daemon) idle: CPU of its process tree over ``seconds``, and its RSS."""
    time.sleep(SETTLE_SECONDS)
    p = psutil.Process(agent.proc.pid)
    tree = _tree(p)
    cpu0, w0 = _cpu_s(tree), time.perf_counter()
    rss = [_rss(tree)]
    while (left := w0 + seconds - time.perf_counter()) > 0:
        time.sleep(min(1.0, left))
        tree = _tree(p)
        rss.append(_rss(tree))
        if agent.proc.poll() is not None:
            raise DaemonFailed(f"the daemon exited with {agent.proc.returncode} while idle")
    wall = time.perf_counter() - w0
    cpu = _cpu_s(tree) - cpu0
    return {"window_s": wall, "cpu_pct_one_core": 100.0 * cpu / wall,
            "cpu_resolution_pct": 100.0 / os.sysconf("SC_CLK_TCK") / wall,
            "rss_end_mb": rss[-1] / 1e6, "rss_max_mb": max(rss) / 1e6, "children": len(tree) - 1,
            "rss_main_mb": p.memory_info().rss / 1e6}


# --------------------------------------------------------------------------------------------
# Report


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def table_rows(res: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    pts = res.get("points")
    if pts:
        agent, peer = pts.get("agent"), pts.get("all")
        if agent:
            offered = (f"{agent['procs']} SDK procs, {agent['offered_per_s']:,.0f}/s offered" if agent["offered_per_s"]
                       else f"{agent['procs']} SDK procs, unpaced")
            rows.append(("points/s, agent -> server", f"{agent['points_per_s']:,.0f} ({agent['stored']:,} in "
                         f"{agent['to_stored_s']:.2f} s; {offered}, loop {agent['loop_s']:.2f} s)",
                         f">= {TARGET_POINTS_PER_S:,}", verdict(agent["points_per_s"] >= TARGET_POINTS_PER_S)))
        if peer:
            rows.append(("points/s, role all (peer)", f"{peer['points_per_s']:,.0f} ({peer['stored']:,} in "
                         f"{peer['to_stored_s']:.2f} s)", "info", ""))
        for one in (agent, peer):
            if one and one["stored"] < one["points"]:
                rows.append((f"  points lost, {one['label']}", f"{one['points'] - one['stored']:,} of "
                             f"{one['points']:,} (SDK stats: dropped {one['dropped']}, errors {one['errors']}, "
                             f"rejected batches {one['rejected_batches']})", "0", "FAIL"))
        if agent and peer:
            rows.append(("  agent / role all", f"{agent['points_per_s'] / peer['points_per_s']:.2f}", "info", ""))
    lns = res.get("lines")
    if lns:
        for key, label in (("agent", "agent -> server"), ("all", "role all (peer)")):
            one = lns.get(key)
            if one:
                followed = (f"{one['lines_per_s']:,.0f} (followed in {one['followed_s']:.2f} s)"
                            if "lines_per_s" in one else f"follower got {one['followed_lines']:,} of {one['lines']:,}")
                rows.append((f"log lines/s, {label}", followed, "info", ""))
                rows.append((f"  last line in the stored tail, {label}", f"{one['tail_stored_s']:.2f} s after start",
                             "info", ""))
    rep = res.get("replay")
    if rep:
        rows.append((f"replay of {rep['records']:,} records", f"{rep['replay_s']:.2f} s "
                     f"({rep['records_per_s']:,.0f} records/s; rate limits: {rep['rates']})",
                     f"<= {TARGET_REPLAY_S:g} s", verdict(rep["replay_s"] <= TARGET_REPLAY_S)))
        rows.append(("  CPU meanwhile", f"agent {rep['agent_cpu_s']:.2f} s, server {rep['server_cpu_s']:.2f} s "
                     f"({rep['bytes_up'] / 1e6:,.0f} MB up)", "info", ""))
        rows.append(("  server settled before", f"{rep['server_settled_s']:.0f} s until under 5 % of a core",
                     "info", ""))
        rows.append(("  restore -> link up", f"{rep['restore_to_up_s']:.2f} s (the agent's backoff)", "info", ""))
        rows.append(("  agent start with the backlog", f"{rep['agent_open_s']:.2f} s to answer (the spool's open "
                     f"reads it all; filled in {rep['fill_s']:.1f} s)", "info", ""))
        stored = rep.get("stored_points")
        rows.append(("  points stored by the replay", "n/a" if stored is None else f"{stored:,}",
                     f"== {rep['records']:,}", verdict(None if stored is None else stored == rep["records"])))
    idle = res.get("idle")
    if idle:
        rows.append(("agent idle CPU", f"{idle['cpu_pct_one_core']:.2f} % of a core over {idle['window_s']:.0f} s "
                     f"(1 tick = {idle['cpu_resolution_pct']:.3f} %)", f"< {TARGET_IDLE_CPU_PCT:g} %",
                     verdict(idle["cpu_pct_one_core"] < TARGET_IDLE_CPU_PCT)))
        rows.append(("agent idle RSS", f"{idle['rss_max_mb']:.1f} MB max, {idle['rss_end_mb']:.1f} MB end "
                     f"({idle['rss_main_mb']:.1f} MB the daemon, the rest its {idle['children']} child(ren))",
                     f"< {TARGET_IDLE_RSS_MB:g} MB", verdict(idle["rss_max_mb"] < TARGET_IDLE_RSS_MB)))
    peer = res.get("idle_peer")
    if peer:
        rows.append(("role all idle (peer)", f"{peer['cpu_pct_one_core']:.2f} % of a core, {peer['rss_max_mb']:.1f} MB "
                     f"({peer['rss_main_mb']:.1f} MB the daemon)", "info", ""))
    return rows


def render(res: dict[str, Any]) -> str:
    out = heading("uplink_bench", res["meta"])
    out += [""] + table_lines(table_rows(res))
    return "\n".join(out + error_lines(res))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 100k points, lines and records; 5 s idle")
    parser.add_argument("--json", action="store_true", help="write the figures as JSON to stdout")
    parser.add_argument("--points", type=int, help="SDK points per run (default 1,000,000; quick 100,000)")
    parser.add_argument("--points-rate", type=float, default=0,
                        help="points/s the SDK processes offer in all (paced; default 0: unpaced, each SDK's "
                             "queue holding its share; a process logging more than its 400k-point queue "
                             "while delivery lags drops the oldest, shown)")
    parser.add_argument("--sdk-procs", type=int, default=4,
                        help="SDK processes logging at once through the agent (default 4, as sdk_bench's ingest)")
    parser.add_argument("--lines", type=int, help="lines the log job prints (default 1,000,000; quick 100,000)")
    parser.add_argument("--backlog", type=int, help="spooled records to replay (default 1,000,000; quick 100,000)")
    parser.add_argument("--replay-rate", type=int,
                        help="the agent's [uplink] replay_records_per_s for the replay (default: the config's)")
    parser.add_argument("--replay-bytes-rate", type=int,
                        help="the agent's [uplink] replay_bytes_per_s for the replay (default: the config's)")
    parser.add_argument("--idle-seconds", type=float, help="idle window (default 30, quick 5)")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs gpuplaned")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), help="passed to gpuplaned")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (daemon logs) and print its path")
    parser.add_argument("--skip", action="append", default=[], choices=("points", "lines", "replay", "idle"),
                        help="skip a section (repeatable)")
    args = parser.parse_args(argv)
    q = args.quick
    args.points = args.points or (100_000 if q else 1_000_000)
    args.lines = args.lines or (100_000 if q else 1_000_000)
    args.backlog = args.backlog or (100_000 if q else 1_000_000)
    args.idle_seconds = args.idle_seconds or (5.0 if q else 30.0)
    counts = (args.points, args.lines, args.backlog, args.sdk_procs, args.replay_rate or 1, args.replay_bytes_rate or 1)
    if min(counts) < 1 or args.idle_seconds <= 0:
        parser.error("counts must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_interrupt)
    root = Path(tempfile.mkdtemp(prefix="gpuplane-uplink-bench-"))
    cluster = Cluster(args.python, root, args.log_level)
    res: dict[str, Any] = {"meta": run_meta(args, targets={
        "points_per_s": TARGET_POINTS_PER_S, "replay_s": TARGET_REPLAY_S, "idle_cpu_pct": TARGET_IDLE_CPU_PCT,
        "idle_rss_mb": TARGET_IDLE_RSS_MB}), "errors": []}
    t_start = time.perf_counter()
    with guarded_run(res, root, args.keep, t_start, "daemons", cluster.stop_all):
        server = cluster.start("server", "--role", "server", "--http", "127.0.0.1:0")
        url = urlsplit(server.info["endpoints"]["http"])
        proxy = TcpProxy((url.hostname, url.port))
        cluster.proxies.append(proxy)
        token = server.client.post("/api/v1/tokens", {"name": "bench-agent", "scopes": ["agent"]})["secret"]
        agent_flags = ("--role", "agent", "--server", proxy.url, "--gpus", "fake:1", "--node-name", "bench-agent")
        config = "[uplink]\n"
        agent = cluster.start("agent", *agent_flags, config=config, env={"GPUPLANE_TOKEN": token})
        wait_until(lambda: (server_node(server, "bench-agent") or {}).get("status") == "ONLINE", 30, 0.05,
                   "the agent's node ONLINE on the server")
        peer = cluster.start("all", "--gpus", "fake:1")
        wait_until(lambda: peer.client.get("/api/v1/nodes")["nodes"], 30, 0.01, "the role-all node")

        def section(name: str, fn: Any) -> None:
            if name in args.skip:
                return
            try:
                fn()
            except (DaemonFailed, RuntimeError, TimeoutError, OSError) as exc:
                res["errors"].append(f"{name}: {type(exc).__name__}: {exc}")

        def points() -> None:
            res["points"] = {}
            progress(f"points: {args.points:,} from {args.sdk_procs} SDK process(es) via the agent, then role all")
            res["points"]["agent"] = bench_points(agent, server, args.points, "agent", args.points_rate, args.sdk_procs)
            res["points"]["all"] = bench_points(peer, peer, args.points, "all", args.points_rate, args.sdk_procs)

        def lines() -> None:
            res["lines"] = {}
            progress(f"lines: a job printing {args.lines:,} lines on the agent, then on role all")
            res["lines"]["agent"] = bench_lines(agent, server, args.lines, "agent", node="bench-agent")
            res["lines"]["all"] = bench_lines(peer, peer, args.lines, "all")

        def idle() -> None:
            progress(f"idle: the agent for {args.idle_seconds:g} s, then the role-all peer")
            res["idle"] = bench_idle(agent, args.idle_seconds)
            res["idle_peer"] = bench_idle(peer, args.idle_seconds)

        def replay() -> None:
            nonlocal agent
            rates = "".join(f"{key} = {value}\n" for key, value in (
                ("replay_records_per_s", args.replay_rate), ("replay_bytes_per_s", args.replay_bytes_rate)) if value)
            res["replay"], agent = bench_replay(cluster, server, agent, proxy, token, args.backlog, rates,
                                                agent_flags, config)

        section("idle", idle)  # first: the agent as it idles, not the high-water mark of the loads after
        section("points", points)
        section("lines", lines)
        section("replay", replay)  # last: it restarts the agent
    return report(res, args.json, render)


if __name__ == "__main__":
    sys.exit(main())
