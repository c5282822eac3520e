#!/usr/bin/env python3
"""Benchmark gpuplaned's start-up, idle cost and CLI latency.

Figures, each measured against daemons started in fresh temporary directories:

1. Cold start to READY: from spawning ``python -m gpuplaned`` to the first
   ``GET /api/v1/daemon`` that answers ``state: READY`` (polled every 2 ms). Repeated with a
   fresh home each time, then with an existing home (the database already there). Also the
   bare interpreter and ``import gpuplaned.daemon, gpuplaned.actors`` in a fresh interpreter,
   and the share of the start spent before ``serve()`` runs (from the daemon's own
   ``started_at``).
2. Idle CPU and RSS of a READY daemon over a window (30 s by default): utime+stime delta as
   a percentage of one core, RSS sampled every second (end and max), plus voluntary context
   switches per second (how often the daemon wakes up).
3. ``gpuplanectl status`` and ``gpuplanectl --help`` wall time (median of subprocess runs).

Usage::

    .venv/bin/python bench/daemon_bench.py            # full run, about a minute
    .venv/bin/python bench/daemon_bench.py --quick    # smoke run, under 20 s
    .venv/bin/python bench/daemon_bench.py --json     # JSON on stdout, progress on stderr

Always exits 0 (it is a benchmark, not a test) unless the arguments are wrong. Every daemon
it starts is stopped (SIGTERM, then SIGKILL after a timeout) on the way out, including on
Ctrl-C, SIGTERM and errors. Standard library and psutil only.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent

POLL_INTERVAL = 0.002  # seconds between READY probes
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 25.0  # the daemon's own STOP_DEADLINE is 20 s
SETTLE_SECONDS = 2.0

TARGET_READY_S = 1.0
TARGET_IDLE_CPU_PCT = 0.5
TARGET_RSS_MB = 80.0

# Anchor numbers from shared/research/peers-perf.md (section 4 and section 3).
PEERS_IDLE = (
    ("supervisord 4.3.0 (2 stopped programs)", 0.03, 24.6),
    ("wandb-core (offline run open)", 0.33, 32.7),
)
PEERS_OTHER = (
    "supervisord answers RPC 0.22-0.24 s after launch",
    "supervisorctl start: 190-195 ms, mostly its own Python start-up",
)


# --------------------------------------------------------------------------------------------
# Output helpers


def progress(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {
        "n": len(values),
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.0f} ms"


def ms_stats(s: dict[str, Any]) -> str:
    if not s or not s.get("n"):
        return "n/a"
    return f"{ms(s['median'])} (min {s['min'] * 1000:.0f}, max {s['max'] * 1000:.0f}, n={s['n']})"


# --------------------------------------------------------------------------------------------
# Daemon management


class Daemons:
    """Starts daemons and guarantees they are stopped, whatever happens."""

    def __init__(self, python: str, root: Path, log_level: str | None) -> None:
        self.python = python
        self.root = root
        self.log_level = log_level
        self.procs: list[subprocess.Popen[bytes]] = []
        self._count = 0

    def env(self, runtime_dir: Path | None = None) -> dict[str, str]:
        env = dict(os.environ)
        for key in ("GPUPLANE_HOME", "GPUPLANE_RUNTIME_DIR", "XDG_RUNTIME_DIR"):
            env.pop(key, None)
        env["XDG_CONFIG_HOME"] = str(self.root / "xdg-config")  # never read a user's config
        env["PYTHONUNBUFFERED"] = "1"
        env["GPUPLANE_HTTP"] = "127.0.0.1:0"  # never the user's port 8765
        if runtime_dir is not None:
            env["GPUPLANE_RUNTIME_DIR"] = str(runtime_dir)
        return env

    def spawn(self, home: Path | None = None, extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen[bytes], Path, Path, float, float]:
        """Start one daemon (``extra``: more flags); returns (proc, home, runtime_dir, perf_counter at spawn,
        wall at spawn)."""
        self._count += 1
        run_root = self.root / f"d{self._count:02d}"
        run_root.mkdir()
        home = home or run_root / "home"
        runtime_dir = run_root / "run"
        runtime_dir.mkdir(mode=0o700)
        cmd = [self.python, "-m", "gpuplaned", "--home", str(home), "--runtime-dir", str(runtime_dir)]
        if self.log_level:
            cmd += ["--log-level", self.log_level]
        cmd += extra
        log = open(run_root / "daemon.log", "wb")
        wall0 = time.time()
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env(),
            cwd=run_root,
            # Own session: a Ctrl-C in the terminal reaches only the bench, which then stops
            # the daemons itself (one SIGTERM, the graceful path).
            start_new_session=True,
        )
        log.close()
        proc.log_path = run_root / "daemon.log"  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc, home, runtime_dir, t0, wall0

    @staticmethod
    def log_tail(proc: subprocess.Popen[bytes], lines: int = 15) -> str:
        try:
            text = proc.log_path.read_text(errors="replace")  # type: ignore[attr-defined]
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT) -> dict[str, Any]:
        """SIGTERM, wait, SIGKILL on timeout. Returns how long it took and the exit code."""
        if proc.poll() is not None:
            return {"stop_s": 0.0, "rc": proc.returncode, "killed": False, "already_exited": True}
        t0 = time.perf_counter()
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        killed = not wait_exit(proc, timeout)
        if killed:
            proc.kill()
            proc.wait()
        return {"stop_s": time.perf_counter() - t0, "rc": proc.returncode, "killed": killed,
                "already_exited": False}

    def stop_all(self) -> None:
        alive = [p for p in self.procs if p.poll() is None]
        for proc in alive:
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + STOP_TIMEOUT
        for proc in alive:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                progress(f"daemon pid {proc.pid} ignored SIGTERM for {STOP_TIMEOUT:g} s; SIGKILL")
                proc.kill()
                proc.wait()


def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait for ``proc`` to exit, polling every millisecond; False on timeout.

    ``Popen.wait(timeout=...)`` sleeps in steps that grow to 50 ms, which would quantize
    the stop times measured here.
    """
    deadline = time.perf_counter() + timeout
    while proc.poll() is None:
        if time.perf_counter() > deadline:
            return False
        time.sleep(0.001)
    return True


class DaemonFailed(Exception):
    pass


def wait_ready(proc: subprocess.Popen[bytes], runtime_dir: Path, t0: float) -> dict[str, Any]:
    """Poll GET /api/v1/daemon every POLL_INTERVAL until READY.

    Returns perf_counter offsets (from ``t0``) of the first port-file seen, the first answer
    of any kind and the first READY, plus the READY body.
    """
    from gpuplanectl.client import DaemonClient, DaemonUnreachable, NoDaemon

    from gpuplaned.protocol.errors import ApiError

    t_portfile = t_answer = None
    probes = 0
    deadline = t0 + READY_TIMEOUT
    while True:
        probes += 1
        try:
            client = DaemonClient.discover(runtime_dir, timeout=2.0)
            if t_portfile is None:
                t_portfile = time.perf_counter() - t0
            body = client.get("/api/v1/daemon")
        except (NoDaemon, DaemonUnreachable):
            pass
        except ApiError:
            if t_answer is None:
                t_answer = time.perf_counter() - t0
        else:
            now = time.perf_counter() - t0
            if t_answer is None:
                t_answer = now
            if isinstance(body, dict) and body.get("state") == "READY":
                return {"ready_s": now, "portfile_s": t_portfile, "first_answer_s": t_answer,
                        "probes": probes, "body": body}
        if proc.poll() is not None:
            raise DaemonFailed(f"gpuplaned exited with {proc.returncode} before READY:\n"
                               f"{Daemons.log_tail(proc)}")
        if time.perf_counter() > deadline:
            raise DaemonFailed(f"gpuplaned not READY after {READY_TIMEOUT:g} s:\n{Daemons.log_tail(proc)}")
        time.sleep(POLL_INTERVAL)


# --------------------------------------------------------------------------------------------
# 1. Cold start


def timed_python(python: str, code: str, runs: int, env: dict[str, str]) -> dict[str, Any]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([python, "-c", code], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return summary(times)


def measure_import(python: str, env: dict[str, str]) -> float:
    """The import alone, timed inside the interpreter (the process wall time also counts the
    interpreter's teardown of the ~650 modules at exit, which the daemon pays only when it stops)."""
    code = ("import time; t = time.perf_counter(); import gpuplaned.daemon, gpuplaned.actors; "
            "print(time.perf_counter() - t)")
    out = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return float(out.strip())


def import_profile(python: str, env: dict[str, str], top: int = 12) -> dict[str, Any]:
    """Import time of ``gpuplaned.daemon, gpuplaned.actors`` by top-level package (``-X importtime``).

    Sums each module's *self* time into its top-level package, so the rows add up to the
    total without double counting what one package imports from another.
    """
    out = subprocess.run([python, "-X", "importtime", "-c", "import gpuplaned.daemon, gpuplaned.actors"],
                         env=env, capture_output=True, text=True, check=True).stderr
    by_package: dict[str, float] = {}
    modules = 0
    for line in out.splitlines():
        # "import time: <self us> | <cumulative us> | <two spaces per nesting level><name>"
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        parts = line.split("|")
        self_us = int(parts[0].split(":", 1)[1])
        package = parts[2].strip().split(".")[0]
        by_package[package] = by_package.get(package, 0.0) + self_us / 1000
        modules += 1
    rows = sorted(({"package": k, "self_ms": v} for k, v in by_package.items()),
                  key=lambda r: r["self_ms"], reverse=True)
    return {"modules": modules, "total_ms": sum(by_package.values()), "packages": rows[:top]}


def bench_cold_start(daemons: Daemons, runs: int, existing_runs: int, import_runs: int,
                     profile_imports: bool) -> dict[str, Any]:
    env = daemons.env()
    progress(f"interpreter and import timing ({import_runs} runs each, after one untimed warm-up)")
    # Warm the page cache (and any .pyc writes) so the first timed run is not an outlier.
    timed_python(daemons.python, "import gpuplaned.daemon, gpuplaned.actors", 1, env)
    result: dict[str, Any] = {
        "python_bare_s": timed_python(daemons.python, "pass", import_runs, env),
        "python_import_s": timed_python(daemons.python, "import gpuplaned.daemon, gpuplaned.actors",
                                        import_runs, env),
        "import_in_process_s": summary([measure_import(daemons.python, env) for _ in range(import_runs)]),
    }
    if profile_imports:
        result["import_profile"] = import_profile(daemons.python, env)

    def one(home: Path | None) -> tuple[dict[str, Any], Path]:
        proc, used_home, runtime_dir, t0, wall0 = daemons.spawn(home)
        try:
            ready = wait_ready(proc, runtime_dir, t0)
        except DaemonFailed:
            daemons.stop(proc, timeout=5)
            raise
        body = ready.pop("body")
        started_at = body.get("started_at")
        # The daemon's serve() stamps time.time() on entry: spawn -> serve is interpreter,
        # imports and config; serve -> READY is endpoint claim, actors, database.
        # started_at is in milliseconds since the epoch, like every timestamp of the API.
        ready["pre_serve_s"] = (started_at / 1000 - wall0) if isinstance(started_at, (int, float)) else None
        ready.update(daemons.stop(proc))
        return ready, used_home

    fresh: list[dict[str, Any]] = []
    first_home = None
    for i in range(runs):
        run, home = one(None)
        first_home = first_home or home
        fresh.append(run)
        progress(f"cold start {i + 1}/{runs} (fresh home): READY in {ms(run['ready_s'])}, "
                 f"stopped in {ms(run['stop_s'])} rc={run['rc']}")
    existing: list[dict[str, Any]] = []
    for i in range(existing_runs):
        run, _ = one(first_home)
        existing.append(run)
        progress(f"cold start {i + 1}/{existing_runs} (existing home): READY in {ms(run['ready_s'])}")

    def collect(runs_: list[dict[str, Any]], key: str) -> dict[str, Any]:
        return summary([r[key] for r in runs_ if r.get(key) is not None])

    result.update({
        "fresh_home": {key: collect(fresh, key) for key in
                       ("ready_s", "portfile_s", "first_answer_s", "pre_serve_s", "stop_s")},
        "existing_home": {key: collect(existing, key) for key in ("ready_s", "pre_serve_s")},
        "fresh_runs": fresh,
        "existing_runs": existing,
        "bad_stops": [r for r in fresh + existing if r["rc"] != 0 or r["killed"]],
    })
    return result


# --------------------------------------------------------------------------------------------
# 2. Idle cost


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc] + proc.children(recursive=True)
    except psutil.Error:
        return [proc]


def _cpu_s(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def _rss(procs: list[psutil.Process]) -> int:
    """Memory of the daemon's process tree: the daemon's RSS plus its helpers' PSS.

    The helpers (the job launcher and its pre-forked shims) are forks that share most of
    their pages with each other; summing their RSS would count those pages once per fork.
    PSS splits each shared page among its sharers, so the sum is what the tree really holds.
    """
    total = 0
    for i, p in enumerate(procs):
        try:
            total += p.memory_info().rss if i == 0 else p.memory_full_info().pss
        except (psutil.Error, AttributeError):
            continue
    return total


def bench_idle(daemons: Daemons, seconds: float) -> tuple[dict[str, Any], subprocess.Popen[bytes], Path]:
    proc, _home, runtime_dir, t0, _ = daemons.spawn()
    wait_ready(proc, runtime_dir, t0)
    progress(f"idle: daemon pid {proc.pid} READY; settling {SETTLE_SECONDS:g} s, then measuring {seconds:g} s")
    time.sleep(SETTLE_SECONDS)
    p = psutil.Process(proc.pid)
    tree = _tree(p)
    ticks_hz = os.sysconf("SC_CLK_TCK")
    cpu0 = _cpu_s(tree)
    ctx0 = p.num_ctx_switches()
    w0 = time.perf_counter()
    rss_samples = [_rss(tree)]
    end = w0 + seconds
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        time.sleep(min(1.0, end - now))
        tree = _tree(p)
        rss_samples.append(_rss(tree))
        if proc.poll() is not None:
            raise DaemonFailed(f"gpuplaned exited with {proc.returncode} while idle:\n{Daemons.log_tail(proc)}")
    cpu1 = _cpu_s(tree)
    ctx1 = p.num_ctx_switches()
    wall = time.perf_counter() - w0
    cpu = cpu1 - cpu0
    result = {
        "window_s": wall,
        "cpu_s": cpu,
        "cpu_pct_one_core": 100.0 * cpu / wall,
        "cpu_resolution_pct": 100.0 / ticks_hz / wall,  # one clock tick over the window
        "rss_end_mb": rss_samples[-1] / 1e6,
        "rss_max_mb": max(rss_samples) / 1e6,
        "rss_samples": len(rss_samples),
        "voluntary_ctx_switches_per_s": (ctx1.voluntary - ctx0.voluntary) / wall,
        "involuntary_ctx_switches_per_s": (ctx1.involuntary - ctx0.involuntary) / wall,
        "threads": p.num_threads(),
        "children": len(tree) - 1,
        "uss_mb": None,
    }
    try:
        result["uss_mb"] = p.memory_full_info().uss / 1e6
    except (psutil.Error, AttributeError):
        pass
    return result, proc, runtime_dir


# --------------------------------------------------------------------------------------------
# 3. CLI


def ctl_available() -> bool:
    return (REPO / "ctl" / "main.py").exists()


def bench_ctl(daemons: Daemons, runtime_dir: Path | None, runs: int) -> dict[str, Any]:
    if not ctl_available():
        return {"available": False, "reason": "ctl/main.py does not exist yet (gpuplanectl not written)"}
    env = daemons.env(runtime_dir)

    def timed(args: list[str]) -> dict[str, Any]:
        times, failures = [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            done = subprocess.run([daemons.python, "-m", "gpuplanectl", *args], env=env,
                                  capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
            times.append(time.perf_counter() - t0)
            if done.returncode != 0:
                failures.append({"rc": done.returncode, "stderr": done.stderr[-600:], "stdout": done.stdout[-300:]})
        out = summary(times)
        out["failures"] = len(failures)
        if failures:
            out["first_failure"] = failures[0]
        return out

    result: dict[str, Any] = {"available": True}
    result["help"] = timed(["--help"])
    if runtime_dir is not None:
        result["status"] = timed(["status"])
    return result


# --------------------------------------------------------------------------------------------
# Report


def verdict(ok: bool | None) -> str:
    return "info" if ok is None else ("PASS" if ok else "FAIL")


def table_rows(res: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    cold = res.get("cold_start")
    if cold:
        fresh = cold["fresh_home"]["ready_s"]
        rows.append(("cold start -> READY, fresh home (median)", ms_stats(fresh), f"< {TARGET_READY_S:g} s",
                     verdict(fresh["n"] > 0 and fresh["median"] < TARGET_READY_S)))
        if fresh["n"]:
            rows.append(("cold start -> READY, fresh home (worst)", ms(fresh["max"]), f"< {TARGET_READY_S:g} s",
                         verdict(fresh["max"] < TARGET_READY_S)))
        ex = cold["existing_home"]["ready_s"]
        if ex["n"]:
            rows.append(("cold start -> READY, existing home (median)", ms_stats(ex), f"< {TARGET_READY_S:g} s",
                         verdict(ex["median"] < TARGET_READY_S)))
        rows.append(("  spawn -> port-file published (median)", ms_stats(cold["fresh_home"]["portfile_s"]), "", "info"))
        rows.append(("  spawn -> serve() entered (median)", ms_stats(cold["fresh_home"]["pre_serve_s"]), "", "info"))
        rows.append(("  python -c pass", ms_stats(cold["python_bare_s"]), "", "info"))
        rows.append(("  import gpuplaned.daemon, .actors (in-process)", ms_stats(cold["import_in_process_s"]), "", "info"))
        rows.append(("  python -c 'import ...' (wall, incl. exit)", ms_stats(cold["python_import_s"]), "", "info"))
        stop = cold["fresh_home"]["stop_s"]
        bad = len(cold["bad_stops"])
        rows.append(("SIGTERM -> exit, cold-start daemons (median)", f"{ms_stats(stop)}; {bad} not exit 0",
                     "exit 0",
                     verdict(bad == 0)))
    idle = res.get("idle")
    if idle:
        rows.append((f"idle CPU over {idle['window_s']:.0f} s (% of one core)",
                     f"{idle['cpu_pct_one_core']:.3f} % ({idle['cpu_s'] * 1000:.0f} ms CPU)",
                     f"< {TARGET_IDLE_CPU_PCT:g} %", verdict(idle["cpu_pct_one_core"] < TARGET_IDLE_CPU_PCT)))
        rows.append(("idle memory at end (daemon RSS + helpers PSS)", f"{idle['rss_end_mb']:.1f} MB", f"< {TARGET_RSS_MB:g} MB",
                     verdict(idle["rss_end_mb"] < TARGET_RSS_MB)))
        rows.append(("idle memory max over window", f"{idle['rss_max_mb']:.1f} MB", f"< {TARGET_RSS_MB:g} MB",
                     verdict(idle["rss_max_mb"] < TARGET_RSS_MB)))
        if idle.get("uss_mb") is not None:
            rows.append(("  daemon USS (private memory)", f"{idle['uss_mb']:.1f} MB", "", "info"))
        rows.append(("  idle wake-ups (voluntary ctx switches/s)",
                     f"{idle['voluntary_ctx_switches_per_s']:.1f}/s, {idle['threads']} threads, "
                     f"{idle['children']} children", "", "info"))
    ctl = res.get("ctl")
    if ctl is not None:
        if not ctl.get("available"):
            rows.append(("gpuplanectl status / --help", f"not available: {ctl.get('reason')}", "", "skip"))
        else:
            for key, label in (("status", "gpuplanectl status (median)"), ("help", "gpuplanectl --help (median)")):
                if key not in ctl:
                    continue
                s = ctl[key]
                text = ms_stats(s)
                if s["failures"]:
                    text += f", {s['failures']} failed (rc {s['first_failure']['rc']})"
                rows.append((label, text, "", "info" if not s["failures"] else "FAIL"))
    return rows


def render(res: dict[str, Any]) -> str:
    out = [*heading("gpuplaned benchmark", res["meta"]), "", *table_lines(table_rows(res)), ""]
    out.append("Peers, idle (shared/research/peers-perf.md section 4, 30 s window):")
    for name, cpu, rss in PEERS_IDLE:
        out.append(f"  {name:40s} {cpu:5.2f} % of one core   {rss:5.1f} MB")
    for note in PEERS_OTHER:
        out.append(f"  {note}")
    idle = res.get("idle")
    if idle:
        out.append("")
        out.append(f"Note: CPU times come in clock ticks; over this window one tick is "
                   f"{idle['cpu_resolution_pct']:.3f} % of a core.")
    cold = res.get("cold_start")
    if cold and cold.get("import_profile"):
        prof = cold["import_profile"]
        out.append("")
        out.append(f"Import time by package, self time summed (python -X importtime; {prof['modules']} modules, "
                   f"{prof['total_ms']:.0f} ms in all, inflated by the profiler):")
        for row in prof["packages"]:
            out.append(f"  {row['self_ms']:8.1f} ms  {row['package']}")
    ctl = res.get("ctl")
    if ctl and ctl.get("available"):
        for key in ("status", "help"):
            failure = ctl.get(key, {}).get("first_failure")
            if failure:
                out.append("")
                out.append(f"gpuplanectl {key} failed (rc {failure['rc']}): {failure['stderr'].strip()[-400:]}")
    out.extend(error_lines(res))
    return "\n".join(out)


FIGURE_HEADER = ("figure", "measured", "target", "result")


def heading(title: str, meta: dict[str, Any], extra: str = "") -> list[str]:
    """A report's first lines: what ran where (``extra`` goes inside the parentheses), and the load."""
    return [f"{title}  ({meta['python_version']}, {meta['cpus']} CPUs, {meta['platform']}, "
            f"mode {meta['mode']}{extra})",
            "load average (1/5/15 min) at start %.2f/%.2f/%.2f, at end %.2f/%.2f/%.2f"
            % (*meta["loadavg_start"], *meta["loadavg_end"])]


def table_lines(rows: list[tuple[Any, ...]], header: tuple[str, ...] = FIGURE_HEADER,
                indent: str = "") -> list[str]:
    """``rows`` as left-aligned columns under ``header`` and a rule."""
    widths = [max(len(str(r[i])) for r in [*rows, header]) for i in range(len(header))]
    out = [indent + "  ".join(h.ljust(w) for h, w in zip(header, widths)),
           indent + "  ".join("-" * w for w in widths)]
    out += [indent + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return out


def host_busy_s() -> float:
    """CPU-seconds the whole machine has spent busy since boot (all CPUs, all processes)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)


def error_lines(res: dict[str, Any]) -> list[str]:
    """The run's errors, after a blank line; nothing when there were none."""
    return [""] + [f"ERROR: {err}" for err in res["errors"]] if res.get("errors") else []


# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 cold starts, 5 s idle, 3 CLI runs")
    parser.add_argument("--json", action="store_true", help="write the figures as JSON to stdout")
    parser.add_argument("--runs", type=int, help="cold starts with a fresh home (default 10, quick 3)")
    parser.add_argument("--existing-runs", type=int, help="cold starts with an existing home (default 3, quick 1)")
    parser.add_argument("--idle-seconds", type=float, help="idle window (default 30, quick 5)")
    parser.add_argument("--ctl-runs", type=int, help="gpuplanectl runs per command (default 10, quick 3)")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs gpuplaned (default: this one)")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                        help="passed to gpuplaned (default: the daemon's own default)")
    parser.add_argument("--import-profile", action="store_true", help="also list the slowest imports")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (daemon logs) and print its path")
    parser.add_argument("--skip", action="append", default=[], choices=("cold", "idle", "ctl"),
                        help="skip a section (repeatable)")
    args = parser.parse_args(argv)
    q = args.quick
    args.runs = args.runs if args.runs is not None else (3 if q else 10)
    args.existing_runs = args.existing_runs if args.existing_runs is not None else (1 if q else 3)
    args.idle_seconds = args.idle_seconds if args.idle_seconds is not None else (5.0 if q else 30.0)
    args.ctl_runs = args.ctl_runs if args.ctl_runs is not None else (3 if q else 10)
    args.import_runs = 3 if q else 5
    if args.runs < 1 or args.existing_runs < 0 or args.idle_seconds <= 0 or args.ctl_runs < 1:
        parser.error("counts must be positive")
    return args


def run_meta(args: Any, **extra: Any) -> dict[str, Any]:
    """What every benchmark records about the run and the machine it ran on."""
    return {
        "mode": "quick" if args.quick else "full",
        "python": args.python,
        "python_version": platform.python_version(),
        "platform": platform.platform(terse=True),
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **extra,
    }


def raise_interrupt(signum: int, _frame: Any) -> None:
    """SIGTERM handler: take the same clean-up path as Ctrl-C."""
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_interrupt)
    root = Path(tempfile.mkdtemp(prefix="gpuplane-bench-"))
    daemons = Daemons(args.python, root, args.log_level)
    res: dict[str, Any] = {
        "meta": run_meta(args, targets={"ready_s": TARGET_READY_S, "idle_cpu_pct": TARGET_IDLE_CPU_PCT,
                                        "rss_mb": TARGET_RSS_MB}),
        "errors": [],
    }
    t_start = time.perf_counter()
    with guarded_run(res, root, args.keep, t_start, "daemons", daemons.stop_all, reap=False):
        if "cold" not in args.skip:
            try:
                res["cold_start"] = bench_cold_start(daemons, args.runs, args.existing_runs, args.import_runs,
                                                     args.import_profile)
            except (DaemonFailed, subprocess.CalledProcessError) as exc:
                res["errors"].append(f"cold start: {exc}")
        idle_proc = idle_rt = None
        if "idle" not in args.skip or "ctl" not in args.skip:
            try:
                if "idle" not in args.skip:
                    res["idle"], idle_proc, idle_rt = bench_idle(daemons, args.idle_seconds)
                else:
                    idle_proc, _h, idle_rt, t0, _w = daemons.spawn()
                    wait_ready(idle_proc, idle_rt, t0)
            except DaemonFailed as exc:
                res["errors"].append(f"idle: {exc}")
        if "ctl" not in args.skip:
            progress(f"gpuplanectl timing ({args.ctl_runs} runs each)")
            res["ctl"] = bench_ctl(daemons, idle_rt if idle_proc is not None and idle_proc.poll() is None else None,
                                   args.ctl_runs)
        if idle_proc is not None:
            res["idle_daemon_stop"] = daemons.stop(idle_proc)
    return report(res, args.json, render)


def reap_strays(root: Path) -> list[int]:
    """Kill processes left running with their cwd under our temp dir: job shims and jobs of a
    daemon stopped mid-run, task-spooler clients, SDK scripts. Only processes a bench started
    run there."""
    me = os.getpid()
    prefix = str(root)
    found = []
    for p in psutil.process_iter(["pid"]):
        if p.pid == me:
            continue
        try:
            cwd = p.cwd()
        except (psutil.Error, OSError):
            continue
        if cwd == prefix or cwd.startswith(prefix + os.sep):
            found.append(p)
    for p in found:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _gone, alive = psutil.wait_procs(found, timeout=2)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    return [p.pid for p in found]


def kill_forked_children() -> None:
    """Kill and reap this bench's ``multiprocessing`` children (clients, followers)."""
    for child in multiprocessing.active_children():
        child.kill()
        child.join()


@contextmanager
def guarded_run(res: dict[str, Any], root: Path, keep: bool, t_start: float, what: str,
                *stops: Callable[[], Any], reap: bool = True) -> Iterator[None]:
    """The body of a bench's ``main``: an error or Ctrl-C is recorded in ``res`` (a benchmark
    reports and exits 0); then, with a second Ctrl-C or SIGTERM ignored so that the clean-up
    is not cut short, each of ``stops`` runs, processes left under ``root`` are killed
    (``reap``) and the run is closed (``close_run``)."""
    try:
        yield
    except KeyboardInterrupt:
        progress(f"interrupted; stopping {what}")
        res["errors"].append("interrupted")
    except Exception as exc:  # noqa: BLE001 - a benchmark reports and exits 0
        res["errors"].append(f"{type(exc).__name__}: {exc}")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for stop in stops:
            stop()
        strays = reap_strays(root) if reap else []
        if strays:
            progress(f"killed {len(strays)} leftover process(es) under {root}: {strays}")
        close_run(res, root, keep, t_start)


def close_run(res: dict[str, Any], root: Path, keep: bool, t_start: float) -> None:
    """Stamp the run's end and remove its temp dir (unless kept); part of every bench's clean-up."""
    res["meta"]["elapsed_s"] = time.perf_counter() - t_start
    res["meta"]["loadavg_end"] = os.getloadavg()
    if keep:
        progress(f"kept {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)


def report(res: dict[str, Any], as_json: bool, render_table: Any) -> int:
    """Print the figures (JSON for scripts, else the table); a benchmark always exits 0."""
    if as_json:
        json.dump(res, sys.stdout, indent=2, default=str)
        print()
    else:
        print(render_table(res))
        print(f"\n(elapsed {res['meta']['elapsed_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
