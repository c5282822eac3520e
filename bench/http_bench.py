#!/usr/bin/env python3
"""Benchmark gpuplaned's HTTP front: request rate and latency on loopback TCP, and SSE fan-out.

Figures, measured against daemons started in a fresh temporary directory
(``GPUPLANE_HTTP=127.0.0.1:0``, an ``admin`` token created over the Unix socket, every TCP
request with ``Authorization: Bearer <secret>``):

1. Requests. Closed-loop clients (separate processes, stdlib ``http.client``, one keep-alive
   connection each, the next request as soon as the last answer is read) for a fixed
   window, with 1 client and with ``--clients`` clients (4 by default):
   ``GET /api/v1/jobs`` with 200 finished ``true`` jobs in the store (the default page: 100
   jobs), and ``GET /api/v1/nodes/{id}/metrics?names=gpu0.*,host.*&window=1h&points=300``
   for a ``--gpus fake:8`` node. Requests/s, p50/p99 latency, the daemon's CPU over the
   window, and the clients' own CPU: on a 2-CPU machine the clients and the daemon share the
   CPUs, so the rate is a floor, not the daemon's ceiling. The same ``GET /api/v1/jobs`` over
   the Unix socket (no token) for comparison.
   The metrics come from a first daemon on the same home that samples every 0.1 s (batches
   every 0.5 s) for ``--fill-seconds``; the measured daemon runs on that home with the
   default intervals, so its monitor costs what it costs in use.
2. SSE fan-out. One job (``python -u``) prints 10,000 lines per second for ``--stream-seconds``
   (10 s, 3 s with ``--quick``), each line ``<seq> <time.time()> <padding>``, paced against
   its own start (one ``write`` per 1 ms tick holding the lines due by then). 50 followers
   over TCP (``GET /api/v1/jobs/{id}/logs/stream?stream=stdout``, ``--follower-procs``
   processes holding the connections in threads, one each by default) connect while the job
   waits for a go-file; the go-file is made once every follower has sent its request, the
   job is RUNNING and a settle second has passed. Each follower keeps the raw stream and a
   receive time per chunk; after every follower has its ``end`` event they parse: lines
   delivered (all, in order, none repeated), and per line the receive time minus the stamp
   in the line (same wall clock). Reported: delivery latency p50/p99/max over all followers,
   the daemon's CPU from the go-file to the last ``end``, the followers' CPU, and the job's
   pacing (lines per second achieved, the most it fell behind its schedule).

Usage::

    .venv/bin/python bench/http_bench.py            # full run, about 2.5 minutes on 2 CPUs
    .venv/bin/python bench/http_bench.py --quick    # smoke run, about 1 minute
    .venv/bin/python bench/http_bench.py --json     # JSON on stdout, progress on stderr

Always exits 0 (it is a benchmark, not a test) unless the arguments are wrong. Every daemon,
client and follower it starts is stopped on the way out, including on Ctrl-C, SIGTERM and
errors; processes left running under its temp dir (a job's shim, the job) are killed; the
temp dir is removed unless ``--keep``. Standard library, psutil, ``bench/daemon_bench.py``
and ``bench/jobs_bench.py``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import multiprocessing
import os
import queue
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
from gpuplanectl.client import UnixHTTPConnection

sys.path.insert(0, str(Path(__file__).resolve().parent))

from daemon_bench import (  # noqa: E402
    DaemonFailed,
    error_lines,
    guarded_run,
    heading,
    host_busy_s,
    kill_forked_children,
    progress,
    raise_interrupt,
    report,
    run_meta,
    table_lines,
)
from jobs_bench import (  # noqa: E402 - the sibling benchmarks' daemon handling
    TERMINAL,
    Daemon,
    JobDaemons,
    stats,
    wait_until,
)

JOBS_IN_STORE = 200
METRICS_QUERY = "names=gpu0.*,host.*&window=1h&points=300"
FILL_CONFIG = "[monitor]\nsample_interval_s = 0.1\nbatch_interval_s = 0.5\n"
WARMUP_REQUESTS = 20  # per client, before the window opens
CLIENT_TIMEOUT = 30.0
STREAM_RATE = 10_000  # lines per second
LINE_BYTES = 64  # each stdout line, newline included
FOLLOW_SETTLE = 1.0  # seconds between "every follower has asked" and the go-file (> the 0.5 s status poll)
FOLLOW_TIMEOUT = 300.0  # after the job's planned end, for every follower to have its end event
PARSE_TIMEOUT = 120.0

EMITTER = r'''
import json, os, sys, time
go, rate, seconds, width = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
while not os.path.exists(go):
    time.sleep(0.001)
total = int(rate * seconds)
pad = "x" * max(0, width - 30)
n = writes = 0
behind = []  # per write: how late its first line is against the schedule t0 + seq / rate
t0 = time.time()
while n < total:
    now = time.time()
    due = min(total, int((now - t0) * rate) + 1)
    if due > n:
        behind.append(now - (t0 + n / rate))
        os.write(1, "".join(["%d %.6f %s\n" % (i, time.time(), pad) for i in range(n, due)]).encode())
        writes += 1
        n = due
    time.sleep(0.001)
t1 = time.time()
cpu = os.times()
behind.sort()
sys.stderr.write(json.dumps({"lines": n, "t0": t0, "t1": t1, "writes": writes,
                             "behind_max_s": behind[-1] if behind else None,
                             "behind_p99_s": behind[min(len(behind) - 1, int(0.99 * len(behind)))] if behind else None,
                             "cpu_s": cpu.user + cpu.system}) + "\n")
'''


# --------------------------------------------------------------------------------------------
# Small helpers


def fmt_ms(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value * 1000:.{digits}f} ms"


def pct(cpu_s: float | None, wall_s: float | None) -> float | None:
    return None if cpu_s is None or not wall_s else 100.0 * cpu_s / wall_s


def cpu_s(pid: int) -> float | None:
    """User + system time of one process (all its threads), None once it is gone."""
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return t.user + t.system


def connect(target: dict[str, Any]) -> http.client.HTTPConnection:
    if target["unix"]:
        return UnixHTTPConnection(target["unix"], CLIENT_TIMEOUT)
    conn = http.client.HTTPConnection(target["host"], target["port"], timeout=CLIENT_TIMEOUT)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


class HttpDaemon:
    """A started daemon plus what the HTTP benches need: the TCP address and a token."""

    def __init__(self, d: Daemon) -> None:
        self.d = d
        body = d.client.get("/api/v1/daemon")
        url = body["endpoints"]["http"]
        if not url:
            raise DaemonFailed(f"the daemon has no HTTP endpoint: {body['endpoints']}")
        host, port = url.split("://", 1)[1].rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.secret = d.client.post("/api/v1/tokens", {"name": f"bench-{d.proc.pid}", "scopes": ["admin"]})["secret"]
        self.node_id = d.client.get("/api/v1/nodes")["nodes"][0]["id"]

    def tcp(self) -> dict[str, Any]:
        return {"unix": None, "host": self.host, "port": self.port,
                "headers": {"Authorization": f"Bearer {self.secret}"}}

    def unix(self) -> dict[str, Any]:
        return {"unix": self.d.socket_path, "host": None, "port": None, "headers": {}}


def start_daemon(dm: JobDaemons, *flags: str, home: Path | None = None) -> HttpDaemon:
    extra = ("--home", str(home)) if home is not None else ()
    d = dm.start(*extra, *flags)
    if home is not None:
        d.home = home
    return HttpDaemon(d)


# --------------------------------------------------------------------------------------------
# 1. Requests


def client_main(target: dict[str, Any], path: str, seconds: float, ready: Any, go: Any, results: Any,
                index: int) -> None:
    """One closed-loop client: warm up, wait for ``go``, request ``path`` for ``seconds``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    out: dict[str, Any] = {"index": index, "error": None, "latencies": [], "bytes": None, "bad": 0}
    try:
        conn = connect(target)
        for _ in range(WARMUP_REQUESTS):
            conn.request("GET", path, headers=target["headers"])
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {body[:300]!r}")
            out["bytes"] = len(body)
        ready.put(index)
        go.wait()
        lat = out["latencies"]
        headers = target["headers"]
        cpu0 = time.process_time()
        t_start = time.perf_counter()
        t_end = t_start + seconds
        now = t_start
        while now < t_end:
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            response.read()
            t = time.perf_counter()
            if response.status != 200:
                out["bad"] += 1
            lat.append(t - now)
            now = t
        out["elapsed_s"] = now - t_start
        out["cpu_s"] = time.process_time() - cpu0
        conn.close()
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        out["error"] = f"{type(exc).__name__}: {exc}"
        ready.put(index)
    results.put(out)


def request_run(hd: HttpDaemon, label: str, target: dict[str, Any], path: str, clients: int, seconds: float,
                ctx: Any) -> dict[str, Any]:
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=client_main, args=(target, path, seconds, ready, go, results, i), daemon=True)
             for i in range(clients)]
    for p in procs:
        p.start()
    got: list[dict[str, Any]] = []
    try:
        for _ in procs:
            ready.get(timeout=CLIENT_TIMEOUT)
        cpu0, host0 = cpu_s(hd.d.proc.pid), host_busy_s()
        w0 = time.perf_counter()
        go.set()
        for _ in procs:
            got.append(results.get(timeout=seconds + CLIENT_TIMEOUT))
            if len(got) == 1:  # the first client's window closed
                cpu1, host1, w1 = cpu_s(hd.d.proc.pid), host_busy_s(), time.perf_counter()
    except BaseException:
        for p in procs:  # interrupted or failed: no waiting for them
            p.kill()
        raise
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
    errors = [g["error"] for g in got if g["error"]]
    lat = [x for g in got for x in g["latencies"]]
    elapsed = max((g.get("elapsed_s") or 0.0) for g in got) or seconds
    daemon_cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    client_cpu = sum(g.get("cpu_s") or 0.0 for g in got)
    run = {
        "label": label, "path": path, "transport": "unix" if target["unix"] else "tcp", "clients": clients,
        "seconds": elapsed, "requests": len(lat), "rps": len(lat) / elapsed,
        "latency_s": stats(lat), "p50_s": statistics.median(lat) if lat else None,
        "daemon_cpu_pct": pct(daemon_cpu, w1 - w0), "client_cpu_pct": pct(client_cpu, elapsed),
        # Everything else the machine ran meanwhile (other users' processes, this bench's parent).
        "other_cpu_pct": pct(host1 - host0 - (daemon_cpu or 0.0) - client_cpu * (w1 - w0) / elapsed, w1 - w0),
        "response_bytes": next((g["bytes"] for g in got if g["bytes"]), None),
        "non_200": sum(g["bad"] for g in got), "errors": errors,
    }
    progress(f"{label}, {clients} client(s): {run['rps']:.0f} req/s, p50 {fmt_ms(run['p50_s'])}, "
             f"p99 {fmt_ms(run['latency_s']['p99'])}, daemon CPU {run['daemon_cpu_pct'] or 0:.0f} %"
             f"{', ERRORS: ' + '; '.join(errors) if errors else ''}")
    return run


def fill_store(dm: JobDaemons, root: Path, fill_seconds: float) -> tuple[Path, dict[str, Any]]:
    """A first daemon on a fresh home: 200 ``true`` jobs run to the end, metrics sampled every
    0.1 s for ``fill_seconds``. Returns the home and what it holds."""
    cfg = root / "fill.toml"
    cfg.write_text(FILL_CONFIG)
    hd = start_daemon(dm, "--gpus", "fake:8", "--max-cpu-jobs", "8", "--config", str(cfg))
    t0 = time.monotonic()
    progress(f"fill: {JOBS_IN_STORE} 'true' jobs, metrics every 0.1 s for {fill_seconds:g} s")
    ids = [hd.d.submit(["true"], gpu=0)["id"] for _ in range(JOBS_IN_STORE)]
    wait_until(lambda: all(hd.d.job(i)["status"] in TERMINAL for i in ids[-8:]) and
               len([j for j in hd.d.client.get(f"/api/v1/jobs?limit={JOBS_IN_STORE}")["jobs"]
                    if j["status"] in TERMINAL]) == JOBS_IN_STORE, 120.0, 0.1, "the 200 jobs to end")
    time.sleep(max(0.0, fill_seconds - (time.monotonic() - t0)))
    m = hd.d.client.get(f"/api/v1/nodes/{hd.node_id}/metrics?{METRICS_QUERY}")
    held = {"jobs": JOBS_IN_STORE, "fill_s": time.monotonic() - t0, "node_id": hd.node_id, "series": len(m["series"]), "points": len(m["x"]),
            "resolution": m.get("resolution")}
    home = hd.d.home
    dm.stop(hd.d.proc)
    return home, held


def bench_requests(hd: HttpDaemon, clients: list[int], seconds: float, ctx: Any) -> dict[str, Any]:
    metrics_path = f"/api/v1/nodes/{hd.node_id}/metrics?{METRICS_QUERY}"
    m = hd.d.client.get(metrics_path)
    listed = hd.d.client.get("/api/v1/jobs")["jobs"]
    plan = (("GET /api/v1/jobs", hd.tcp(), "/api/v1/jobs"),
            ("GET node metrics", hd.tcp(), metrics_path),
            ("GET /api/v1/jobs (Unix socket)", hd.unix(), "/api/v1/jobs"))
    runs = []
    for label, target, path in plan:
        for c in clients:
            runs.append(request_run(hd, label, target, path, c, seconds, ctx))
    # Idle baseline: the daemon's own CPU with no client (monitor at default intervals).
    c0, w0 = cpu_s(hd.d.proc.pid), time.perf_counter()
    time.sleep(min(5.0, seconds))
    c1, w1 = cpu_s(hd.d.proc.pid), time.perf_counter()
    return {"runs": runs, "jobs_listed": len(listed), "metrics_series": len(m["series"]),
            "metrics_points": len(m["x"]), "metrics_resolution": m.get("resolution"),
            "idle_daemon_cpu_pct": pct(None if c0 is None or c1 is None else c1 - c0, w1 - w0)}


# --------------------------------------------------------------------------------------------
# 2. SSE fan-out


def _follow_one(target: dict[str, Any], job_id: str, sent: Any, slot: dict[str, Any]) -> None:
    try:
        conn = connect(target)
        conn.request("GET", f"/api/v1/jobs/{job_id}/logs/stream?stream=stdout",
                     headers={**target["headers"], "Accept": "text/event-stream"})
        sent.put(1)
        response = conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
        chunks: list[bytes] = []
        times: list[float] = []
        tail = b""
        while True:
            chunk = response.read1(1 << 16)
            if not chunk:
                break
            times.append(time.time())
            chunks.append(chunk)
            # Only the end event is looked for here (the stream's last frame); parsing waits.
            probe = tail + chunk
            if b"event: end\n" in probe:
                break
            tail = probe[-16:]
        conn.close()
        slot.update(chunks=chunks, times=times)
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        slot["error"] = f"{type(exc).__name__}: {exc}"
        sent.put(1)


def parse_stream(chunks: list[bytes], times: list[float], expected: int) -> dict[str, Any]:
    """Lines, order, latency histogram of one follower's stream (after the measurement)."""
    counts: Counter[int] = Counter()  # latency in 0.1 ms units, coarser above 1 s
    seqs: list[int] = []
    lat_min = lat_max = None
    pending = b""
    for chunk, t in zip(chunks, times):
        data = pending + chunk
        cut = data.rfind(b"\n\n")
        if cut < 0:
            pending = data
            continue
        pending = data[cut + 2:]
        for event in data[:cut].split(b"\n\n"):
            if b"event: stdout\n" not in event:
                continue
            for field in event.split(b"\n"):
                if field.startswith(b"data: "):
                    seq, stamp = field[6:].split(b" ", 2)[:2]
                    seqs.append(int(seq))
                    lat = t - float(stamp)
                    lat_min = lat if lat_min is None or lat < lat_min else lat_min
                    lat_max = lat if lat_max is None or lat > lat_max else lat_max
                    counts[bucket(lat)] += 1
    in_order = all(b == a + 1 for a, b in zip(seqs, seqs[1:])) and (not seqs or seqs[0] == 0)
    return {"lines": len(seqs), "unique": len(set(seqs)), "in_order": in_order,
            "intact": in_order and len(seqs) == expected, "hist": dict(counts),
            "lat_min_s": lat_min, "lat_max_s": lat_max, "bytes": sum(map(len, chunks)),
            "t_first": times[0] if times else None, "t_end": times[-1] if times else None}


def bucket(lat: float) -> int:
    """0.1 ms buckets below 1 s, 1 ms below 10 s, 10 ms above; negative clamps to 0."""
    if lat < 1.0:
        return max(0, int(lat * 10_000))
    if lat < 10.0:
        return 10_000 + int((lat - 1.0) * 1000) * 10
    return 100_000 + int((lat - 10.0) * 100) * 100


def bucket_value(b: int) -> float:
    """The upper edge of bucket ``b`` in seconds (percentiles read a little high, never low)."""
    if b < 10_000:
        return (b + 1) / 10_000
    if b < 100_000:
        return 1.0 + ((b - 10_000) // 10 + 1) / 1000
    return 10.0 + ((b - 100_000) // 100 + 1) / 100


def hist_percentile(hist: Counter[int], q: float) -> float | None:
    total = sum(hist.values())
    if not total:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= rank:
            return bucket_value(b)
    return None


def follower_main(target: dict[str, Any], inbox: Any, sent: Any, received: Any, parse: Any, results: Any,
                  conns: int, first_index: int, expected: int) -> None:
    """``conns`` follower connections in threads; reports when all have their end event, parses
    only once the parent says so (every follower done), so parsing does not load the stream."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    job_id = inbox.recv()
    if job_id is None:
        return
    cpu0 = time.process_time()
    slots: list[dict[str, Any]] = [{} for _ in range(conns)]
    threads = [threading.Thread(target=_follow_one, args=(target, job_id, sent, slot), daemon=True)
               for slot in slots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    received.put(time.process_time() - cpu0)
    if not parse.wait(PARSE_TIMEOUT):
        return
    for i, slot in enumerate(slots):
        out: dict[str, Any] = {"index": first_index + i, "error": slot.get("error")}
        if out["error"] is None:
            out.update(parse_stream(slot["chunks"], slot["times"], expected))
        results.put(out)


def bench_fanout(hd: HttpDaemon, python: str, root: Path, followers: int, procs_n: int, seconds: float,
                 rate: int, ctx: Any) -> dict[str, Any]:
    d = hd.d
    emitter = root / "emit.py"
    emitter.write_text(EMITTER)
    go_file = root / "go"
    go_file.unlink(missing_ok=True)
    expected = int(rate * seconds)
    inbox_sent, received, parse, results = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Queue()
    per = [followers // procs_n + (1 if i < followers % procs_n else 0) for i in range(procs_n)]
    procs, pipes = [], []
    first = 0
    for n in per:
        ours, theirs = ctx.Pipe()
        p = ctx.Process(target=follower_main, daemon=True,
                        args=(hd.tcp(), theirs, inbox_sent, received, parse, results, n, first, expected))
        p.start()
        procs.append(p)
        pipes.append(ours)
        first += n
    out: dict[str, Any] = {"followers": followers, "follower_procs": procs_n, "rate": rate, "seconds": seconds,
                           "expected_lines": expected, "line_bytes": LINE_BYTES}
    try:
        job_id = d.submit([python, "-u", str(emitter), str(go_file), str(rate), str(seconds), str(LINE_BYTES)],
                          gpu=0)["id"]
        out["job_id"] = job_id
        for pipe in pipes:
            pipe.send(job_id)
        for _ in range(followers):
            inbox_sent.get(timeout=CLIENT_TIMEOUT)
        wait_until(lambda: d.job(job_id)["status"] == "RUNNING", CLIENT_TIMEOUT, 0.02, "the emitter to run")
        time.sleep(FOLLOW_SETTLE)
        try:
            out["tcp_connections"] = sum(1 for c in psutil.Process(d.proc.pid).net_connections("tcp")
                                         if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == hd.port)
        except psutil.Error:
            out["tcp_connections"] = None
        progress(f"fan-out: {followers} followers in {procs_n} processes connected "
                 f"({out['tcp_connections']} TCP connections at the daemon); the job prints "
                 f"{rate} lines/s for {seconds:g} s")
        cpu0, host0, w0 = cpu_s(d.proc.pid), host_busy_s(), time.time()
        go_file.touch()
        follower_cpu = 0.0
        deadline = time.monotonic() + seconds + FOLLOW_TIMEOUT
        for _ in procs:
            follower_cpu += received.get(timeout=max(1.0, deadline - time.monotonic()))
        cpu1, host1, w1 = cpu_s(d.proc.pid), host_busy_s(), time.time()
        job, _ = d.wait_terminal(job_id, interval=0.05)
        out["job_status"] = job["status"]
        parse.set()
        got = [results.get(timeout=PARSE_TIMEOUT) for _ in range(followers)]
    except BaseException:
        for p in procs:  # interrupted or failed: no waiting for them (nor for their queue)
            p.kill()
        raise
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
    summary_lines = (d.attempt_dir(job_id) / "stderr.log").read_text(errors="replace").strip().splitlines()
    pacing = json.loads(summary_lines[-1]) if summary_lines else {}
    hist: Counter[int] = Counter()
    for g in got:
        hist.update({int(k): v for k, v in (g.get("hist") or {}).items()})
    ok = [g for g in got if not g.get("error")]
    t_end_last = max((g["t_end"] for g in ok if g.get("t_end")), default=None)
    job_wall = (pacing["t1"] - pacing["t0"]) if pacing else None
    daemon_cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    if pacing and daemon_cpu is not None:
        out["other_cpu_pct"] = pct(host1 - host0 - daemon_cpu - follower_cpu - pacing["cpu_s"], w1 - w0)
    out.update({
        "errors": [f"follower {g['index']}: {g['error']}" for g in got if g.get("error")],
        "lines_per_follower": stats([g["lines"] for g in ok]),
        "intact_followers": sum(1 for g in ok if g["intact"]),
        "not_intact": [{k: g[k] for k in ("index", "lines", "unique", "in_order")} for g in ok if not g["intact"]],
        "latency_p50_s": hist_percentile(hist, 0.50), "latency_p99_s": hist_percentile(hist, 0.99),
        "latency_max_s": max((g["lat_max_s"] for g in ok if g.get("lat_max_s") is not None), default=None),
        "latency_min_s": min((g["lat_min_s"] for g in ok if g.get("lat_min_s") is not None), default=None),
        "latency_samples": sum(hist.values()),
        "window_s": w1 - w0,
        "daemon_cpu_s": daemon_cpu,
        "daemon_cpu_pct": pct(daemon_cpu, w1 - w0),
        "follower_cpu_pct": pct(follower_cpu, w1 - w0),
        "host_busy_pct": pct(host1 - host0, w1 - w0),
        "bytes_per_follower": stats([g["bytes"] for g in ok]),
        "last_end_after_job_end_s": (t_end_last - pacing["t1"]) if t_end_last and pacing else None,
        "pacing": pacing,
        "job_rate": pacing["lines"] / job_wall if pacing and job_wall else None,
        "job_cpu_pct": pct(pacing.get("cpu_s"), job_wall) if pacing else None,
    })
    progress(f"fan-out: p50 {fmt_ms(out['latency_p50_s'], 1)}, p99 {fmt_ms(out['latency_p99_s'], 1)}, "
             f"daemon CPU {out['daemon_cpu_pct'] or 0:.0f} %, {out['intact_followers']}/{followers} intact")
    return out


# --------------------------------------------------------------------------------------------
# Report


def table_rows(res: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    req = res.get("requests")
    if req:
        for r in req["runs"]:
            lat = r["latency_s"]
            text = (f"{r['rps']:.0f} req/s, p50 {fmt_ms(r['p50_s'])}, p99 {fmt_ms(lat['p99'])}; "
                    f"CPU: daemon {r['daemon_cpu_pct']:.0f} %, clients {r['client_cpu_pct']:.0f} %, "
                    f"others {r['other_cpu_pct']:.0f} %")
            if r["errors"] or r["non_200"]:
                text += f"; {len(r['errors'])} client errors, {r['non_200']} non-200"
            rows.append((f"{r['label']}, {r['clients']} client{'s' if r['clients'] > 1 else ''}", text,
                         "report", "info" if not r["errors"] and not r["non_200"] else "FAIL"))
        rows.append(("  GET /api/v1/jobs response", f"{req['jobs_listed']} jobs (default page), "
                     f"{next((r['response_bytes'] for r in req['runs'] if r['path'] == '/api/v1/jobs'), 0)} bytes",
                     "", "info"))
        fill = res["meta"].get("store", {}).get("fill_s") or 0.0
        rows.append(("  node metrics response", f"{req['metrics_series']} series x {req['metrics_points']} points "
                     f"({req['metrics_resolution']}; ~{fill * 10:.0f} raw samples a series from the fill), "
                     f"{next((r['response_bytes'] for r in req['runs'] if 'metrics' in r['path']), 0)} bytes",
                     "", "info"))
        if req.get("idle_daemon_cpu_pct") is not None:
            rows.append(("  daemon CPU with no client (baseline)", f"{req['idle_daemon_cpu_pct']:.1f} %", "", "info"))
    fan = res.get("fanout")
    if fan:
        n = fan["followers"]
        lpf = fan["lines_per_follower"]
        bad = len(fan["errors"]) + len(fan["not_intact"])
        rows.append((f"SSE fan-out: lines per follower ({n} followers)",
                     f"{lpf['median'] if lpf['n'] else float('nan'):.0f} of {fan['expected_lines']} (min {lpf['min']}, max "
                     f"{lpf['max']}); {fan['intact_followers']}/{n} all, in order, none repeated",
                     "all, in order", "info" if bad == 0 else "FAIL"))
        rows.append(("SSE fan-out: delivery latency (stamp -> received)",
                     f"p50 {fmt_ms(fan['latency_p50_s'], 1)}, p99 {fmt_ms(fan['latency_p99_s'], 1)}, "
                     f"max {fmt_ms(fan['latency_max_s'], 1)} (n={fan['latency_samples']})", "report", "info"))
        rows.append(("SSE fan-out: daemon CPU (go -> last end event)",
                     f"{fan['daemon_cpu_pct']:.0f} % of one core over {fan['window_s']:.1f} s "
                     f"({fan['daemon_cpu_s']:.1f} s CPU)", "report", "info"))
        rows.append(("  followers' CPU (all processes)", f"{fan['follower_cpu_pct']:.0f} % of one core "
                     f"({fan['follower_procs']} processes)", "", "info"))
        if fan.get("other_cpu_pct") is not None:
            rows.append(("  other processes' CPU meanwhile", f"{fan['other_cpu_pct']:.0f} % of one core "
                         f"(machine busy {fan['host_busy_pct']:.0f} % of one core, {res['meta']['cpus']} cores)",
                         "", "info"))
        pace = fan.get("pacing") or {}
        if pace:
            rows.append(("  job pacing: lines/s achieved", f"{fan['job_rate']:.0f}/s of {fan['rate']}/s "
                         f"({pace['lines']} lines in {pace['t1'] - pace['t0']:.2f} s, {pace['writes']} writes); "
                         f"behind schedule p99 {fmt_ms(pace['behind_p99_s'], 1)}, max {fmt_ms(pace['behind_max_s'], 1)}",
                         "", "info"))
            rows.append(("  job's own CPU", f"{fan['job_cpu_pct']:.0f} % of one core", "", "info"))
        rows.append(("  last end event after the job's last line", fmt_ms(fan["last_end_after_job_end_s"], 0),
                     "", "info"))
        rows.append(("  stream size per follower", f"{(fan['bytes_per_follower']['median'] or 0) / 1e6:.1f} MB "
                     f"({(fan['bytes_per_follower']['median'] or 0) / 1e6 / fan['seconds']:.2f} MB/s)", "", "info"))
    return rows


def render(res: dict[str, Any]) -> str:
    try:
        rows = table_rows(res)
    except (KeyError, TypeError, ValueError) as exc:  # a half-finished section: still report
        res["errors"].append(f"table: {type(exc).__name__}: {exc}")
        return json.dumps(res, indent=2, default=str)
    meta = res["meta"]
    out = [*heading("gpuplaned HTTP benchmark", meta),
           f"requests: closed-loop client processes ({meta['clients']}), one keep-alive http.client "
           f"connection each, {meta['request_seconds']:g} s per row; they share the {meta['cpus']} CPUs with "
           f"the daemon",
           f"fan-out: {meta['followers']} followers over TCP in {meta['follower_procs']} processes "
           f"({'one connection each' if meta['followers'] == meta['follower_procs'] else 'threads'}), "
           f"{meta['rate']} lines/s for {meta['stream_seconds']:g} s", "", *table_lines(rows), ""]
    out.append("CPU figures are % of one core: the daemon process (all its threads), the client processes "
               "together, the job; 'others' is the rest of the machine's busy time in the same window "
               "(other users' processes): with it high, every figure here is pessimistic.")
    fan = res.get("fanout")
    if fan and fan["not_intact"]:
        out.append(f"Followers not intact (first 5): {fan['not_intact'][:5]}")
    if fan and fan["errors"]:
        out.append(f"Follower errors (first 5): {fan['errors'][:5]}")
    out.extend(error_lines(res))
    return "\n".join(out)


# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 3 s per request row, 8 s metric fill, 3 s stream")
    parser.add_argument("--json", action="store_true", help="write the figures as JSON to stdout")
    parser.add_argument("--clients", default="1,4", help="client processes per request row (default 1,4)")
    parser.add_argument("--request-seconds", type=float, help="window per request row (default 10, quick 3)")
    parser.add_argument("--fill-seconds", type=float, help="metric fill at 0.1 s sampling (default 32, quick 8)")
    parser.add_argument("--followers", type=int, default=50, help="SSE followers (default 50)")
    parser.add_argument("--follower-procs", type=int, help="processes holding them (default: one per follower)")
    parser.add_argument("--stream-seconds", type=float, help="how long the job prints (default 10, quick 3)")
    parser.add_argument("--rate", type=int, default=STREAM_RATE, help=f"lines per second (default {STREAM_RATE})")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs gpuplaned (default: this one)")
    parser.add_argument("--log-level", choices=("debug", "info", "warning"), default="warning",
                        help="passed to gpuplaned (default warning: no per-request log lines)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (daemon logs) and print its path")
    parser.add_argument("--skip", action="append", default=[], choices=("requests", "fanout"),
                        help="skip a section (repeatable)")
    args = parser.parse_args(argv)
    q = args.quick
    args.request_seconds = args.request_seconds if args.request_seconds is not None else (3.0 if q else 10.0)
    args.fill_seconds = args.fill_seconds if args.fill_seconds is not None else (8.0 if q else 32.0)
    args.stream_seconds = args.stream_seconds if args.stream_seconds is not None else (3.0 if q else 10.0)
    args.follower_procs = args.follower_procs or args.followers
    try:
        args.clients = [int(s) for s in args.clients.split(",") if s.strip()]
    except ValueError:
        parser.error("--clients takes comma-separated integers")
    if (not args.clients or min(args.clients) < 1 or args.request_seconds <= 0 or args.fill_seconds < 0
            or args.followers < 1 or not 1 <= args.follower_procs <= args.followers or args.stream_seconds <= 0
            or args.rate < 1):
        parser.error("counts and durations must be positive (and --follower-procs <= --followers)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_interrupt)
    root = Path(tempfile.mkdtemp(prefix="gpuplane-http-bench-"))
    dm = JobDaemons(args.python, root, args.log_level)
    ctx = multiprocessing.get_context("fork")
    res: dict[str, Any] = {
        "meta": run_meta(args, clients=",".join(map(str, args.clients)), request_seconds=args.request_seconds,
                         followers=args.followers, follower_procs=args.follower_procs, rate=args.rate,
                         stream_seconds=args.stream_seconds, targets="none: the issue asks for the figures"),
        "errors": [],
    }
    t_start = time.perf_counter()
    with guarded_run(res, root, args.keep, t_start, "daemons", kill_forked_children, dm.stop_all):
        home, held = fill_store(dm, root, args.fill_seconds if "requests" not in args.skip else 0.0)
        res["meta"]["store"] = held
        hd = start_daemon(dm, "--gpus", "fake:8", home=home)
        if "requests" not in args.skip:
            try:
                res["requests"] = bench_requests(hd, args.clients, args.request_seconds, ctx)
            except (DaemonFailed, TimeoutError, queue.Empty) as exc:
                res["errors"].append(f"requests: {type(exc).__name__}: {exc}")
        if "fanout" not in args.skip:
            try:
                res["fanout"] = bench_fanout(hd, os.path.realpath(sys.executable), root, args.followers,
                                             args.follower_procs, args.stream_seconds, args.rate, ctx)
            except (DaemonFailed, TimeoutError, queue.Empty, OSError, ValueError) as exc:
                res["errors"].append(f"fan-out: {type(exc).__name__}: {exc}")
        dm.stop(hd.d.proc)
    return report(res, args.json, render)


if __name__ == "__main__":
    sys.exit(main())
