#!/usr/bin/env python3
"""Benchmark the training SDK (issue 6): in-loop log() cost beside its peers, delivery, ingest, reads.

Figures, against a gpuplaned started in a temporary directory (``--gpus none --no-http``):

1. In-loop cost of ``run.log()`` with 4 scalars, timed on its own with
   ``time.perf_counter_ns`` around each call, the dict built outside the timer (the loop of
   shared/research/peers-perf.md section 1): a bare Python call (the timing floor), our SDK
   with no daemon (points queue and the oldest drop), our SDK against the daemon as fast as
   the loop goes, and paced at ``--paced-rate`` steps/s. Our SDK runs in this process.
2. The same loop for the peers, each in a child process of a separate venv (``--peers-venv``;
   ``--install-peers`` creates it from bench/requirements-peers.txt): SwanLab offline, wandb
   offline, tensorboardX's SummaryWriter, tensorboard's EventFileWriter (the writer under
   torch's SummaryWriter, without torch) and MLflow ``log_metrics`` (one ``log_batch``) on a
   file store. All offline, every directory (HOME included) in the temp dir, and HTTP(S)
   proxies pointed at a closed local port so that nothing can leave the machine.
3. A 100k-step run fully stored: ``finish()`` duration, then ``finish()`` return -> every
   point counted by ``GET /api/v1/runs/{id}/metrics`` (polled every 2 ms).
4. Sustained ingest: ``--ingest-procs`` SDK processes logging as fast as they can for
   ``--ingest-seconds``; points the daemon stored (counted through the API) over the wall
   time from the first log() to all stored, and the daemon's CPU.
5. Log -> queryable: a process logs its wall clock as a value every 10 ms; this process polls
   the API every 5 ms for new steps; latency = when a step came back - its value.
6. A 100k-point series read back in full: in one ``GET /api/v1/runs/{id}/series`` (the raw
   export), as JSON numbers and as base64 columns, each timed to the last byte received and
   to the columns decoded in this process; then the chart route for comparison (it caps
   ``points`` at ``MAX_POINTS``, so in pages of that many steps), downsampled in one request,
   and the tsdb functions directly on a read-only connection to the daemon's database.

Usage::

    .venv/bin/python bench/sdk_bench.py --install-peers   # once: the peers' venv
    .venv/bin/python bench/sdk_bench.py                   # full run, about 2 minutes on 2 CPUs
    .venv/bin/python bench/sdk_bench.py --quick           # smoke run, under 2 minutes
    .venv/bin/python bench/sdk_bench.py --json > out.json # figures as JSON, progress on stderr

Always exits 0 (it is a benchmark, not a test) unless the arguments are wrong. Daemons and
child processes (process groups) are stopped on the way out, Ctrl-C and SIGTERM included,
and the temp dir is removed unless ``--keep``. A peer that is not installed is reported as such.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil

REPO = Path(__file__).resolve().parent.parent
SDK_DIR = REPO / "sdk"
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(SDK_DIR))

from daemon_bench import (  # noqa: E402
    DaemonFailed,
    error_lines,
    guarded_run,
    heading,
    host_busy_s,
    progress,
    raise_interrupt,
    report,
    run_meta,
    table_lines,
)
from jobs_bench import Daemon, JobDaemons, stats  # noqa: E402

TARGET_P50_US = 2.0
TARGET_P99_US = 20.0
TARGET_STORED_S = 1.0
TARGET_INGEST_PPS = 500_000
TARGET_QUERYABLE_P99_S = 1.0
TARGET_READ_MS = 50.0

NAMES = ("train/loss", "train/acc", "train/lr", "train/grad_norm")
DROPPED_METRIC = "gpuplane/dropped_points"
DEFAULT_PEERS_VENV = "/tmp/gpuplane-peers-venv"
REQUIREMENTS = Path(__file__).resolve().parent / "requirements-peers.txt"
CLOSED_PROXY = "http://127.0.0.1:9"  # discard port, nothing listens: any request fails at once
STORED_POLL = 0.002
STORED_TIMEOUT = 30.0
QUERY_POLL = 0.005
LATENCY_INTERVAL = 0.010

# (key, label, issue's median in us, peers-perf.md p99 in us, peers-perf.md total s to durable for 100k steps)
PEERS = (
    ("swanlab", "SwanLab offline", 57, 589, 30.2),
    ("wandb", "wandb offline", 300, 1227, 38.3),
    ("tensorboardX", "tensorboardX SummaryWriter (crc32c, no torch)", 657, 2030, 66.5),
    ("tensorboard", "tensorboard EventFileWriter (torch SummaryWriter's writer, no torch)", 440, 1256, 48.5),
    ("mlflow", "MLflow log_metrics (one log_batch), file store", 1250, 2026, 127.4),
)
PEER_KEYS = tuple(p[0] for p in PEERS)
BARE_ANCHOR_US = 0.2
READ_ANCHOR_S = 1.25  # Aim, the fastest peer, peers-perf.md section 2

# The loop every tool runs, ours in this process and each peer in its own child (one source,
# so the dict and the timing are the same everywhere).
LOOP_SRC = r'''
import math, time
from array import array

def make_step(i, n):
    x = i / n
    return {"train/loss": 2.5 * math.exp(-5.0 * x) + 0.1, "train/acc": 1.0 - math.exp(-3.0 * x),
            "train/lr": 3e-4 * (1.0 - x), "train/grad_norm": 1.0 + (i % 7) * 0.1}

def timed_loop(call, n, rate=0.0):
    """call(d) for n steps, each timed alone; with rate > 0, paced to rate steps/s (checked
    every 100 steps, sleeping outside the timer)."""
    pc = time.perf_counter_ns
    lat = array("q", bytes(8 * n))
    t_start = time.perf_counter()
    for i in range(n):
        d = make_step(i, n)
        t0 = pc()
        call(d)
        lat[i] = pc() - t0
        if rate and i % 100 == 99:
            due = t_start + (i + 1) / rate
            while time.perf_counter() < due:
                time.sleep(0.0005)
    return lat, time.perf_counter() - t_start

def summarize(lat):
    s = sorted(lat)
    n = len(s)
    return {"n": n, "p50_ns": s[n // 2], "p99_ns": s[min(n - 1, -(-99 * n // 100) - 1)], "max_ns": s[-1],
            "mean_ns": sum(s) / n}
'''

PEER_SCRIPT = LOOP_SRC + r'''
import json, os, resource, sys

def setup(tool, work):
    """(version, call, finish) for one tool; raises ImportError when it is not installed."""
    if tool == "swanlab":
        import swanlab
        run = swanlab.init(project="sdk-bench", experiment_name="log", mode="offline", logdir=work)
        return swanlab.__version__, run.log, swanlab.finish
    if tool == "wandb":
        import wandb
        run = wandb.init(project="sdk-bench", mode="offline", dir=work)
        return wandb.__version__, run.log, run.finish
    if tool == "tensorboardX":
        import tensorboardX
        writer = tensorboardX.SummaryWriter(logdir=work)
        add, step = writer.add_scalar, [0]
        def call(d):
            i = step[0]
            for k, v in d.items():
                add(k, v, i)
            step[0] = i + 1
        return tensorboardX.__version__, call, writer.close
    if tool == "tensorboard":
        # What torch.utils.tensorboard.SummaryWriter.add_scalar does, minus torch: a Summary
        # proto per scalar in an Event, handed to tensorboard's EventFileWriter (its queue of
        # 10 and writer thread, as torch's SummaryWriter uses them).
        import tensorboard
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
        writer = EventFileWriter(work)
        add_event, step = writer.add_event, [0]
        def call(d):
            i = step[0]
            for k, v in d.items():
                add_event(Event(summary=Summary(value=[Summary.Value(tag=k, simple_value=float(v))]),
                                step=i, wall_time=time.time()))
            step[0] = i + 1
        return tensorboard.__version__, call, writer.close
    if tool == "mlflow":
        import mlflow
        mlflow.set_tracking_uri("file://" + os.path.join(work, "mlruns"))
        mlflow.start_run()
        log_metrics, step = mlflow.log_metrics, [0]
        def call(d):
            log_metrics(d, step=step[0])
            step[0] += 1
        return mlflow.__version__, call, mlflow.end_run
    raise SystemExit("unknown tool %r" % tool)

def main():
    tool, steps, work = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    out = {"tool": tool}
    t = time.perf_counter()
    try:
        version, call, finish = setup(tool, work)
    except ImportError as exc:
        sys.stdout.write("SDKBENCH-MISSING " + json.dumps({"tool": tool, "error": str(exc)}) + "\n")
        return
    out["version"] = version
    out["init_s"] = time.perf_counter() - t  # import + run creation
    lat, out["loop_s"] = timed_loop(call, steps)
    t = time.perf_counter()
    finish()
    out["finish_s"] = time.perf_counter() - t
    out.update(summarize(lat))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out["cpu_s"] = ru.ru_utime + ru.ru_stime
    out["max_rss_mb"] = ru.ru_maxrss / 1024
    sys.stdout.write("SDKBENCH-RESULT " + json.dumps(out) + "\n")
    sys.stdout.flush()

main()
'''

# Our SDK in a child process (PYTHONPATH=sdk, GPUPLANE_RUNTIME_DIR set): log as fast as it can.
INGEST_CHILD = LOOP_SRC + r'''
import json, os, sys
import gpuplane
go, seconds, index, rate = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
run = gpuplane.init(project="sdk-bench", name="ingest-%d" % index)
print(json.dumps({"run_id": run.id}), flush=True)
steps = [make_step(i, 1000) for i in range(1000)]
while not os.path.exists(go):
    time.sleep(0.0005)
log = run.log
t_first = time.time()
end = t_first + seconds
n = 0
while True:
    for d in steps:
        log(d)
    n += 1000
    now = time.time()
    if now >= end:
        break
    if rate > 0:  # paced: the next 1000 steps are due at t_first + n / rate
        time.sleep(max(0.0, t_first + n / rate - now))
t_last = time.time()
at_last = run.stats()
run.finish(timeout=300)
t_fin = time.time()
cpu = os.times()
print(json.dumps({"t_first": t_first, "t_last": t_last, "t_fin": t_fin, "steps": n, "stats": run.stats(),
                  "at_last": at_last, "cpu_s": cpu.user + cpu.system}), flush=True)
'''

# One point every interval, its value the wall clock at log().
LATENCY_CHILD = r'''
import json, os, sys, time
import gpuplane
go, points, interval = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
run = gpuplane.init(project="sdk-bench", name="latency")
print(json.dumps({"run_id": run.id}), flush=True)
while not os.path.exists(go):
    time.sleep(0.0005)
t0 = time.perf_counter()
for i in range(points):
    run.log({"lat/t": time.time()}, step=i)
    due = t0 + (i + 1) * interval
    while time.perf_counter() < due:
        time.sleep(max(0.0, min(0.002, due - time.perf_counter())))
run.finish(timeout=60)
print(json.dumps({"stats": run.stats()}), flush=True)
'''


# --------------------------------------------------------------------------------------------
# Small helpers


def us(ns: float | None, digits: int = 2) -> str:
    return "n/a" if ns is None else f"{ns / 1000:.{digits}f} us"


def lat_text(s: dict[str, Any] | None) -> str:
    if not s:
        return "n/a"
    return f"p50 {us(s['p50_ns'])}, p99 {us(s['p99_ns'])}, mean {us(s['mean_ns'])}, max {us(s['max_ns'], 0)}"


def fmt_s(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f} s"


def fmt_ms(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value * 1000:.{digits}f} ms"


def verdict(ok: bool | None) -> str:
    return "info" if ok is None else ("PASS" if ok else "FAIL")


def loop_helpers() -> dict[str, Any]:
    ns: dict[str, Any] = {}
    exec(compile(LOOP_SRC, "<sdk_bench loop>", "exec"), ns)
    return ns


def tree_cpu_s(pid: int) -> float:
    """utime+stime of a process and its children (the daemon and its launcher helpers)."""
    try:
        proc = psutil.Process(pid)
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def sdk_env(d: Daemon) -> dict[str, str]:
    """An environment for an SDK child: imports the SDK from sdk/, finds only our daemon (and
    would spool into its home)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANE_")}
    env.pop("XDG_RUNTIME_DIR", None)
    env["PYTHONPATH"] = str(SDK_DIR)
    env["GPUPLANE_RUNTIME_DIR"] = str(d.runtime_dir)
    env["GPUPLANE_HOME"] = str(d.home)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Children:
    """Child processes, each in its own session (a Ctrl-C reaches only the bench), killed
    with their whole process group on the way out (wandb's helpers included)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def spawn(self, argv: list[str], env: dict[str, str], cwd: Path, **kw: Any) -> subprocess.Popen[str]:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, text=True, start_new_session=True,
                                stdin=subprocess.DEVNULL, **kw)
        self.procs.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


class Api:
    """A kept-alive connection to the daemon's Unix socket: GET -> (status, JSON, seconds)."""

    def __init__(self, socket_path: str) -> None:
        from gpuplanectl.client import UnixHTTPConnection

        self._factory = lambda: UnixHTTPConnection(socket_path, 60.0)
        self.conn = self._factory()

    def get(self, path: str) -> tuple[int, Any]:
        status, raw = self.get_raw(path)
        return status, json.loads(raw) if raw else None

    def get_raw(self, path: str) -> tuple[int, bytes]:
        for attempt in (0, 1):
            try:
                self.conn.request("GET", path)
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = self._factory()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


def metrics_path(run_id: str, names: tuple[str, ...] | list[str], **params: Any) -> str:
    query = "&".join([f"names={quote(','.join(names), safe=',/')}"] + [f"{k}={v}" for k, v in params.items()])
    return f"/api/v1/runs/{run_id}/metrics?{query}"


def stored_counts(api: Api, run_id: str, names: tuple[str, ...]) -> dict[str, int]:
    """Points stored per name (one bucket over the whole run: its count)."""
    status, body = api.get(metrics_path(run_id, names, x="step", points=1))
    if status != 200:
        raise RuntimeError(f"GET metrics of {run_id}: {status} {body}")
    return {name: sum(c or 0 for c in body["series"].get(name, {}).get("count", [])) for name in names}


def wait_stored(api: Api, run_id: str, names: tuple[str, ...], expected: int,
                timeout: float = STORED_TIMEOUT) -> tuple[float | None, dict[str, int]]:
    """Poll until the names hold ``expected`` points in all; (seconds it took or None, counts)."""
    t0 = time.perf_counter()
    while True:
        counts = stored_counts(api, run_id, names)
        if sum(counts.values()) >= expected:
            return time.perf_counter() - t0, counts
        if time.perf_counter() - t0 > timeout:
            return None, counts
        time.sleep(STORED_POLL)


# --------------------------------------------------------------------------------------------
# 1 + 3. Our SDK in this process


def sdk_run(runtime_dir: Path, home: Path, steps: int, rate: float, label: str, api: Api | None) -> dict[str, Any]:
    """One run of ``steps`` log() calls in this process; with ``api``, how long after finish()
    the daemon shows them. ``home`` is GPUPLANE_HOME (where an SDK with a spool keeps it)."""
    import gpuplane
    from gpuplane import Run
    from gpuplane._run import MAX_QUEUE

    h = loop_helpers()
    run = Run(name=label, project="sdk-bench",
              env={"GPUPLANE_RUNTIME_DIR": str(runtime_dir), "GPUPLANE_HOME": str(home)})
    out: dict[str, Any] = {"label": label, "version": gpuplane.__version__, "steps": steps, "rate": rate,
                           "run_id": run.id,
                           "session_open_at_start": run.session_id is not None}
    lat, out["loop_s"] = h["timed_loop"](run.log, steps, rate)
    out["after_loop"] = run.stats()
    t = time.perf_counter()
    run.finish()
    out["finish_s"] = time.perf_counter() - t
    out.update(h["summarize"](lat))
    st = run.stats()
    out["stats"] = st
    out["logged"] = st["logged"]
    out["dropped"] = st["dropped"]
    out["queue_max"] = MAX_QUEUE
    out["run_id"] = run.id
    if api is not None and run.id:
        # Everything delivered (dropped-points reports included), then the 4 names in full.
        delivered_s, counts = wait_stored(api, run.id, NAMES + (DROPPED_METRIC,), st["sent_points"])
        out["delivered_visible_s"] = delivered_s
        stored = sum(counts[n] for n in NAMES)
        out["stored"] = stored
        out["expected"] = len(NAMES) * steps
        out["all_stored_s"] = delivered_s if stored >= out["expected"] else None
        out["total_to_durable_s"] = (out["loop_s"] + out["finish_s"] + delivered_s
                                     if out["all_stored_s"] is not None else None)
    return out


def bench_bare(steps: int) -> dict[str, Any]:
    h = loop_helpers()

    def noop(d: Any) -> None:
        pass

    lat, loop_s = h["timed_loop"](noop, steps)
    return {"loop_s": loop_s, **h["summarize"](lat)}


def bench_loop(d: Daemon | None, root: Path, args: argparse.Namespace, res: dict[str, Any]) -> None:
    out = res.setdefault("loop", {})
    progress(f"log() timing floor: a bare Python call, {args.steps:,} steps")
    out["bare"] = bench_bare(args.steps)
    progress(f"our SDK with no daemon: {args.steps:,} steps")
    empty = root / "no-daemon-run"
    empty.mkdir(mode=0o700)
    out["no_daemon"] = sdk_run(empty, root / "no-daemon-home", args.steps, 0.0, "no-daemon", None)
    if d is None:
        return
    api = Api(d.socket_path)
    try:
        progress(f"our SDK against the daemon, unpaced: {args.steps:,} steps")
        out["daemon"] = sdk_run(d.runtime_dir, d.home, args.steps, 0.0, "unpaced", api)
        progress(f"our SDK against the daemon, paced at {args.paced_rate:,.0f} steps/s: {args.paced_steps:,} steps")
        out["paced"] = sdk_run(d.runtime_dir, d.home, args.paced_steps, args.paced_rate, "paced", api)
    finally:
        api.close()


# --------------------------------------------------------------------------------------------
# 2. Peers


def peers_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def install_peers(venv: Path, root: Path) -> str | None:
    """Create the peers' venv (if missing) and pip install the pinned peers; an error text or None."""
    log = root / "install-peers.log"
    try:
        with open(log, "w") as f:
            if not peers_python(venv).exists():
                progress(f"creating the peers' venv {venv}")
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, stdout=f, stderr=subprocess.STDOUT)
            progress(f"pip install -r {REQUIREMENTS.name} into {venv} (a minute or two)")
            subprocess.run([str(peers_python(venv)), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)],
                           check=True, stdout=f, stderr=subprocess.STDOUT, timeout=1800)
    except (OSError, subprocess.SubprocessError) as exc:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
        return f"installing the peers failed ({exc}): " + " | ".join(tail)
    return None


def peer_env(home: Path, work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUPLANE_", "WANDB_", "SWANLAB_", "MLFLOW_", "VIRTUAL_ENV", "PYTHON"))}
    env.update({
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "TMPDIR": str(work),
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_CONSOLE": "off",
        "WANDB_DIR": str(work),
        "WANDB_CONFIG_DIR": str(home / ".config" / "wandb"),
        "WANDB_CACHE_DIR": str(home / ".cache" / "wandb"),
        "WANDB_DATA_DIR": str(home / ".local" / "share" / "wandb"),
        "SWANLAB_MODE": "offline",
        "SWANLAB_LOG_DIR": str(work),
        "SWANLAB_SAVE_DIR": str(home / ".swanlab"),
        "MLFLOW_ALLOW_FILE_STORE": "true",
        "MLFLOW_TRACKING_URI": "file://" + str(work / "mlruns"),
        # Strictly offline: anything that tries HTTP(S) anyway meets a closed local port.
        "HTTP_PROXY": CLOSED_PROXY, "HTTPS_PROXY": CLOSED_PROXY,
        "http_proxy": CLOSED_PROXY, "https_proxy": CLOSED_PROXY,
        "NO_PROXY": "", "no_proxy": "",
    })
    return env


def bench_peers(children: Children, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    venv = Path(args.peers_venv)
    out: dict[str, Any] = {"venv": str(venv), "steps": args.peer_steps, "tools": {}}
    python = peers_python(venv)
    if not python.exists():
        out["missing_venv"] = (f"no venv at {venv} (run with --install-peers, or point --peers-venv at one "
                               f"holding bench/requirements-peers.txt)")
        for key in args.peers:
            out["tools"][key] = {"status": "not installed", "reason": out["missing_venv"]}
        return out
    script = root / "peer_loop.py"
    script.write_text(PEER_SCRIPT)
    base = root / "peers"
    for key in args.peers:
        work = base / key
        home = base / f"{key}-home"
        work.mkdir(parents=True)
        home.mkdir(parents=True)
        progress(f"peer {key}: {args.peer_steps:,} steps in a child of {venv}")
        wall0 = time.perf_counter()
        proc = children.spawn([str(python), str(script), key, str(args.peer_steps), str(work)],
                              env=peer_env(home, work), cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            stdout, stderr = proc.communicate(timeout=args.peer_steps * 0.05 + 300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            out["tools"][key] = {"status": "error", "reason": "timed out"}
            continue
        wall = time.perf_counter() - wall0
        result = None
        for line in stdout.splitlines():
            if line.startswith("SDKBENCH-RESULT "):
                result = {"status": "ok", **json.loads(line.split(" ", 1)[1])}
            elif line.startswith("SDKBENCH-MISSING "):
                result = {"status": "not installed", "reason": json.loads(line.split(" ", 1)[1])["error"]}
        if result is None:
            tail = " | ".join((stderr or stdout).strip().splitlines()[-4:])
            result = {"status": "error", "reason": f"exit {proc.returncode}: {tail[-400:]}"}
        result["process_wall_s"] = wall
        out["tools"][key] = result
        if result["status"] == "ok":
            progress(f"  {key} {result['version']}: p50 {us(result['p50_ns'])}, p99 {us(result['p99_ns'])}")
        else:
            progress(f"  {key}: {result['status']}: {result['reason'][:200]}")
    return out


# --------------------------------------------------------------------------------------------
# 4. Sustained ingest from several SDK processes


def read_json_line(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while True:
        line = proc.stdout.readline()
        if line.strip().startswith("{"):
            return json.loads(line)
        if not line and proc.poll() is not None:
            raise RuntimeError(f"SDK child exited with {proc.returncode} without its line")
        if time.monotonic() > deadline:
            raise TimeoutError("SDK child did not report in time")


def bench_ingest(d: Daemon, children: Children, root: Path, args: argparse.Namespace,
                 rate: float = 0.0) -> dict[str, Any]:
    """``rate``: steps/s each process logs (4 scalars a step); 0: as fast as they can."""
    work = root / ("ingest-paced" if rate else "ingest")
    work.mkdir()
    go = work / "go"
    env = sdk_env(d)
    procs = [children.spawn([args.python, "-c", INGEST_CHILD, str(go), str(args.ingest_seconds), str(i), str(rate)],
                            env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(args.ingest_procs)]
    run_ids = [read_json_line(p, 60)["run_id"] for p in procs]
    time.sleep(1.0)  # let every session open and post its environment before the clock starts
    pace = f"{rate:,.0f} steps/s each ({rate * len(NAMES) * args.ingest_procs:,.0f} points/s offered)" if rate \
        else "as fast as they can"
    progress(f"ingest: {args.ingest_procs} SDK processes logging {pace} for {args.ingest_seconds:g} s")
    cpu0, busy0, wall0 = tree_cpu_s(d.proc.pid), host_busy_s(), time.time()
    go.write_text("go")
    reports = [read_json_line(p, args.ingest_seconds + 600) for p in procs]
    t_acked = max(r["t_fin"] for r in reports)
    cpu_acked = tree_cpu_s(d.proc.pid)
    for p in procs:
        p.wait(timeout=30)
    api = Api(d.socket_path)
    try:
        counts = []
        for run_id, r in zip(run_ids, reports):
            _s, c = wait_stored(api, run_id, NAMES + (DROPPED_METRIC,), r["stats"]["sent_points"], timeout=60)
            counts.append(c)
        t_verified = time.time()
    finally:
        api.close()
    busy1 = host_busy_s()
    t_first = min(r["t_first"] for r in reports)
    stored = sum(sum(c[n] for n in NAMES) for c in counts)
    delivered = sum(sum(c.values()) for c in counts)
    logged = sum(r["stats"]["logged"] for r in reports)
    dropped = sum(r["stats"]["dropped"] for r in reports)
    wall = t_acked - t_first
    t_last = max(r["t_last"] for r in reports)
    sent_while_logging = sum(r["at_last"]["sent_points"] for r in reports)
    daemon_cpu = cpu_acked - cpu0
    clients_cpu = sum(r["cpu_s"] for r in reports)
    return {
        "procs": args.ingest_procs, "seconds": args.ingest_seconds, "run_ids": run_ids, "rate": rate,
        "offered_pps": rate * len(NAMES) * args.ingest_procs if rate else None,
        "logged": logged, "dropped": dropped, "stored": stored, "delivered": delivered,
        "sent": sum(r["stats"]["sent_points"] for r in reports),
        "wall_s": wall, "stored_pps": stored / wall if wall > 0 else None,
        "logged_pps": logged / (t_last - t_first),
        "logging_s": t_last - t_first,
        "delivered_while_logging_pps": sent_while_logging / (t_last - t_first),
        "delivered_while_finishing_pps": ((sum(r["stats"]["sent_points"] for r in reports) - sent_while_logging)
                                          / max(1e-9, t_acked - t_last)),
        "finish_s": [r["t_fin"] - r["t_last"] for r in reports],
        "verify_after_acked_s": t_verified - t_acked,
        "daemon_cpu_s": daemon_cpu, "daemon_cpu_pct": 100 * daemon_cpu / wall if wall > 0 else None,
        "daemon_cpu_us_per_point": 1e6 * daemon_cpu / stored if stored else None,
        "clients_cpu_s": clients_cpu,
        "host_busy_s": busy1 - busy0, "host_wall_s": time.time() - wall0,
        "batches": sum(r["stats"]["batches"] for r in reports),
    }


# --------------------------------------------------------------------------------------------
# 5. Log -> queryable


def bench_latency(d: Daemon, children: Children, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    work = root / "latency"
    work.mkdir()
    go = work / "go"
    n = args.latency_points
    proc = children.spawn([args.python, "-c", LATENCY_CHILD, str(go), str(n), str(LATENCY_INTERVAL)],
                          env=sdk_env(d), cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    run_id = read_json_line(proc, 60)["run_id"]
    time.sleep(0.5)
    api = Api(d.socket_path)
    progress(f"log -> queryable: {n} points, one per {LATENCY_INTERVAL * 1000:g} ms, polled every "
             f"{QUERY_POLL * 1000:g} ms")
    latencies: list[float] = []
    polls: list[float] = []
    next_step = 0
    go.write_text("go")
    deadline = time.monotonic() + n * LATENCY_INTERVAL + 60
    try:
        while next_step < n and time.monotonic() < deadline:
            t0 = time.perf_counter()
            status, body = api.get(metrics_path(run_id, ["lat/t"], x="step", start=next_step,
                                                end=next_step + 9999, points=10000))
            now = time.time()
            polls.append(time.perf_counter() - t0)
            if status == 200 and body["x"]:
                values = body["series"]["lat/t"]["last"]
                for x, v in zip(body["x"], values):
                    if x >= next_step and v is not None:
                        latencies.append(now - v)
                next_step = max(body["x"]) + 1
            time.sleep(QUERY_POLL)
    finally:
        api.close()
    child = read_json_line(proc, 60)
    proc.wait(timeout=30)
    s = stats(latencies)
    return {"points": n, "seen": len(latencies), "latency_s": s, "poll_s": stats(polls),
            "dropped": child["stats"]["dropped"]}


# --------------------------------------------------------------------------------------------
# 6. Read a 100k-point series back


def fill_series(d: Daemon, n: int) -> str:
    """A run holding ``n`` points of train/loss, posted straight to the sessions API in SDK-sized batches."""
    h = loop_helpers()
    client = d.client
    opened = client.post("/api/v1/sessions", {"name": "read-fill", "project": "sdk-bench"})
    sid, run_id = opened["session_id"], opened["run_id"]
    ts0 = int(time.time() * 1000) - n * 10
    for seq, lo in enumerate(range(0, n, 10_000)):
        steps = list(range(lo, min(n, lo + 10_000)))
        body = {"seq": seq, "metrics": {"train/loss": {
            "step": steps, "ts": [ts0 + 10 * i for i in steps], "value": [h["make_step"](i, n)["train/loss"] for i in steps]}}}
        client.post(f"/api/v1/sessions/{sid}/batches", body)
    client.post(f"/api/v1/sessions/{sid}/finish", {"status": "SUCCEEDED"})
    return run_id


def timed(fn: Any, reps: int) -> tuple[dict[str, Any], Any]:
    times, value = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return stats(times), value


def read_series(api: Api, run_id: str, n: int, encoding: str, reps: int) -> dict[str, Any]:
    """``GET /runs/{id}/series`` of all ``n`` points in one page: seconds to the last byte
    received (the daemon's work and the transfer) and to the columns decoded here (JSON
    numbers to lists; base64 to arrays)."""
    path = f"/api/v1/runs/{run_id}/series?name={quote('train/loss', safe='')}&limit={n}&encoding={encoding}"
    received, decoded, size = [], [], 0
    for _ in range(reps):
        t0 = time.perf_counter()
        status, raw = api.get_raw(path)
        t1 = time.perf_counter()
        if status != 200:
            raise RuntimeError(f"series ({encoding}): HTTP {status}: {raw[:200]!r}")
        body = json.loads(raw)
        if encoding == "base64":
            for column, code in (("step", "q"), ("ts", "q"), ("value", "d")):
                values = array(code)
                values.frombytes(base64.b64decode(body[column]))
                body[column] = values
        t2 = time.perf_counter()
        if body["count"] != n or len(body["value"]) != n or body["next_cursor"] is not None:
            raise RuntimeError(f"series ({encoding}): {body['count']} points, next_cursor {body['next_cursor']!r}")
        received.append(t1 - t0)
        decoded.append(t2 - t0)
        size = len(raw)
    return {"received_s": stats(received), "decoded_s": stats(decoded), "bytes": size}


def bench_read(d: Daemon, run_id: str | None, n: int, reps: int) -> dict[str, Any]:
    from gpuplaned import tsdb
    from gpuplaned.store.database import open_reader
    from gpuplaned.tsdb.query import MAX_POINTS

    out: dict[str, Any] = {"n": n, "max_points": MAX_POINTS, "reps": reps}
    api = Api(d.socket_path)
    try:
        if run_id is None or stored_counts(api, run_id, ("train/loss",))["train/loss"] != n:
            progress(f"read: filling a run with {n:,} points of train/loss through the sessions API")
            run_id = fill_series(d, n)
            out["source"] = "sessions API, 10,000-point batches"
        else:
            out["source"] = "the paced SDK run"
        out["run_id"] = run_id
        progress(f"read: {n:,}-point series, {reps} reps per way")
        for encoding in ("base64", "json"):
            out[f"api_series_{encoding}"] = read_series(api, run_id, n, encoding, reps)
        status, body = api.get(metrics_path(run_id, ["train/loss"], x="step", points=n))
        out["one_request_full"] = {"status": status,
                                   "message": (body or {}).get("error", {}).get("message") if status != 200 else None,
                                   "points": len(body["x"]) if status == 200 else None}

        def paged() -> int:
            got = 0
            for lo in range(0, n, MAX_POINTS):
                st, b = api.get(metrics_path(run_id, ["train/loss"], x="step", start=lo,
                                             end=min(n, lo + MAX_POINTS) - 1, points=MAX_POINTS))
                if st != 200 or b["width"] != 1:
                    raise RuntimeError(f"page at step {lo}: {st} width {b.get('width') if b else None}")
                got += sum(1 for v in b["series"]["train/loss"]["count"] if v)
            return got

        out["api_paged_s"], out["api_paged_points"] = timed(paged, min(reps, 3))  # the way before the export route
        out["api_pages"] = -(-n // MAX_POINTS)

        def downsampled() -> int:
            st, b = api.get(metrics_path(run_id, ["train/loss"], x="step", points=MAX_POINTS))
            return len(b["x"]) if st == 200 else -1

        out["api_downsampled_s"], out["api_downsampled_buckets"] = timed(downsampled, reps)
    finally:
        api.close()
    conn = open_reader(d.home / "gpuplane.db")
    try:
        out["tsdb_read_points_s"], pts = timed(lambda: tsdb.read_points(conn, "run", run_id, "train/loss"), reps)
        out["tsdb_read_points_n"] = len(pts["value"])

        def tsdb_paged() -> int:
            return sum(len(tsdb.query_series(conn, "run", run_id, ["train/loss"], lo, min(n, lo + MAX_POINTS) - 1,
                                             MAX_POINTS, "step")["x"]) for lo in range(0, n, MAX_POINTS))

        out["tsdb_paged_s"], out["tsdb_paged_points"] = timed(tsdb_paged, reps)
        out["chunks"] = conn.execute(
            "SELECT count(*) FROM ts_chunks c JOIN ts_series s ON s.id = c.series_id"
            " WHERE s.owner = ? AND s.name = 'train/loss'", (run_id,)).fetchone()[0]
    except Exception as exc:  # noqa: BLE001 - the schema may move; the timings above still count
        out.setdefault("notes", []).append(f"tsdb direct: {type(exc).__name__}: {exc}")
    finally:
        conn.close()
    return out


# --------------------------------------------------------------------------------------------
# Report


def sdk_rows(rows: list[tuple[str, str, str, str]], r: dict[str, Any], label: str, judge: bool) -> None:
    rows.append((f"{label}: log() p50", us(r["p50_ns"]), f"<= {TARGET_P50_US:g} us",
                 verdict(r["p50_ns"] / 1000 <= TARGET_P50_US if judge else None)))
    rows.append((f"{label}: log() p99", us(r["p99_ns"]), f"<= {TARGET_P99_US:g} us",
                 verdict(r["p99_ns"] / 1000 <= TARGET_P99_US if judge else None)))
    rows.append(("  mean, max", f"{us(r['mean_ns'])}, {us(r['max_ns'], 0)}", "", "info"))
    total = len(NAMES) * r["steps"]
    dropped_text = f"{r['dropped']:,} of {total:,} points"
    if r["dropped"]:
        dropped_text += (f": the loop made {total / r['loop_s']:,.0f} points/s, the sender delivered "
                         f"{r['after_loop']['sent_points'] / r['loop_s']:,.0f}/s meanwhile, the queue holds "
                         f"{r['queue_max']:,}")
    rows.append(("  dropped by the SDK's queue", dropped_text, "0" if judge else "",
                 verdict(r["dropped"] == 0) if judge else "info"))


def table_rows(res: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    loop = res.get("loop") or {}
    if "bare" in loop:
        b = loop["bare"]
        rows.append((f"bare Python call, same loop ({b['n']:,} steps)", lat_text(b),
                     f"anchor {BARE_ANCHOR_US} us", "info"))
    if "no_daemon" in loop:
        r = loop["no_daemon"]
        rows.append((f"gpuplane, no daemon ({r['steps']:,} steps)", lat_text(r), "", "info"))
        spooled = f", {r['stats']['spooled']:,} spooled" if "spooled" in r["stats"] else ""
        rows.append(("  dropped (oldest first) with nobody to deliver to",
                     f"{r['dropped']:,} of {len(NAMES) * r['steps']:,}{spooled}; finish() {fmt_ms(r['finish_s'])}",
                     "", "info"))
    for key, label in (("daemon", "gpuplane + daemon, unpaced"), ("paced", "gpuplane + daemon, paced")):
        r = loop.get(key)
        if not r:
            continue
        if key == "paced":
            label += f" {r['rate']:,.0f} steps/s"
        sdk_rows(rows, r, f"{label} ({r['steps']:,} steps)", True)
        rows.append((f"  {r['steps']:,}-step run: loop time, finish() duration",
                     f"{fmt_s(r['loop_s'], 3)}, {fmt_s(r['finish_s'], 3)}", "", "info"))
        expected = r.get("expected", len(NAMES) * r["steps"])
        if r.get("all_stored_s") is not None:
            rows.append((f"  finish() return -> all {expected:,} points queryable", fmt_s(r["all_stored_s"], 3),
                         f"<= {TARGET_STORED_S:g} s", verdict(r["all_stored_s"] <= TARGET_STORED_S)))
            rows.append(("  loop start -> all stored (total to durable)", fmt_s(r["total_to_durable_s"]),
                         "SwanLab 30.2 s", "info"))
        elif "stored" in r:
            why = (f"never: {r['stored']:,} of {expected:,} stored, the SDK dropped {r['dropped']:,}"
                   if r["dropped"] else f"not within {STORED_TIMEOUT:g} s: {r['stored']:,} of {expected:,}")
            rows.append((f"  finish() return -> all {expected:,} points queryable", why,
                         f"<= {TARGET_STORED_S:g} s", "FAIL"))
            if r.get("delivered_visible_s") is not None:
                rows.append(("  finish() return -> all it delivered queryable", fmt_s(r["delivered_visible_s"], 3),
                             "", "info"))
    for key in ("ingest_paced", "ingest"):
        ing = res.get(key)
        if ing:
            ingest_rows(rows, ing, res)

    lat = res.get("latency")
    if lat:
        s = lat["latency_s"]
        rows.append((f"log() -> queryable, 1 point per {LATENCY_INTERVAL * 1000:g} ms ({lat['seen']}/{lat['points']})",
                     f"p50 {fmt_ms(s['median'], 0)}, p99 {fmt_ms(s['p99'], 0)}, max {fmt_ms(s['max'], 0)}",
                     f"p99 <= {TARGET_QUERYABLE_P99_S:g} s",
                     verdict(s["n"] > 0 and lat["seen"] == lat["points"] and s["p99"] <= TARGET_QUERYABLE_P99_S)))
        rows.append(("  poll request time", f"p50 {fmt_ms(lat['poll_s']['median'], 2)}, "
                     f"p99 {fmt_ms(lat['poll_s']['p99'], 2)}", "", "info"))
    rd = res.get("read")
    if rd:
        one = rd["one_request_full"]
        rows.append((f"read {rd['n']:,} points: one request, points={rd['n']}",
                     f"HTTP {one['status']}" + (f": {one['message']}" if one["message"] else f", {one['points']} points"),
                     "", "info"))
        for encoding, label in (("base64", "base64 columns"), ("json", "JSON numbers")):
            sr = rd.get(f"api_series_{encoding}")
            if not sr:
                continue
            got, recv = sr["decoded_s"], sr["received_s"]
            # The full-read path for programs is the packed one; JSON numbers (about 0.5 us a
            # float to format and as much to parse) are shown beside it, not judged.
            judged = encoding == "base64"
            rows.append((f"read {rd['n']:,} points in full, API: GET .../series, {label} (p50 of {got['n']})",
                         f"{fmt_ms(got['median'])} decoded (min {fmt_ms(got['min'])}); last byte "
                         f"{fmt_ms(recv['median'])}; {sr['bytes'] / 1e6:.1f} MB",
                         f"<= {TARGET_READ_MS:g} ms" if judged else "",
                         verdict(got["median"] * 1000 <= TARGET_READ_MS) if judged else "info"))
        p = rd["api_paged_s"]
        rows.append((f"  before: the chart route in {rd['api_pages']} pages of {rd['max_points']:,} (p50 of {p['n']})",
                     f"{fmt_ms(p['median'])} (min {fmt_ms(p['min'])}; {rd['api_paged_points']:,} points)", "",
                     "info"))
        ds = rd["api_downsampled_s"]
        rows.append((f"  API, one request downsampled to {rd['max_points']:,} buckets",
                     f"{fmt_ms(ds['median'])} ({rd['api_downsampled_buckets']:,} buckets)", "", "info"))
        if "tsdb_read_points_s" in rd:
            t = rd["tsdb_read_points_s"]
            rows.append(("  tsdb.read_points directly (read-only connection)",
                         f"{fmt_ms(t['median'])} ({rd['tsdb_read_points_n']:,} points)",
                         f"<= {TARGET_READ_MS:g} ms", verdict(t["median"] * 1000 <= TARGET_READ_MS)))
        if "tsdb_paged_s" in rd:
            t = rd["tsdb_paged_s"]
            rows.append((f"  tsdb.query_series directly, the API's {rd['api_pages']} pages",
                         f"{fmt_ms(t['median'])} ({rd['tsdb_paged_points']:,} points; {rd.get('chunks', '?')} chunks)",
                         "", "info"))
        rows.append(("  data", rd["source"], f"Aim {READ_ANCHOR_S} s", "info"))
    return rows


def ingest_rows(rows: list[tuple[str, str, str, str]], ing: dict[str, Any], res: dict[str, Any]) -> None:
    """Sustained ingest is judged with paced processes offering a steady load above the
    target; flat out, four loops on a small machine take the CPUs from the daemon, which
    then measures the machine's split more than the daemon (shown, not judged)."""
    if ing["rate"]:
        rows.append((f"ingest, {ing['procs']} SDK processes x {ing['seconds']:g} s paced at "
                     f"{ing['offered_pps']:,.0f} points/s: stored points/s",
                     f"{ing['stored_pps']:,.0f}/s ({ing['stored']:,} points in {ing['wall_s']:.2f} s, "
                     f"{ing['dropped']:,} dropped)",
                     f">= {TARGET_INGEST_PPS:,}/s, 0 dropped",
                     verdict(ing["stored_pps"] >= TARGET_INGEST_PPS and not ing["dropped"])))
    else:
        rows.append((f"ingest, {ing['procs']} SDK processes x {ing['seconds']:g} s flat out: stored points/s",
                     f"{ing['stored_pps']:,.0f}/s ({ing['stored']:,} points in {ing['wall_s']:.2f} s)",
                     "machine-bound", "info"))
    rows.append(("  delivered while they log / while finish() drains their queues",
                 f"{ing['delivered_while_logging_pps']:,.0f}/s over {ing['logging_s']:.1f} s / "
                 f"{ing['delivered_while_finishing_pps']:,.0f}/s over {ing['wall_s'] - ing['logging_s']:.1f} s",
                 "", "info"))
    rows.append(("  logged by the processes, dropped by their queues",
                 f"{ing['logged']:,} ({ing['logged_pps']:,.0f}/s), {ing['dropped']:,} dropped", "", "info"))
    rows.append(("  daemon CPU, first log -> all acked",
                 f"{ing['daemon_cpu_s']:.2f} s ({ing['daemon_cpu_pct']:.0f} % of one core), "
                 f"{ing['daemon_cpu_us_per_point']:.2f} us/point = "
                 f"{1e6 / ing['daemon_cpu_us_per_point']:,.0f} points/s per daemon core"
                 if ing["daemon_cpu_us_per_point"] else "n/a", "", "info"))
    rows.append(("  SDK processes' CPU; whole machine busy",
                 f"{ing['clients_cpu_s']:.1f} s; {ing['host_busy_s']:.1f} s of "
                 f"{ing['host_wall_s'] * (res['meta']['cpus'] or 1):.1f} CPU-s", "", "info"))
    rows.append(("  finish() per process (draining its queue)",
                 ", ".join(f"{s:.2f}" for s in ing["finish_s"]) + " s", "", "info"))


def peer_table(res: dict[str, Any]) -> list[str]:
    loop = res.get("loop") or {}
    peers = res.get("peers")
    ours = loop.get("daemon")
    lines = ["In-loop cost of one step's log of 4 scalars, side by side (this machine, this run):"]
    header = ("tool", "version", "steps", "p50", "p99", "mean", "x ours p50, mean", "init s", "finish s",
              "issue / peers-perf.md median, p99")
    rows: list[tuple[str, ...]] = []
    if "bare" in loop:
        b = loop["bare"]
        rows.append(("bare Python call", "-", f"{b['n']:,}", us(b["p50_ns"]), us(b["p99_ns"]), us(b["mean_ns"]),
                     "", "", "", f"{BARE_ANCHOR_US} us"))
    for key, label in (("daemon", "gpuplane (daemon, unpaced)"), ("paced", "gpuplane (daemon, paced)"),
                       ("no_daemon", "gpuplane (no daemon)")):
        r = loop.get(key)
        if r:
            rows.append((label, r.get("version", ""), f"{r['steps']:,}", us(r["p50_ns"]), us(r["p99_ns"]),
                         us(r["mean_ns"]), "",
                         "", f"{r['finish_s']:.2f}", "target 2 us, 20 us"))
    if peers:
        for key, label, median, p99, _total in PEERS:
            if key not in peers["tools"]:
                continue
            t = peers["tools"][key]
            anchor = f"{median:,} us, {p99:,} us"
            if t["status"] != "ok":
                rows.append((label, t["status"], "", "", "", "", "", "", "", anchor))
                continue
            ratio = (f"{t['p50_ns'] / ours['p50_ns']:,.0f}, {t['mean_ns'] / ours['mean_ns']:,.0f}"
                     if ours and ours["p50_ns"] and ours["mean_ns"] else "")
            rows.append((label, t["version"], f"{t['n']:,}", us(t["p50_ns"], 1), us(t["p99_ns"], 1),
                         us(t["mean_ns"], 1), ratio, f"{t['init_s']:.2f}", f"{t['finish_s']:.2f}", anchor))
    lines += table_lines(rows, header, indent="  ")
    if peers:
        if peers.get("missing_venv"):
            lines.append(f"  peers: {peers['missing_venv']}")
        for key, t in peers["tools"].items():
            if t["status"] != "ok" and not peers.get("missing_venv"):
                lines.append(f"  {key}: {t['status']}: {t.get('reason', '')[:300]}")
        lines.append(f"  peers ran {peers['steps']:,} steps each in a child of {peers['venv']} (peers-perf.md used "
                     "100,000; --peer-steps 100000 to match); init = import + run creation.")
    return lines


def render(res: dict[str, Any]) -> str:
    rows = table_rows(res)
    meta = res["meta"]
    out = [*heading("gpuplane SDK benchmark", meta), f"source measured: {meta.get('source')}", ""]
    if rows:
        out += [*table_lines(rows), ""]
    if res.get("loop") or res.get("peers"):
        out.extend(peer_table(res))
    out.append("")
    out.append("On 2 CPUs every figure moves with the machine's load (see the load averages above): the "
               "daemon, the SDK's sender thread and the peers' writer threads share the CPUs with the loop.")
    out.extend(error_lines(res))
    return "\n".join(out)


# --------------------------------------------------------------------------------------------


SECTIONS = ("loop", "peers", "ingest", "latency", "read")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run, under 2 minutes")
    parser.add_argument("--json", action="store_true", help="write the figures as JSON to stdout")
    parser.add_argument("--steps", type=int, default=100_000, help="log() calls per SDK loop (default 100000)")
    parser.add_argument("--paced-rate", type=float, default=20_000, help="steps/s of the paced run (default 20000)")
    parser.add_argument("--paced-steps", type=int, default=100_000, help="steps of the paced run (default 100000)")
    parser.add_argument("--peer-steps", type=int, help="steps per peer (default 20000, quick 2000)")
    parser.add_argument("--peers", help=f"comma-separated subset of {','.join(PEER_KEYS)} (default all)")
    parser.add_argument("--peers-venv", default=DEFAULT_PEERS_VENV, help=f"the peers' venv (default {DEFAULT_PEERS_VENV})")
    parser.add_argument("--install-peers", action="store_true",
                        help="create the peers' venv if missing and pip install bench/requirements-peers.txt")
    parser.add_argument("--ingest-procs", type=int, default=4, help="concurrent SDK processes (default 4)")
    parser.add_argument("--ingest-seconds", type=float, help="how long they log (default 10, quick 4)")
    parser.add_argument("--ingest-rate", type=float, default=35_000,
                        help="steps/s (4 scalars each) per process of the paced ingest run; 0 skips it "
                             "(default 35000: 4 processes offer 560,000 points/s)")
    parser.add_argument("--latency-points", type=int, help="points of the log -> queryable run (default 500, quick 200)")
    parser.add_argument("--read-points", type=int, default=100_000, help="size of the series read back (default 100000)")
    parser.add_argument("--read-reps", type=int, help="reads per way (default 9, quick 3)")
    parser.add_argument("--python", default=sys.executable, help="interpreter for gpuplaned and the SDK children")
    parser.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"),
                        help="passed to gpuplaned (default warning: no per-request lines)")
    parser.add_argument("--skip", action="append", default=[], choices=SECTIONS, help="skip a section (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (daemon log, peers' files)")
    args = parser.parse_args(argv)
    q = args.quick
    args.peer_steps = args.peer_steps if args.peer_steps is not None else (2_000 if q else 20_000)
    args.ingest_seconds = args.ingest_seconds if args.ingest_seconds is not None else (4.0 if q else 10.0)
    args.latency_points = args.latency_points if args.latency_points is not None else (200 if q else 500)
    args.read_reps = args.read_reps if args.read_reps is not None else (3 if q else 9)
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()] if args.peers else list(PEER_KEYS)
    unknown = [p for p in args.peers if p not in PEER_KEYS]
    if unknown:
        parser.error(f"--peers: unknown {', '.join(unknown)} (known: {', '.join(PEER_KEYS)})")
    if min(args.steps, args.paced_steps, args.peer_steps, args.ingest_procs, args.latency_points, args.read_points,
           args.read_reps) < 1 or args.paced_rate <= 0 or args.ingest_seconds <= 0:
        parser.error("counts, rates and durations must be positive")
    return args


def source_state() -> str:
    """The commit measured, and whether the SDK or daemon sources differ from it."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "--",
                                "sdk", "gpuplaned", "actors"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    if not head:
        return "unknown (not a git checkout)"
    return head + (" with uncommitted changes in sdk/, gpuplaned/ or actors/" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_interrupt)
    root = Path(tempfile.mkdtemp(prefix="gpuplane-sdk-bench-"))
    dm = JobDaemons(args.python, root, args.log_level)
    children = Children()
    res: dict[str, Any] = {
        "meta": run_meta(args, peers_venv=args.peers_venv, source=source_state(), targets={
            "log_p50_us": TARGET_P50_US, "log_p99_us": TARGET_P99_US, "stored_after_finish_s": TARGET_STORED_S,
            "ingest_points_per_s": TARGET_INGEST_PPS, "queryable_p99_s": TARGET_QUERYABLE_P99_S,
            "read_100k_ms": TARGET_READ_MS}),
        "errors": [],
    }
    t_start = time.perf_counter()

    def section(name: str, fn: Any, key: str | None = None) -> None:
        """Run section ``name`` unless skipped; its figures go under ``key`` (default: the name)."""
        if name in args.skip:
            return
        try:
            value = fn()
            if value is not None:
                res[key or name] = value
        except Exception as exc:  # noqa: BLE001 - a section that fails is reported; the others still run
            res["errors"].append(f"{key or name}: {type(exc).__name__}: {exc}")

    with guarded_run(res, root, args.keep, t_start, "children and daemons", children.kill_all, dm.stop_all):
        if args.install_peers:
            err = install_peers(Path(args.peers_venv), root)
            if err:
                res["errors"].append(err)
        d = None
        if {"loop", "ingest", "latency", "read"} - set(args.skip):
            try:
                d = dm.start("--gpus", "none", "--no-http")
            except (DaemonFailed, TimeoutError) as exc:
                res["errors"].append(f"daemon: {exc}")
        section("loop", lambda: bench_loop(d, root, args, res))
        if d is not None:
            paced = (res.get("loop") or {}).get("paced") or {}
            read_run = paced.get("run_id") if paced.get("steps") == args.read_points else None
            section("read", lambda: bench_read(d, read_run, args.read_points, args.read_reps))
            section("latency", lambda: bench_latency(d, children, root, args))
            if args.ingest_rate > 0:
                section("ingest", lambda: bench_ingest(d, children, root, args, args.ingest_rate), "ingest_paced")
            section("ingest", lambda: bench_ingest(d, children, root, args))
            res["daemon_stop"] = dm.stop(d.proc)
        section("peers", lambda: bench_peers(children, root, args))
    return report(res, args.json, render)


if __name__ == "__main__":
    sys.exit(main())
