#!/usr/bin/env python3
"""Benchmark the web UI in a real browser: opening a big run, and following a live one.

Figures, measured in headless Debian chromium (``web/scripts/bench-ui.mjs``: playwright-core,
a fresh profile, signed in with a read token) against one gpuplaned (``--gpus none``) started
in a fresh temporary directory, its UI served from ``web/dist``:

1. Open. A run with ``--metrics`` metrics (8) of ``--points`` steps each (1,000,000), logged
   by a script through the SDK (paced on its queue so nothing is dropped; every point counted
   through the API, then compacted by the rollup actor's pass, before measuring: a run is
   compacted a minute after its points arrive, here within seconds, as the daemon runs with
   ``[retention] pass_interval_s = 5``). ``/runs/<id>`` is opened ``--loads`` times (5), each in
   a new tab: the first with an empty browser cache, the rest with the app's files cached.
   Per load: ms from navigation start to the first and the last chart panel drawn with its
   points (the page's ``gpuplane:chart-drawn:<metric>`` performance marks). Target: the first
   chart within 1 s (median of the loads); the last one is reported beside it.
2. Follow. A script logs ``--follow-metrics`` metrics (4) at ``--follow-rate`` steps a second
   (100), paced against its own start. Its run page is opened, and once its charts are drawn
   the Chrome DevTools Protocol's ``Performance.getMetrics`` is read before and after a
   ``--follow-seconds`` window (20 s): the renderer main thread's busy time (TaskDuration) as
   a share of the window, with its script, layout and style parts. Target: busy < 10 %. The
   charts' last step before and after the window shows they kept up.

The Experiments workspace (issue 33 item 6; ``web/e2e/bench-workspace.mjs``):

3. Workspace open. ``--ws-runs`` runs (50) of ``--ws-metrics`` metrics (8) x ``--ws-points``
   steps (100,000) each, logged through the SDK by two scripts at once into project
   ``ws-bench`` (each run with a nested config), stored, counted through
   ``POST /api/v1/workspace/runs`` and compacted; ``/experiments?p=ws-bench`` opened ``--loads``
   times in new tabs (the first with an empty cache). Per load: ms from navigation start to
   the first chart panel drawn with points, and to all drawn (every panel marked and every
   metric's series of every run loaded). Targets: first < 1.5 s, all < 3 s (medians).
4. Sweep brush. A random sweep of ``--ws-trials`` trials (200), each a CPU job whose script logs
   a config and ``val/loss`` through the SDK; ``/experiments?sweep=<id>`` opened and a brush
   dragged ``--ws-drags`` times (60 pointer moves each) along the parallel coordinates' first
   and last axes under a Chrome trace. Per frame (one BeginMainThreadFrame to the next) the
   renderer main thread's busy time (its RunTask slices): p95 over the drags. Target < 16 ms.
   Shown beside it: the same in CPU time (the slices' thread time), which a machine loaded by
   other work does not stretch as it does wall time.
5. Workspace follow. 8 scripts each log a run of 8 metrics at ``--follow-rate`` (100) steps/s
   into project ``ws-live``; ``/experiments?p=ws-live`` opened and, once drawn, CDP
   ``Performance.getMetrics`` read over ``--follow-seconds``: the main thread's busy share
   (TaskDuration / wall time). Target < 15 %. Beside it its CPU share (ThreadTime), which
   other work on the machine does not inflate. Every chart's points must have grown.

``--only workspace`` runs 3-5 alone; ``--skip`` leaves out any section.

Usage::

    .venv/bin/python bench/ui_bench.py             # about 1.5 minutes on 2 CPUs
    .venv/bin/python bench/ui_bench.py --quick     # 200k points, 3 loads, a 10 s window
    .venv/bin/python bench/ui_bench.py --json      # JSON on stdout, progress on stderr

Needs node, ``npm ci`` done in web/, a build in web/dist (``make web``) and chromium
(``/usr/bin/chromium`` or ``GPUPLANE_CHROMIUM``). Always exits 0 unless the arguments are
wrong. The daemon, the logging scripts and the browser are stopped on the way out (Ctrl-C
and SIGTERM included); the temp dir is removed unless ``--keep``. Standard library,
``bench/daemon_bench.py`` and ``bench/jobs_bench.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from daemon_bench import (  # noqa: E402
    DaemonFailed,
    error_lines,
    guarded_run,
    heading,
    progress,
    raise_interrupt,
    report,
    run_meta,
    table_lines,
    verdict,
)
from jobs_bench import JobDaemons, wait_until  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
WEB = REPO / "web"
SDK = REPO / "sdk"
NODE_SCRIPT = WEB / "scripts" / "bench-ui.mjs"
CHROMIUM = os.environ.get("GPUPLANE_CHROMIUM", "/usr/bin/chromium")
TARGET_OPEN_S = 1.0
PASS_INTERVAL_S = 5.0  # the daemon's rollup/compaction pass (default 60 s)
TARGET_BUSY = 0.10
WS_SCRIPT = WEB / "e2e" / "bench-workspace.mjs"
TARGET_WS_FIRST_S = 1.5
TARGET_WS_ALL_S = 3.0
TARGET_BRUSH_FRAME_MS = 16.0
TARGET_WS_BUSY = 0.15
WS_PROJECT, WS_LIVE = "ws-bench", "ws-live"
SECTIONS = ("open", "follow", "ws-open", "ws-brush", "ws-follow")

# Logs STEPS steps of METRICS metrics as fast as delivery allows: log() never blocks, and a
# full queue would drop the oldest points, so the loop waits while too many are queued.
FILL = """
import json, math, sys, time, gpuplane
steps, metrics = int(sys.argv[1]), int(sys.argv[2])
names = [f"m{i}/loss" if i % 2 == 0 else f"m{i}/acc" for i in range(metrics)]
run = gpuplane.init(project="ui-bench", name="bench-1m", config={"steps": steps, "metrics": metrics})
t0 = time.perf_counter()
for step in range(steps):
    x = step / steps
    run.log({n: (1 - x) * (1 + 0.1 * math.sin(step / 50 + i)) if i % 2 == 0 else x for i, n in enumerate(names)},
            step=step)
    if step % 5000 == 0:
        while run.stats()["queued"] > 150_000:
            time.sleep(0.01)
logged = time.perf_counter() - t0
run.finish(timeout=300)
print(json.dumps({"run_id": run.id, "log_s": logged, "total_s": time.perf_counter() - t0,
                  "dropped": run.stats()["dropped"]}), flush=True)
"""

# Logs RATE steps a second of METRICS metrics, paced against its own start, until killed.
FOLLOW = """
import json, math, sys, time, gpuplane
rate, metrics = float(sys.argv[1]), int(sys.argv[2])
names = [f"f{i}/loss" for i in range(metrics)]
run = gpuplane.init(project="ui-bench", name="bench-follow")
print(json.dumps({"run_id": run.id}), flush=True)
t0 = time.perf_counter()
step = 0
while True:
    due = t0 + step / rate
    now = time.perf_counter()
    if due > now:
        time.sleep(due - now)
    run.log({n: 1 / (1 + step / 500) + 0.05 * math.sin(step / 20 + i) for i, n in enumerate(names)}, step=step)
    step += 1
"""


# Logs runs FIRST..LAST-1 of the workspace: STEPS steps of METRICS metrics each, with a
# nested config, as fast as delivery allows (paced on the SDK's queue, as FILL).
WS_FILL = """
import json, math, sys, time, gpuplane
first, last, steps, metrics, project = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
names = [f"m{i}/loss" if i % 2 == 0 else f"m{i}/acc" for i in range(metrics)]
dropped = 0
for r in range(first, last):
    run = gpuplane.init(project=project, name=f"ws-{r:02d}", config={
        "optim": {"lr": 10 ** -(1 + r % 4), "wd": None if r % 3 else 0.01}, "layers": 2 + r % 6, "amp": r % 2 == 0,
        "seed": r})
    for step in range(steps):
        x = step / steps
        run.log({n: (1 - x) * (1 + 0.1 * math.sin(step / 50 + i + r)) if i % 2 == 0 else x * (0.5 + r / 100)
                 for i, n in enumerate(names)}, step=step)
        if step % 5000 == 0:
            while run.stats()["queued"] > 150_000:
                time.sleep(0.01)
    run.finish(timeout=300)
    dropped += run.stats()["dropped"]
print(json.dumps({"dropped": dropped}), flush=True)
"""

# One sweep trial: its values as the config, and a val/loss curve they shape.
TRIAL = """
import math, sys, gpuplane
lr, layers, dropout, optim = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
run = gpuplane.init(config={"lr": lr, "layers": layers, "dropout": dropout, "optim": optim})
floor = abs(math.log10(lr) + 3) * 0.2 + dropout * 0.3 + (0.1 if optim == "sgd" else 0) + 1 / layers
for step in range(50):
    run.log({"val/loss": floor + 2 * math.exp(-step / 10), "train/loss": floor * 0.8 + 2 * math.exp(-step / 8)},
            step=step)
run.finish(timeout=60)
"""

# A live run of the workspace: RATE steps a second of METRICS metrics, paced, until killed.
WS_FOLLOW = """
import json, math, sys, time, gpuplane
rate, metrics, project, index = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
names = [f"f{i}/loss" for i in range(metrics)]
run = gpuplane.init(project=project, name=f"live-{index}", config={"lr": 10 ** -(2 + index % 3), "index": index})
print(json.dumps({"run_id": run.id}), flush=True)
t0 = time.perf_counter()
step = 0
while True:
    due = t0 + step / rate
    now = time.perf_counter()
    if due > now:
        time.sleep(due - now)
    run.log({n: 1 / (1 + step / 500) + 0.05 * math.sin(step / 20 + i + index) for i, n in enumerate(names)}, step=step)
    step += 1
"""


def missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no chromium at {CHROMIUM} (apt-get install chromium, or set GPUPLANE_CHROMIUM)"
    if not (WEB / "node_modules" / "playwright-core").is_dir():
        return "web/node_modules has no playwright-core (npm ci in web/)"
    if not (WEB / "dist" / "index.html").is_file():
        return "web/dist is not built (make web)"
    return None


def sdk_env(daemon: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANE_")}
    env.update(PYTHONPATH=str(SDK), GPUPLANE_RUNTIME_DIR=str(daemon.runtime_dir), GPUPLANE_HOME=str(daemon.home),
               PYTHONUNBUFFERED="1")
    return env


class Children:
    """Processes the bench starts (logging scripts, node), each in its own session, all
    stopped on the way out: the group gets SIGTERM, then SIGKILL."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[str]:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True, **kwargs)
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[str]) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            except ProcessLookupError:
                pass
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()

    def stop_all(self) -> None:
        for proc in self.procs:
            self.stop(proc)


def run_node(children: Children, args: list[str], token: str, timeout: float,
             script: Path = NODE_SCRIPT) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANE_")}
    env.update(GPUPLANE_TOKEN=token, GPUPLANE_CHROMIUM=CHROMIUM)
    for name in ("GPUPLANE_BENCH_SHOT", "GPUPLANE_BENCH_TRACE"):  # a screenshot of the brushed page, a trace of the follow
        if os.environ.get(name):
            env[name] = os.environ[name]
    proc = children.start(["node", str(script), *args], cwd=WEB, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        children.stop(proc)
        raise TimeoutError(f"{script.name} {args[0]} ran past {timeout:g} s") from None
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{script.name} {args[0]} exited {proc.returncode}: {err.strip()[-1500:]}")
    found = json.loads(lines[-1])
    if found.get("error"):
        raise RuntimeError(f"{script.name} {args[0]}: {found['error'][:1500]}")
    return found


def rollup_stats(d: Any) -> dict[str, Any]:
    return d.client.get("/api/v1/actors/rollup")["actor"]["stats"]


def bench_open(d: Any, children: Children, url: str, token: str, python: str, steps: int, metrics: int,
               loads: int) -> dict[str, Any]:
    progress(f"filling a run: {metrics} metrics x {steps:,} steps through the SDK")
    t0 = time.perf_counter()
    fill = subprocess.run([python, "-c", FILL, str(steps), str(metrics)], env=sdk_env(d), capture_output=True,
                          text=True, timeout=1800)
    if fill.returncode != 0:
        raise RuntimeError(f"the fill script failed: {fill.stderr.strip()[-1500:]}")
    info = json.loads(fill.stdout.strip().splitlines()[-1])
    run_id = info["run_id"]

    def stored() -> bool:
        s = d.client.get(f"/api/v1/runs/{run_id}/summary")["summary"]["metrics"]
        return len(s) == metrics and all(m["count"] == steps for m in s.values())

    wait_until(stored, 120, 0.2, f"all {metrics * steps:,} points to be stored")
    fill_s = time.perf_counter() - t0
    progress(f"stored in {fill_s:.1f} s ({metrics * steps / fill_s:,.0f} points/s, {info['dropped']} dropped)")
    # Measure the run as it is once the rollup actor's pass has packed its chunks (a minute
    # after the points arrive by default; PASS_INTERVAL_S here): a pass that starts after the
    # fill, then one that finds nothing left to merge.
    progress("waiting for the points to be compacted")
    t1 = time.perf_counter()
    start = rollup_stats(d)["passes"]

    def compacted() -> bool:
        stats = rollup_stats(d)
        return stats["passes"] >= start + 2 and stats["last_built"].get("chunks_in", 0) == 0

    wait_until(compacted, 20 * PASS_INTERVAL_S, 0.5, "the rollup pass to compact the run")
    compact_wait_s = time.perf_counter() - t1
    progress(f"opening /runs/{run_id} {loads} times")
    res = run_node(children, ["open", url, run_id, str(loads)], token, timeout=60 + 20 * loads)
    first = [load["first_chart_ms"] / 1000 for load in res["loads"]]
    last = [load["last_chart_ms"] / 1000 for load in res["loads"]]
    return {
        "run_id": run_id, "steps": steps, "metrics": metrics, "fill_s": fill_s, "dropped": info["dropped"],
        "compact_wait_s": compact_wait_s,
        "loads": res["loads"],
        "first_chart_s": {"median": statistics.median(first), "cold": first[0], "max": max(first)},
        "last_chart_s": {"median": statistics.median(last), "cold": last[0], "max": max(last)},
    }


def bench_follow(d: Any, children: Children, url: str, token: str, python: str, rate: float, metrics: int,
                 seconds: float) -> dict[str, Any]:
    progress(f"following a run that logs {metrics} metrics at {rate:g} steps/s for {seconds:g} s")
    logger = children.start([python, "-c", FOLLOW, str(rate), str(metrics)], env=sdk_env(d))
    try:
        assert logger.stdout is not None
        line = logger.stdout.readline()
        if not line:
            raise RuntimeError(f"the follow script failed: {logger.stderr.read()[-1500:] if logger.stderr else ''}")
        run_id = json.loads(line)["run_id"]
        wait_until(lambda: d.client.get(f"/api/v1/runs/{run_id}/summary")["summary"]["progress"]["step"] or 0,
                   30, 0.1, "the followed run's first points")
        res = run_node(children, ["follow", url, run_id, str(seconds)], token, timeout=90 + seconds)
    finally:
        children.stop(logger)
    res["rate"] = rate
    res["metrics_logged"] = metrics
    return res


def wait_compacted(d: Any) -> float:
    """Seconds until the rollup actor's pass has packed what was stored: a pass that starts after
    the fill, then one that finds nothing left to merge (as ``bench_open``)."""
    t0 = time.perf_counter()
    start = rollup_stats(d)["passes"]

    def compacted() -> bool:
        stats = rollup_stats(d)
        return stats["passes"] >= start + 2 and stats["last_built"].get("chunks_in", 0) == 0

    wait_until(compacted, 20 * PASS_INTERVAL_S, 0.5, "the rollup pass to compact the runs")
    return time.perf_counter() - t0


def workspace_runs(d: Any, project: str) -> list[dict[str, Any]]:
    return d.client.post("/api/v1/workspace/runs", {"projects": [project]})["runs"]


def bench_ws_open(d: Any, children: Children, url: str, token: str, python: str, runs: int, steps: int,
                  metrics: int, loads: int) -> dict[str, Any]:
    """Section 3: fill ``runs`` x ``metrics`` x ``steps`` through the SDK (two scripts at once),
    then open the workspace ``loads`` times."""
    progress(f"filling the workspace: {runs} runs x {metrics} metrics x {steps:,} steps through the SDK")
    t0 = time.perf_counter()
    half = runs // 2
    fills = [children.start([python, "-c", WS_FILL, str(a), str(b), str(steps), str(metrics), WS_PROJECT],
                            env=sdk_env(d)) for a, b in ((0, half), (half, runs)) if b > a]
    dropped = 0
    for proc in fills:
        out, err = proc.communicate(timeout=3600)
        if proc.returncode != 0:
            raise RuntimeError(f"the workspace fill script failed: {err.strip()[-1500:]}")
        dropped += json.loads(out.strip().splitlines()[-1])["dropped"]

    def stored() -> bool:
        found = workspace_runs(d, WS_PROJECT)
        return len(found) == runs and all(len(r["metrics"]) == metrics and
                                          all(m["count"] == steps for m in r["metrics"].values()) for r in found)

    wait_until(stored, 300, 0.5, f"all {runs * metrics * steps:,} points to be stored")
    fill_s = time.perf_counter() - t0
    progress(f"stored in {fill_s:.1f} s ({runs * metrics * steps / fill_s:,.0f} points/s, {dropped} dropped)")
    progress("waiting for the points to be compacted")
    compact_wait_s = wait_compacted(d)
    t1 = time.perf_counter()
    workspace_runs(d, WS_PROJECT)
    query_s = time.perf_counter() - t1
    path = f"/experiments?p={WS_PROJECT}"
    progress(f"opening {path} {loads} times")
    res = run_node(children, ["open", url, path, str(loads)], token, timeout=120 + 60 * loads, script=WS_SCRIPT)
    first = [load["first_chart_ms"] / 1000 for load in res["loads"]]
    every = [load["all_drawn_ms"] / 1000 for load in res["loads"]]
    return {"runs": runs, "steps": steps, "metrics": metrics, "fill_s": fill_s, "dropped": dropped,
            "compact_wait_s": compact_wait_s, "workspace_query_s": query_s, "loads": res["loads"],
            "first_chart_s": {"median": statistics.median(first), "cold": first[0], "max": max(first)},
            "all_drawn_s": {"median": statistics.median(every), "cold": every[0], "max": max(every)}}


def bench_ws_brush(d: Any, children: Children, url: str, token: str, python: str, trials: int,
                   drags: int) -> dict[str, Any]:
    """Section 4: a random sweep of ``trials`` CPU trials that log through the SDK; its
    parallel coordinates brushed ``drags`` times under a trace."""
    progress(f"running a {trials}-trial sweep (each a CPU job logging through the SDK)")
    t0 = time.perf_counter()
    env = {"PYTHONPATH": str(SDK), "PYTHONUNBUFFERED": "1"}
    made = d.client.post("/api/v1/sweeps", {
        "name": "ws-brush", "metric": "val/loss", "goal": "min", "trials": trials, "seed": 7,
        "random": {"lr": "log:0.00001:0.1", "layers": "int:2:12", "dropout": "uniform:0:0.5", "optim": "choice:adam,sgd"},
        "job": {"command": [python, "-c", TRIAL, "{lr}", "{layers}", "{dropout}", "{optim}"], "gpu": 0, "env": env,
                "cwd": str(d.work)}})
    sweep_id = made["sweep"]["id"]

    def ended() -> bool:
        counts = d.client.get(f"/api/v1/sweeps/{sweep_id}")["sweep"]["counts"]
        return counts.get("succeeded", 0) + counts.get("failed", 0) + counts.get("cancelled", 0) >= trials

    wait_until(ended, 1200, 1.0, f"the sweep's {trials} trials to end")
    counts = d.client.get(f"/api/v1/sweeps/{sweep_id}")["sweep"]["counts"]
    run_s = time.perf_counter() - t0
    progress(f"the sweep ended in {run_s:.1f} s: {counts}")
    path = f"/experiments?sweep={sweep_id}"
    progress(f"brushing the parallel coordinates of {path} ({drags} drags)")
    res = run_node(children, ["brush", url, path, str(drags)], token, timeout=300, script=WS_SCRIPT)
    res.update(trials=trials, sweep_id=sweep_id, sweep_s=run_s, counts=counts)
    return res


def bench_ws_follow(d: Any, children: Children, url: str, token: str, python: str, rate: float, metrics: int,
                    live: int, seconds: float) -> dict[str, Any]:
    """Section 5: ``live`` runs logging ``metrics`` metrics at ``rate`` steps/s, followed by the workspace."""
    progress(f"following {live} runs that log {metrics} metrics at {rate:g} steps/s for {seconds:g} s")
    loggers = [children.start([python, "-c", WS_FOLLOW, str(rate), str(metrics), WS_LIVE, str(i)], env=sdk_env(d))
               for i in range(live)]
    try:
        for proc in loggers:
            assert proc.stdout is not None
            if not proc.stdout.readline():
                raise RuntimeError(f"a follow script failed: {proc.stderr.read()[-1500:] if proc.stderr else ''}")
        wait_until(lambda: len(found := workspace_runs(d, WS_LIVE)) == live and all(r["metrics"] for r in found),
                   30, 0.2, "the live runs' first points")
        path = f"/experiments?p={WS_LIVE}"
        res = run_node(children, ["follow", url, path, str(seconds)], token, timeout=120 + seconds, script=WS_SCRIPT)
    finally:
        for proc in loggers:
            children.stop(proc)
    res.update(rate=rate, metrics_logged=metrics, live=live)
    return res


def spread_ms(s: dict[str, float]) -> str:
    return f"{s['median'] * 1000:.0f} ms (cold cache {s['cold'] * 1000:.0f}, max {s['max'] * 1000:.0f})"


def table_rows(res: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    if res.get("skipped"):
        rows.append(("web UI benchmark", f"not available: {res['skipped']}", "", "skip"))
    o = res.get("open")
    if o:
        what = f"{o['metrics']} metrics x {o['steps']:,} points"
        f, last = o["first_chart_s"], o["last_chart_s"]
        rows.append((f"open a run ({what}): first chart drawn, median of {len(o['loads'])}", spread_ms(f),
                     f"< {TARGET_OPEN_S * 1000:.0f} ms", verdict(f["median"] < TARGET_OPEN_S)))
        rows.append(("  every chart drawn, median", spread_ms(last),
                     f"< {TARGET_OPEN_S * 1000:.0f} ms", verdict(last["median"] < TARGET_OPEN_S)))
        load = o["loads"][len(o["loads"]) // 2]
        if load.get("metrics_request"):
            m = load["metrics_request"]
            rows.append(("  the metrics request (a cached load)",
                         f"{m['start_ms']:.0f} -> {m['end_ms']:.0f} ms after navigation, {m['bytes'] / 1024:.0f} KiB; "
                         f"{load['points']} points a chart", "", "info"))
        rows.append(("  fill through the SDK", f"{o['fill_s']:.1f} s, {o['dropped']} dropped; compacted "
                     f"{o['compact_wait_s']:.1f} s later", "", "info"))
    f = res.get("follow")
    if f:
        moved = min(b - a for a, b in zip(f["steps_before"], f["steps_after"])) if f["charts"] else 0
        rows.append((f"follow a run logging {f['rate']:g} steps/s x {f['metrics_logged']} metrics: main thread busy",
                     f"{f['busy'] * 100:.2f} % of {f['window_s']:.0f} s", f"< {TARGET_BUSY * 100:.0f} %",
                     verdict(f["busy"] < TARGET_BUSY)))
        rows.append(("  script / layout / style", f"{f['script'] * 100:.2f} / {f['layout'] * 100:.2f} / "
                     f"{f['style'] * 100:.2f} %", "", "info"))
        rows.append(("  charts kept up", f"{f['charts']} charts, each moved on >= {moved:,} steps; "
                     f"{f['metrics_requests']} metrics requests; JS heap {f['js_heap_mb']:.1f} MB", "",
                     verdict(moved >= f["rate"] * f["window_s"] * 0.5)))
    rows += ws_rows(res)
    return rows


def ws_rows(res: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    o = res.get("ws_open")
    if o:
        what = f"{o['runs']} runs x {o['metrics']} metrics x {o['steps']:,} points"
        f, a = o["first_chart_s"], o["all_drawn_s"]
        rows.append((f"workspace ({what}): first chart drawn, median of {len(o['loads'])}", spread_ms(f),
                     f"< {TARGET_WS_FIRST_S * 1000:.0f} ms", verdict(f["median"] < TARGET_WS_FIRST_S)))
        rows.append(("  every chart drawn, every run loaded, median", spread_ms(a),
                     f"< {TARGET_WS_ALL_S * 1000:.0f} ms", verdict(a["median"] < TARGET_WS_ALL_S)))
        load = o["loads"][len(o["loads"]) // 2]
        runs = load.get("workspace_runs") or {}
        rows.append(("  requests (a cached load)",
                     f"workspace/runs {runs.get('start_ms', 0):.0f} -> {runs.get('end_ms', 0):.0f} ms; "
                     f"{load['metrics_requests']} metrics requests, {load['metrics_bytes'] / 1024:.0f} KiB, last done "
                     f"at {load['last_metrics_end_ms'] or 0:.0f} ms; {load['charts']} charts, {load['points']} "
                     "x values a chart", "", "info"))
        rows.append(("  fill through the SDK", f"{o['fill_s']:.1f} s, {o['dropped']} dropped; compacted "
                     f"{o['compact_wait_s']:.1f} s later; workspace/runs from the CLI side "
                     f"{o['workspace_query_s'] * 1000:.0f} ms", "", "info"))
    b = res.get("ws_brush")
    if b:
        rows.append((f"sweep of {b['trials']} trials: brush frame time p95 ({b['frames']} frames, {b['rows']} rows)",
                     f"{b['busy_p95_ms']:.1f} ms (mean {b['busy_mean_ms']:.1f}, max {b['busy_max_ms']:.1f})",
                     f"< {TARGET_BRUSH_FRAME_MS:.0f} ms", verdict(b["busy_p95_ms"] < TARGET_BRUSH_FRAME_MS)))
        if b.get("cpu_p95_ms") is not None:
            rows.append(("  the same in CPU time (not stretched by a loaded machine)", f"{b['cpu_p95_ms']:.1f} ms",
                         f"< {TARGET_BRUSH_FRAME_MS:.0f} ms", verdict(b["cpu_p95_ms"] < TARGET_BRUSH_FRAME_MS)))
        rows.append(("  frame interval p95 / drag wall time", f"{b['interval_p95_ms']:.1f} ms / "
                     f"{b['drag_wall_ms'] / 1000:.1f} s; sweep ran {b['sweep_s']:.0f} s", "", "info"))
        rows.append(("  rows inside the brushes after each drag", f"{b['passing_after']} of {b['rows']}; the page "
                     f"reloaded {b['reloads']} times (the chart was gone)", "", "info"))
        if b.get("page_errors"):
            rows.append(("  the page's errors", "; ".join(b["page_errors"])[:300], "", "FAIL"))
    f = res.get("ws_follow")
    if f:
        moved = min((b - a for a, b in zip(f["steps_before"], f["steps_after"])), default=0)
        rows.append((f"workspace following {f['live']} runs x {f['metrics_logged']} metrics at {f['rate']:g} steps/s: "
                     "main thread busy", f"{f['busy'] * 100:.2f} % of {f['window_s']:.0f} s",
                     f"< {TARGET_WS_BUSY * 100:.0f} %", verdict(f["busy"] < TARGET_WS_BUSY)))
        if f.get("cpu") is not None:
            rows.append(("  its CPU time (ThreadTime: not stretched by a loaded machine)", f"{f['cpu'] * 100:.2f} %",
                         f"< {TARGET_WS_BUSY * 100:.0f} %", verdict(f["cpu"] < TARGET_WS_BUSY)))
        rows.append(("  script / layout / style", f"{f['script'] * 100:.2f} / {f['layout'] * 100:.2f} / "
                     f"{f['style'] * 100:.2f} %", "", "info"))
        rows.append(("  charts kept up", f"{f['charts']} charts, each moved on >= {moved:,} steps; "
                     f"{f['metrics_requests']} metrics requests, {f['stream_requests']} streams opened, "
                     f"{f.get('table_reads', 0)} table reads; JS heap "
                     f"{f['js_heap_mb']:.1f} MB", "", verdict(moved >= f["rate"] * f["window_s"] * 0.5)))
    return rows


def render(res: dict[str, Any]) -> str:
    meta = res["meta"]
    out = [*heading("web UI benchmark", meta, f", chromium {meta.get('chromium', '?')}"), "",
           *table_lines(table_rows(res)), *error_lines(res)]
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200k points, 3 loads, a 10 s follow window")
    parser.add_argument("--json", action="store_true", help="write the figures as JSON to stdout")
    parser.add_argument("--points", type=int, help="steps per metric of the big run (default 1,000,000)")
    parser.add_argument("--metrics", type=int, default=8, help="metrics of the big run (default 8)")
    parser.add_argument("--loads", type=int, help="page loads of the big run (default 5, quick 3)")
    parser.add_argument("--follow-rate", type=float, default=100.0, help="steps/s of the followed run (default 100)")
    parser.add_argument("--follow-metrics", type=int, default=4, help="metrics of the followed run (default 4)")
    parser.add_argument("--follow-seconds", type=float, help="the follow window (default 20, quick 10)")
    parser.add_argument("--skip", action="append", default=[], choices=SECTIONS, help="skip a section")
    parser.add_argument("--only", choices=("workspace",), help="workspace: sections 3-5 alone")
    parser.add_argument("--ws-runs", type=int, default=50, help="runs of the workspace (default 50)")
    parser.add_argument("--ws-metrics", type=int, default=8, help="metrics of each workspace run (default 8)")
    parser.add_argument("--ws-points", type=int, help="steps per metric of each workspace run (default 100,000)")
    parser.add_argument("--ws-trials", type=int, default=200, help="trials of the brushed sweep (default 200)")
    parser.add_argument("--ws-drags", type=int, default=8, help="brush drags (default 8)")
    parser.add_argument("--ws-live", type=int, default=8, help="live runs the workspace follows (default 8)")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the daemon and the scripts")
    parser.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (daemon log)")
    args = parser.parse_args(argv)
    args.points = args.points or (200_000 if args.quick else 1_000_000)
    args.loads = args.loads or (3 if args.quick else 5)
    args.follow_seconds = args.follow_seconds or (10.0 if args.quick else 20.0)
    args.ws_points = args.ws_points or (10_000 if args.quick else 100_000)
    if args.only == "workspace":
        args.skip += ["open", "follow"]
    if min(args.points, args.metrics, args.loads, args.follow_metrics) < 1 or args.follow_rate <= 0:
        parser.error("counts and rates must be positive")
    return args


def chromium_version() -> str:
    try:
        out = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return out.strip().split(" ")[1] if out.strip() else "?"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_interrupt)
    root = Path(tempfile.mkdtemp(prefix="gpuplane-ui-bench-"))
    dm = JobDaemons(args.python, root, args.log_level)
    children = Children()
    res: dict[str, Any] = {
        "meta": run_meta(args, points=args.points, metrics=args.metrics, loads=args.loads, follow_rate=args.follow_rate,
                         follow_metrics=args.follow_metrics, follow_seconds=args.follow_seconds,
                         ws_runs=args.ws_runs, ws_metrics=args.ws_metrics, ws_points=args.ws_points,
                         ws_trials=args.ws_trials, ws_drags=args.ws_drags, ws_live=args.ws_live,
                         targets={"first_chart_s": TARGET_OPEN_S, "main_thread_busy": TARGET_BUSY,
                                  "ws_first_chart_s": TARGET_WS_FIRST_S, "ws_all_drawn_s": TARGET_WS_ALL_S,
                                  "ws_brush_frame_p95_ms": TARGET_BRUSH_FRAME_MS, "ws_follow_busy": TARGET_WS_BUSY}),
        "errors": [],
    }
    t_start = time.perf_counter()
    with guarded_run(res, root, args.keep, t_start, "the browser, the scripts and the daemon",
                     children.stop_all, dm.stop_all):
        why = missing()
        if why:
            res["skipped"] = why
        else:
            res["meta"]["chromium"] = chromium_version()
            config = root / "xdg-config" / "gpuplane" / "gpuplaned.toml"  # JobDaemons' XDG_CONFIG_HOME
            config.parent.mkdir(parents=True)
            config.write_text(f"[retention]\npass_interval_s = {PASS_INTERVAL_S}\n")
            d = dm.start("--gpus", "none", "--max-cpu-jobs", "4")
            url = d.client.get("/api/v1/daemon")["endpoints"]["http"]
            token = d.client.post("/api/v1/tokens", {"name": "ui-bench", "scopes": ["read"]})["secret"]
            if "open" not in args.skip:
                try:
                    res["open"] = bench_open(d, children, url, token, args.python, args.points, args.metrics,
                                             args.loads)
                except (RuntimeError, TimeoutError, DaemonFailed, subprocess.TimeoutExpired) as exc:
                    res["errors"].append(f"open: {type(exc).__name__}: {exc}")
            if "follow" not in args.skip:
                try:
                    res["follow"] = bench_follow(d, children, url, token, args.python, args.follow_rate,
                                                 args.follow_metrics, args.follow_seconds)
                except (RuntimeError, TimeoutError, DaemonFailed) as exc:
                    res["errors"].append(f"follow: {type(exc).__name__}: {exc}")
            sections = (("ws-open", lambda: bench_ws_open(d, children, url, token, args.python, args.ws_runs,
                                                          args.ws_points, args.ws_metrics, args.loads)),
                        ("ws-brush", lambda: bench_ws_brush(d, children, url, token, args.python, args.ws_trials,
                                                            args.ws_drags)),
                        ("ws-follow", lambda: bench_ws_follow(d, children, url, token, args.python, args.follow_rate,
                                                              args.ws_metrics, args.ws_live, args.follow_seconds)))
            for name, measure in sections:
                if name in args.skip:
                    continue
                try:
                    res[name.replace("-", "_")] = measure()
                except (RuntimeError, TimeoutError, DaemonFailed, subprocess.TimeoutExpired, KeyError) as exc:
                    res["errors"].append(f"{name}: {type(exc).__name__}: {exc}")
            dm.stop(d.proc)
    return report(res, args.json, render)


if __name__ == "__main__":
    sys.exit(main())
