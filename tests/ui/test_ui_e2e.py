"""The web UI in a real browser: headless Debian chromium driven by web/e2e/*.mjs (node and
playwright-core) against a real gpuplaned with two fake GPUs and a job that logs metrics
with the SDK.

One daemon serves the whole module: a finished SDK run, a job still logging (``loss`` and
``acc`` every 50 ms) and an API token with read and write. Each test runs one node script
with the daemon's URL and what it needs in its environment; the script prints one JSON line
(what it saw, and ``failures``) and exits 0 only when every check passed. Screenshots go to
tests/screenshots/ (git-ignored).

Needs node (with ``npm ci`` done in web/), chromium at /usr/bin/chromium (or
``GPUPLANE_CHROMIUM``) and a current build in web/dist; ``make test`` provides all three.
When one is missing these tests FAIL and say what to do, so a machine that cannot run them
never passes silently; ``GPUPLANE_SKIP_UI_TESTS=1`` skips them on purpose.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import DaemonProcess, Jobs, kill_processes_with_env, wait_for

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
WEB = REPO / "web"
E2E = WEB / "e2e"
SDK_DIR = REPO / "sdk"
SHOTS = REPO / "tests" / "screenshots"
CHROMIUM = os.environ.get("GPUPLANE_CHROMIUM", "/usr/bin/chromium")
SKIP_ENV = "GPUPLANE_SKIP_UI_TESTS"
METRICS = ("loss", "acc")
SCRIPT_LIMIT_S = 120  # each script has its own, shorter, watchdog; this one catches a hung node

# The live run: logs until the module's daemon is stopped (about 20 steps a second).
TRAIN = """
import math, time, gpuplane
run = gpuplane.init(project="ui-e2e", experiment="live", name="ui-live", config={"lr": 0.001, "batch": 32},
                    tags=["e2e"])
for step in range(1_000_000):
    loss = 1 / (1 + step / 50) + 0.02 * math.sin(step / 7)
    run.log({"loss": loss, "acc": 1 - 1 / (1 + step / 80)}, step=step)
    if step % 10 == 0:
        print(f"step {step} loss {loss:.4f}", flush=True)
    time.sleep(0.05)
"""

# A finished run with the same metrics, for the runs list and Compare.
FINISHED = """
import gpuplane
run = gpuplane.init(project="ui-e2e", experiment="live", name="ui-done", config={"lr": 0.01, "batch": 32})
for step in range(400):
    run.log({"loss": 2 / (1 + step / 30), "acc": 1 - 1 / (1 + step / 40)}, step=step)
run.finish()
print(run.id, flush=True)
"""


def _missing() -> str | None:
    """What keeps the browser tests from running here, with how to fix it; None when nothing."""
    if shutil.which("node") is None:
        return "node is not installed (Node.js 20.19+ runs web/e2e/*.mjs): install it, or run `make test`"
    if not os.access(CHROMIUM, os.X_OK):
        return (f"no chromium at {CHROMIUM}: `apt-get install chromium` (what `make test` does), or point "
                "GPUPLANE_CHROMIUM at one")
    if not (WEB / "node_modules" / "playwright-core" / "package.json").is_file():
        return "web/node_modules is missing playwright-core: run `npm ci` in web/ (`make test` does)"
    index = WEB / "dist" / "index.html"
    if not index.is_file():
        return "the web UI is not built (no web/dist/index.html): run `make web` (`make test` builds it)"
    built = index.stat().st_mtime
    sources = [p for d in ("src", "public") for p in (WEB / d).rglob("*") if p.is_file() and ".test." not in p.name]
    sources += [WEB / n for n in ("index.html", "package.json", "vite.config.ts") if (WEB / n).is_file()]
    newer = [p for p in sources if p.stat().st_mtime > built]
    if newer:
        return (f"web/dist is older than {newer[0].relative_to(REPO)} (and {len(newer) - 1} more): "
                "run `make web` so the browser tests test these sources")
    return None


@dataclass
class UI:
    daemon: DaemonProcess
    jobs: Jobs
    url: str
    token: str
    live_job: dict
    live_run: dict
    done_run: dict
    work: Path


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory):
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: the browser tests are skipped on purpose")
    missing = _missing()
    if missing:
        pytest.fail(f"the web UI's browser tests cannot run: {missing} (or set {SKIP_ENV}=1 to skip them)",
                    pytrace=False)
    root = tmp_path_factory.mktemp("ui")
    daemon = DaemonProcess(root / "d", "--gpus", "fake:2")
    try:
        daemon.start()
        daemon.wait_ready()
        jobs = Jobs(daemon, root / "work")
        jobs.wait_node()
        url = daemon.client().get("/api/v1/daemon")["endpoints"]["http"]
        assert url and url.startswith("http://127.0.0.1:"), url
        made = daemon.run_ctl("token", "create", "ui-e2e", "--scope", "read,write", "--json")
        assert made.returncode == 0, made.stderr
        token = json.loads(made.stdout)["secret"]

        sdk_env = {k: v for k, v in daemon.env.items()}
        sdk_env["PYTHONPATH"] = str(SDK_DIR)
        done = subprocess.run([sys.executable, "-c", FINISHED], env=sdk_env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        done_run = jobs.client.get(f"/api/v1/runs/{done.stdout.strip()}")["run"]

        live_job = jobs.submit([sys.executable, "-c", TRAIN], name="ui-live", gpu=1,
                               env={"PYTHONPATH": str(SDK_DIR)})
        live_job = jobs.wait(live_job["id"], "RUNNING", timeout=30)

        def logging() -> bool:
            m = jobs.client.get(f"/api/v1/runs/{live_job['run_id']}/metrics?names=loss,acc&points=10")
            return all(sum(c or 0 for c in m["series"].get(n, {}).get("count", [])) >= 20 for n in METRICS)

        wait_for(logging, 30, interval=0.1, what="the live job's first metrics")
        live_run = jobs.client.get(f"/api/v1/runs/{live_job['run_id']}")["run"]
        yield UI(daemon, jobs, url, token, live_job, live_run, done_run, root / "work")
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


def run_script(ui: UI, name: str, **env: str) -> dict:
    """``node web/e2e/NAME.mjs`` against the module's daemon; its JSON line, once it passed."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANE_")}
    full.update(GPUPLANE_UI_URL=ui.url, GPUPLANE_UI_TOKEN=ui.token, GPUPLANE_UI_SHOTS=str(SHOTS),
                GPUPLANE_CHROMIUM=CHROMIUM, **env)
    (SHOTS / f"failure-{name}.png").unlink(missing_ok=True)  # a failure's screenshot, from an earlier run
    # Its own process group: on a timeout the browser goes with it.
    proc = subprocess.Popen(["node", str(E2E / f"{name}.mjs")], cwd=WEB, env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=SCRIPT_LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{name}.mjs ran past {SCRIPT_LIMIT_S} s\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"{name}.mjs printed no result (exit {proc.returncode})\nstdout: {out[-2000:]}\nstderr: {err[-3000:]}"
    result = json.loads(lines[-1])
    assert proc.returncode == 0 and result["ok"], (
        f"{name}.mjs failed (exit {proc.returncode}):\n" + "\n".join(f"- {f}" for f in result["failures"])
        + f"\nstderr: {err[-2000:]}\ndaemon log:\n{ui.daemon.log()[-3000:]}")
    return result


def test_sign_in_with_a_token_or_a_one_time_link(ui):
    link = ui.daemon.run_ctl("ui", "--next", "/runs", "--json")
    assert link.returncode == 0, link.stderr
    url = json.loads(link.stdout)["url"]
    assert url.startswith(ui.url + "/login?code=")

    r = run_script(ui, "signin", GPUPLANE_UI_LOGIN_URL=url)

    assert r["redirected_to"] == "/signin?next=%2Fjobs"
    assert r["wrong_token_error"] == "unknown or revoked API token"
    assert r["session"] == r["link_session"] == "read · write"
    assert r["cookie"] == {"httpOnly": True, "sameSite": "Strict", "path": "/"}
    assert r["link_landed"] == "/runs"
    assert r["link_reuse_status"] == 401


def test_every_page_loads_clean_in_light_and_dark_and_the_run_chart_follows_the_job(ui):
    r = run_script(ui, "pages", GPUPLANE_UI_RUN_ID=ui.live_run["id"], GPUPLANE_UI_RUN_NAME=ui.live_run["name"],
                   GPUPLANE_UI_JOB_ID=ui.live_job["id"], GPUPLANE_UI_JOB_NAME=ui.live_job["name"],
                   GPUPLANE_UI_RUN2_ID=ui.done_run["id"], GPUPLANE_UI_RUN2_NAME=ui.done_run["name"],
                   GPUPLANE_UI_METRICS=",".join(METRICS))

    names = ["dashboard", "jobs", "job", "runs", "run", "compare", "nodes", "events"]
    assert [(p["name"], p["theme"]) for p in r["pages"]] == [(n, t) for t in ("light", "dark") for n in names]
    assert r["problems"] == []
    for p in r["pages"]:
        assert p["problems"] == [], p
        assert Path(p["shot"]).stat().st_size > 10_000, p
    chart = r["chart"]
    for name in METRICS:
        first, later = chart["first"][name], chart["later"][name]
        assert first["canvas"] and first["title"] == name, first
        assert later["points"] > first["points"] > 0, (first, later)
    for name in METRICS:
        assert set(r["compare"][name]) == {ui.live_run["name"], ui.done_run["name"]}, r["compare"]
    # The job was logging all along.
    assert ui.jobs.get(ui.live_job["id"])["status"] == "RUNNING"


def test_a_job_from_the_submit_dialog_streams_its_log_and_is_cancelled(ui):
    name = "ui-ticker"
    r = run_script(ui, "jobs", GPUPLANE_UI_CWD=str(ui.work), GPUPLANE_UI_SUBMIT_NAME=name)

    job = ui.jobs.get(r["job_id"])
    assert job["name"] == name and job["cwd"] == str(ui.work) and job["gpu"] == 0
    assert job["command"][:2] == ["sh", "-c"]
    assert job["status"] == "CANCELLED", job
    assert r["page_status"] == r["list_status"] == "cancelled"
    assert r["log_lines"]["later"] > r["log_lines"]["first"] >= 2
    shown = r["log_lines"]["later"]
    lines = ui.jobs.client.get(f"/api/v1/jobs/{job['id']}/logs?stream=stdout&tail=1000")["lines"]
    assert [line["line"] for line in lines][:shown] == [f"tick {i}" for i in range(shown)]
