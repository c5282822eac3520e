"""The web UI in a real browser: headless Debian chromium driven by web/e2e/*.mjs (node and
playwright-core) against a real gpuplaned with two fake GPUs and a job that logs metrics
with the SDK; and, in a test of its own, a ``--role server`` daemon with one remote agent
(``tests/remote_cluster.py``) whose link the Nodes and job pages show.

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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import DaemonProcess, Jobs, kill_processes_with_env, wait_for
from webhook_receiver import Receiver

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
    for package in ("playwright-core", "axe-core"):
        if not (WEB / "node_modules" / package / "package.json").is_file():
            return f"web/node_modules is missing {package}: run `npm ci` in web/ (`make test` does)"
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


def _require_browser() -> None:
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: the browser tests are skipped on purpose")
    missing = _missing()
    if missing:
        pytest.fail(f"the web UI's browser tests cannot run: {missing} (or set {SKIP_ENV}=1 to skip them)",
                    pytrace=False)


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


@contextmanager
def browser_daemon(root: Path, gpus: str, token_name: str) -> Iterator[tuple[DaemonProcess, Jobs, str, str]]:
    """A daemon of its own with ``gpus`` fake GPUs, its node up: it, its jobs, its HTTP address and a
    read-write token's secret; killed with every process it started on the way out."""
    _require_browser()
    daemon = DaemonProcess(root / "d", "--gpus", gpus)
    try:
        daemon.start()
        daemon.wait_ready()
        jobs = Jobs(daemon, root / "work")
        jobs.wait_node()
        url = daemon.client().get("/api/v1/daemon")["endpoints"]["http"]
        assert url and url.startswith("http://127.0.0.1:"), url
        made = daemon.run_ctl("token", "create", token_name, "--scope", "read,write", "--json")
        assert made.returncode == 0, made.stderr
        yield daemon, jobs, url, json.loads(made.stdout)["secret"]
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("ui")
    with browser_daemon(root, "fake:2", "ui-e2e") as (daemon, jobs, url, token):
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


def run_script(ui: UI, name: str, **env: str) -> dict:
    """``node web/e2e/NAME.mjs`` against the module's daemon; its JSON line, once it passed."""
    return run_script_on(ui.daemon, ui.url, ui.token, name, **env)


def run_script_on(daemon: DaemonProcess, url: str, token: str, name: str, limit_s: float = SCRIPT_LIMIT_S,
                  **env: str) -> dict:
    """``node web/e2e/NAME.mjs`` against the daemon whose HTTP front is ``url``; its JSON line, once it passed."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANE_")}
    full.update(GPUPLANE_UI_URL=url, GPUPLANE_UI_TOKEN=token, GPUPLANE_UI_SHOTS=str(SHOTS),
                GPUPLANE_CHROMIUM=CHROMIUM, **env)
    (SHOTS / f"failure-{name}.png").unlink(missing_ok=True)  # a failure's screenshot, from an earlier run
    # Its own process group: on a timeout the browser goes with it.
    proc = subprocess.Popen(["node", str(E2E / f"{name}.mjs")], cwd=WEB, env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{name}.mjs ran past {limit_s} s\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"{name}.mjs printed no result (exit {proc.returncode})\nstdout: {out[-2000:]}\nstderr: {err[-3000:]}"
    result = json.loads(lines[-1])
    assert proc.returncode == 0 and result["ok"], (
        f"{name}.mjs failed (exit {proc.returncode}):\n" + "\n".join(f"- {f}" for f in result["failures"])
        + f"\nstderr: {err[-2000:]}\ndaemon log:\n{daemon.log()[-3000:]}")
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

    names = ["dashboard", "jobs", "job", "runs", "run", "sweeps", "compare", "nodes", "events"]
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
    assert r["nodes"]["link"] == "local" and "Link" not in r["nodes"]["heads"], r["nodes"]
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
    assert r["log_source"] == "live"
    shown = r["log_lines"]["later"]
    lines = ui.jobs.client.get(f"/api/v1/jobs/{job['id']}/logs?stream=stdout&tail=1000")["lines"]
    assert [line["line"] for line in lines][:shown] == [f"tick {i}" for i in range(shown)]


def test_a_metrics_star_sets_and_unsets_the_experiments_primary_metric(ui):
    api = ui.jobs.client
    assert api.get("/api/v1/primary-metric")["primary_metric"]["metric"] is None
    r = run_script(ui, "primary", GPUPLANE_UI_RUN_ID=ui.done_run["id"], GPUPLANE_UI_METRIC="acc")

    before, starred, cleared = r["before"], r["set"], r["cleared"]
    assert (before["pressed"], before["text"]) == ("false", "☆")
    assert before["title"] == "Make acc the primary metric of experiment live: it ranks the checkpoints"
    assert (starred["pressed"], starred["text"]) == ("true", "★")
    assert starred["title"] == "acc is the primary metric of experiment live; click to unset it"
    assert starred["headline"][0] == "acc★"  # the headline leads with the primary metric
    assert starred["api"]["settings"] == {"experiment": "acc", "project": None, "global": None}
    assert (cleared["pressed"], cleared["text"]) == ("false", "☆")
    assert cleared["api"]["metric"] is None
    assert r["levels"] == ["☆ experiment", "☆ project", "☆ global"]
    assert r["set_global"] == {"experiment": None, "project": None, "global": "acc"}
    assert r["set_project"] == {"experiment": None, "project": "acc", "global": "acc"}
    assert r["levels_cleared"] == {"experiment": None, "project": None, "global": None}
    assert r["problems"] == []
    # Nothing is left set for the other tests: the live run of the experiment has no primary metric.
    summary = api.get(f"/api/v1/runs/{ui.live_run['id']}/summary")["summary"]
    assert summary["primary_metric"] is None


# A finished run's files, imported with `gpuplanectl run import`: a TensorBoard loss whose best
# is at step 8, checkpoints at steps 5 and 10 (torch.save) and an HF checkpoint-12/.
IMPORTED = """
import json, os, sys, torch
from torch.utils.tensorboard import SummaryWriter
root = sys.argv[1]
with SummaryWriter(os.path.join(root, "runs")) as writer:
    for step in range(13):
        writer.add_scalar("loss", (step - 8) ** 2 / 100 + 0.1, step)
os.makedirs(os.path.join(root, "checkpoints"))
model = torch.nn.Linear(4, 4)
for step in (5, 10):
    torch.save(model.state_dict(), os.path.join(root, "checkpoints", f"step_{step}.pt"))
hf = os.path.join(root, "outputs", "checkpoint-12")
os.makedirs(hf)
torch.save(model.state_dict(), os.path.join(hf, "pytorch_model.bin"))
with open(os.path.join(hf, "trainer_state.json"), "w") as f:
    json.dump({"global_step": 12, "epoch": 2.0}, f)
"""
# The evaluation of the best checkpoint: an EVALUATE job on a CPU slot that writes its metrics.
EVALUATE = "import json, os; json.dump({'acc': 0.75, 'em': 0.5}, open(os.environ['GPUPLANE_EVAL_RESULT'], 'w'))"
SOURCE_WORDS = {"tensorboard": "TensorBoard", "sdk": "SDK"}


def _evaluations_state(ui: UI, experiment_id: str) -> str:
    """What the experiment's evaluations list is: "missing" (no such endpoint), "none" or a count."""
    from gpuplaned.protocol.errors import ApiError

    try:
        found = ui.jobs.client.get(f"/api/v1/experiments/{experiment_id}/evaluations")["evaluations"]
    except ApiError as exc:
        if exc.message.startswith("no such endpoint"):
            return "missing"
        raise
    return str(len(found)) if found else "none"


def test_the_checkpoints_tab_and_the_experiments_evaluations(ui):
    root = ui.work / "imported-run"
    made = subprocess.run([sys.executable, "-c", IMPORTED, str(root)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    done = ui.daemon.run_ctl("import-run", str(root), "--project", "ui-e2e", "--experiment", "imported", "--json")
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    reply = ui.jobs.client.get(f"/api/v1/runs/{run_id}")
    best_id = ui.jobs.client.get(f"/api/v1/runs/{run_id}/checkpoints?metric=loss")["best_id"]
    evaluation = ui.jobs.client.post(f"/api/v1/checkpoints/{best_id}/evaluations", {
        "command": [sys.executable, "-c", EVALUATE], "cwd": str(ui.work), "gpu": 0, "suite": "mmlu", "dataset": "test"})
    job_id = evaluation["job"]["id"]
    assert ui.jobs.wait(job_id, timeout=30)["status"] == "SUCCEEDED"
    wait_for(lambda: ui.jobs.client.get(f"/api/v1/checkpoints/{best_id}/evaluations")["evaluations"][0]["status"]
             == "SUCCEEDED", 10, interval=0.05, what="the evaluation's result")
    api_rows = ui.jobs.client.get(f"/api/v1/runs/{run_id}/checkpoints?metric=loss")
    evals = _evaluations_state(ui, reply["experiment"]["id"])

    r = run_script(ui, "checkpoints", GPUPLANE_UI_RUN_ID=run_id, GPUPLANE_UI_EXPERIMENT_ID=reply["experiment"]["id"],
                   GPUPLANE_UI_EVALS=evals)

    tab = r["tab"]
    assert tab["headers"][:4] == ["Step", "Path", "Size", "Fingerprint"] and "loss" in tab["headers"], tab
    assert "Ranked by loss" in tab["note"]
    by_id = {c["id"]: c for c in api_rows["checkpoints"]}
    assert [by_id[row["id"]]["step"] for row in tab["rows"]] == [12, 10, 5]
    for row in tab["rows"]:
        ck = by_id[row["id"]]
        assert row["cells"][1] == ck["path"] and row["cells"][3] == ck["fingerprint"][:len("sha1:") + 8], row
    assert [row["id"] for row in tab["rows"] if row["best"]] == [api_rows["best_id"]]
    assert by_id[api_rows["best_id"]]["step"] == 10  # loss at step 10 (0.14) beats 5 (0.19) and 12 (0.26)
    sources = reply.get("metric_sources") or reply["run"].get("metric_sources")
    if sources:  # the daemon says where the points came from: the header says it too
        assert tab["source"] == "metrics: " + " + ".join(SOURCE_WORDS.get(s, s) for s in
                                                        [*(x for x in ("tensorboard", "sdk") if x in sources),
                                                         *(x for x in sources if x not in SOURCE_WORDS)])
    else:
        assert tab["source"] is None
    assert tab["details"]["Source"].startswith("imported"), tab["details"]
    best_row = next(row for row in tab["rows"] if row["best"])
    assert best_row["cells"][tab["headers"].index("Evaluations")] == "mmlu / test: acc 0.75 · em 0.5", best_row
    assert evals == "1"
    shown = r["evaluations"]
    assert (shown["state"], shown["experiment"], shown["project"]) == (evals, reply["experiment"]["id"], "ui-e2e")
    assert shown["headers"] == ["Checkpoint", "Evaluation", "Status", "acc", "em", "Runtime", "Finished"], shown
    first = shown["first"]
    assert first[0] == f"step 10{api_rows['checkpoints'][1]['path']}" and first[2:5] == ["succeeded", "0.75", "0.5"], first
    assert first[1].startswith("mmlu / test · job_"), first  # and a link to the EVALUATE job
    assert r["problems"] == []


def test_webhooks_settings_the_rule_filter_and_the_diagnosis_tab(ui):
    made = ui.daemon.run_ctl("token", "create", "ui-e2e-admin", "--scope", "admin", "--json")
    assert made.returncode == 0, made.stderr
    receiver = Receiver().start()
    try:
        r = run_script(ui, "notifications", GPUPLANE_UI_ADMIN_TOKEN=json.loads(made.stdout)["secret"],
                       GPUPLANE_UI_HOOK_URL=receiver.url, GPUPLANE_UI_RUN_ID=ui.live_run["id"])
    finally:
        receiver.stop()
    assert r["row"][1:6] == ["JOB_FAILED, OOM", "info", "slack", "yes", "0"], r["row"]
    assert r["test"] == "delivered (HTTP 200)"
    assert r["kept"] is True  # "Keep it" in the removal's confirmation kept the webhook
    headers, body = receiver.received[0]
    assert headers["X-GPUPlane-Event"] == "WEBHOOK_TEST" and json.loads(body)["text"]
    assert "RUN_STALLED" in r["rules"] and "OVERFITTING_SUSPECTED" in r["rules"]
    assert r["summary"]


# A sweep's trial: logs its loss (lower for a lower lr), then holds until the file named
# second exists (the test never makes it: the sweep is cancelled).
TRIAL = """
import os, sys, time, gpuplane
run = gpuplane.init()
for step in range(3):
    run.log({"loss": float(sys.argv[1]) * 10 + 1 / (1 + step)}, step=step)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.1)
run.finish()
"""


def test_the_sweeps_pages_show_the_trials_and_pause_resume_and_cancel_it(ui):
    hold = ui.work / "never-made"
    made = ui.jobs.client.post("/api/v1/sweeps", {
        "name": "ui-lr", "grid": {"lr": [0.3, 0.1, 0.03, 0.01]}, "max_parallel": 1, "metric": "loss", "goal": "min",
        "job": {"command": [sys.executable, "-c", TRIAL, "{lr}", str(hold)], "cwd": str(ui.work), "gpu": 0,
                "env": {"PYTHONPATH": str(SDK_DIR)}}})
    sweep = made["sweep"]
    trials = ui.jobs.client.get(f"/api/v1/sweeps/{sweep['id']}")["sweep"]["trials"]
    first = trials[0]["job_id"]
    wait_for(lambda: (ui.jobs.client.get(f"/api/v1/sweeps/{sweep['id']}")["sweep"]["best"] or {}).get("step") == 2, 30,
             interval=0.1, what="the first trial's three losses")

    r = run_script(ui, "sweeps", GPUPLANE_UI_SWEEP_ID=sweep["id"], GPUPLANE_UI_SWEEP_NAME=sweep["name"],
                   GPUPLANE_UI_TRIAL_JOB=first)

    assert r["list"]["status"] == "running"
    assert r["list"]["progress"] == "0 done · 1 running · 3 queued · 0 failed", r["list"]
    assert r["list"]["best"] == "3.333 · trial #0lr=0.3", r["list"]  # 0.3 * 10 + 1/(1 + 2), then its values
    assert r["headers"][:3] == ["#", "Status", "lr"] and r["headers"][3] == "loss best", r["headers"]
    assert [row[:3] for row in r["trials"]] == [["0", "running", "0.3"], ["1", "queued", "0.1"], ["2", "queued", "0.03"],
                                                ["3", "queued", "0.01"]], r["trials"]
    assert r["trials"][0][3] == "3.333", r["trials"][0]  # its best so far: step 2, 3 + 1/3
    assert "trial #0" in r["best_card"] and "lr0.3" in r["best_card"].replace(" ", ""), r["best_card"]
    assert r["paused"]["status"] == "paused" and r["paused"]["reason"] == "· paused: paused by user", r["paused"]
    assert "paused" in r["paused"]["note"] and sweep["name"] in r["paused"]["note"], r["paused"]
    assert r["resumed"] == "running"
    assert r["dialog_focus"] == {"text": "Cancel sweep", "inDialog": True}
    assert r["after_escape"] == {"focus": {"text": "Cancel sweep", "inDialog": False}, "status": "running"}
    assert [f["inDialog"] for f in r["tab_round"]] == [True, True, True]
    assert [f["text"] for f in r["tab_round"]] == ["Close", "Keep it", "Cancel sweep"]
    assert r["cancelled"] == "cancelled" and r["actions_after"] == [], r
    assert r["trial_link"] == {"text": "trial #0", "href": f"/sweeps/{sweep['id']}"}
    shown = ui.jobs.client.get(f"/api/v1/sweeps/{sweep['id']}")["sweep"]
    assert shown["status"] == "CANCELLED" and shown["cancelled_at"]
    assert {t["status"] for t in shown["trials"][1:]} == {"CANCELLED"}
    assert ui.jobs.wait(first, timeout=30)["status"] == "CANCELLED"
    assert r["problems"] == []


def test_a_jobs_dependencies_wait_reason_and_group_and_the_queue_levers_on_the_jobs_page(ui):
    hold = ui.work / "release-ui-dep-first"
    first = ui.jobs.sh(f"while [ ! -e {hold} ]; do sleep 0.1; done", name="ui-dep-first", gpu=0)
    first = ui.jobs.wait(first["id"], "RUNNING", timeout=30)
    second = ui.jobs.submit(["true"], name="ui-dep-second", gpu=0, group="ui-grp", after={"ids": [first["id"]]})
    assert second["status"] == "QUEUED"

    r = run_script(ui, "queue", GPUPLANE_UI_FIRST_ID=first["id"], GPUPLANE_UI_FIRST_NAME=first["name"],
                   GPUPLANE_UI_SECOND_ID=second["id"], GPUPLANE_UI_SECOND_NAME=second["name"], GPUPLANE_UI_GROUP="ui-grp")

    assert r["group_counts"] == "1 queued · 0 running", r
    assert (r["paused_api"], r["resumed_api"]) == (True, False)
    assert r["group_rows"] == ["ui-dep-second"]
    assert r["prio_focused"] and r["prio_disabled"]
    assert r["prio_error"] == "Priority must be a whole number, like 10 or -5"
    assert r["prio_api"] == 7 and r["still_on_jobs"]
    assert ui.jobs.get(second["id"])["priority"] == 7
    shown = r["second"]
    assert shown["wait"] == ui.jobs.get(second["id"])["queue_reason"] and first["id"] in shown["wait"], shown
    assert shown["group"] == "ui-grp" and shown["label"] == "Waits for (succeeded)", shown
    assert shown["dependency"] == {"href": f"/jobs/{first['id']}", "status": "running"}
    assert r["first_dependant"] == {"href": f"/jobs/{second['id']}", "status": "queued"}
    assert r["problems"] == []
    hold.touch()  # the first ends, and the second runs after it
    assert ui.jobs.wait(second["id"], timeout=30)["status"] == "SUCCEEDED"


# Two runs a new user would have (issue 33 item 4): long names with no place to break them,
# long config values that differ, eight metrics, checkpoints under a deep folder, and an
# event with a long message.
WIDE_RUNS = """
import os, sys, gpuplane
root = sys.argv[1]
names = ["train/loss", "train/accuracy", "eval/loss", "eval/accuracy", "eval/top5_accuracy", "lr", "grad_norm",
         "throughput_samples_per_second"]
for seed, optimizer in ((1234, "adamw_with_decoupled_weight_decay"), (5678, "sgd_with_nesterov_momentum_and_lars")):
    config = {"learning_rate": 0.0003 * seed, "batch_size": seed // 4, "optimizer": optimizer,
              "scheduler": f"cosine_with_hard_restarts_every_{seed}_steps", "data_dir": f"/datasets/imagenet/shards_{seed}"}
    name = f"resnet50_imagenet_lr3e-4_bs256_warmup2000_cosine_restarts_seed{seed}"
    run = gpuplane.init(project="ui_e2e_laptop_width", experiment="imagenet_resnet50_long_experiment_name",
                        name=name, config=config, tags=["baseline", "laptop", "wide-table"])
    folder = os.path.join(root, "outputs", "imagenet", name)
    os.makedirs(folder, exist_ok=True)
    for step in range(60):
        run.log({n: 1000.0 / (1 + step) + i for i, n in enumerate(names)}, step=step)
        if step % 20 == 19:
            path = os.path.join(folder, f"checkpoint_step_{step:06d}_of_resnet50_with_a_long_file_name.safetensors")
            open(path, "wb").write(b"0" * 1024)
            run.log_checkpoint(path, step=step)
    run.log_event("a phase with a long name: " + "evaluation_on_the_held_out_set_" * 5, {"where": "x" * 300},
                  severity="warning", step=59)
    run.finish()
print(run.id, flush=True)
"""


def test_the_tables_and_the_run_header_fit_a_laptops_width(ui):
    sdk_env = {k: v for k, v in ui.daemon.env.items()}
    sdk_env["PYTHONPATH"] = str(SDK_DIR)
    made = subprocess.run([sys.executable, "-c", WIDE_RUNS, str(ui.work / "wide")], env=sdk_env, capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    run_id = made.stdout.strip()
    long_name = "preprocess_imagenet_shards_into_webdataset_tar_files_for_the_resnet50_sweep"
    job = ui.jobs.submit(["sh", "-c", "echo " + "a-long-argument-to-the-preprocessing-script " * 6], name=long_name, gpu=0)
    ui.jobs.wait(job["id"], timeout=30)
    wait_for(lambda: len(ui.jobs.client.get(f"/api/v1/runs/{run_id}/checkpoints")["checkpoints"]) == 3, 10,
             interval=0.05, what="the wide run's checkpoints")

    pages = [
        {"name": "jobs", "path": "/jobs", "table": ".table", "text": long_name},
        {"name": "runs", "path": "/runs", "table": ".runs-table", "rows": 4},
        {"name": "events", "path": "/events", "table": ".events-table", "text": "a phase with a long name"},
        {"name": "checkpoints", "path": f"/runs/{run_id}?tab=checkpoints", "table": ".checkpoints-table", "rows": 3},
        # Seen a day later, the start time has its date ("Dec 6, 10:27:07 AM").
        {"name": "run-header", "path": f"/runs/{run_id}", "unclipped": ".headline .stat > b",
         "text": "resnet50_imagenet", "days_later": 1},
    ]
    r = run_script(ui, "layout", GPUPLANE_UI_LAYOUT=json.dumps(pages))

    for name, m in r["pages"].items():
        assert m["viewport"] == 1280 and m["page"]["scrollWidth"] <= m["page"]["clientWidth"], (name, m)
    started = [u for u in r["pages"]["run-header"]["unclipped"] if ":" in u["text"]]
    assert started, r["pages"]["run-header"]  # the start time is among the texts that must show whole
    assert r["problems"] == []


def test_settings_tokens_with_their_budget_and_revoke_and_the_audit_log(ui):
    made = ui.daemon.run_ctl("token", "create", "ui-e2e-settings", "--scope", "admin", "--json")
    assert made.returncode == 0, made.stderr
    budgeted = ui.jobs.client.post("/api/v1/tokens", {"name": "ui-budget", "scopes": ["write"], "limits": {
        "gpu_hours": 10, "max_gpus_per_job": 1, "max_queued_jobs": 5}})["token"]

    r = run_script(ui, "settings", GPUPLANE_UI_ADMIN_TOKEN=json.loads(made.stdout)["secret"],
                   GPUPLANE_UI_BUDGET_NAME="ui-budget")

    assert r["row"][1:3] == ["write", "≤ 1 GPU a job · ≤ 5 queued"], r["row"]
    assert r["budget"] == "10 of 10 GPU-h left (0 used)"
    assert r["kept"] == "active"
    assert r["revoked"] == {"state": "revoked", "buttons": 0}
    listed = {t["name"]: t for t in ui.jobs.client.get("/api/v1/tokens")["tokens"]}
    assert listed["ui-budget"]["revoked_at"] and listed["ui-budget"]["id"] == budgeted["id"]
    when, caller, action, outcome, arguments = r["revoke"]
    assert (caller, action, outcome) == ("browser session · rest", "POST /api/v1/tokens/<id_or_name>/revoke", "ok"), r["revoke"]
    assert budgeted["id"] in arguments
    assert r["filtered_callers"] == ["local · rest"]  # the tokens were made over the control socket
    assert r["problems"] == []


def test_a_remote_nodes_link_on_the_nodes_page_and_its_jobs_log_source(tmp_path):
    """A ``--role server`` daemon's UI and one agent (``tests/remote_cluster.py``): the Nodes page shows
    the agent's link attached, and its job's page says the log is live; after a kill -9 of the agent
    the link is detached and the job's page says it has only the tail, still showing it."""
    _require_browser()
    from remote_cluster import Cluster

    cluster = Cluster(tmp_path / "remote")
    try:
        agent = cluster.agent("gpu-a", cluster.token("agents", ["agent"]))
        token = cluster.token("ui-remote", ["read"])
        script = 'i=0; while true; do echo "tick $i"; i=$((i+1)); sleep 0.2; done'
        job = cluster.api.post("/api/v1/jobs", {"command": ["sh", "-c", script], "cwd": str(tmp_path), "gpu": 0,
                                                "node": agent.name, "name": "remote-ticker"})["job"]
        job = cluster.wait_job(job["id"], "RUNNING")
        wait_for(lambda: ((agent.node() or {}).get("link") or {}).get("last_heartbeat_at"), 15, what="a heartbeat")
        wait_for(lambda: cluster.api.get(f"/api/v1/jobs/{job['id']}/logs?stream=stdout&tail=10")["lines"], 15,
                 what="the job's first lines on the server")
        phase = dict(GPUPLANE_UI_NODE_NAME=agent.name, GPUPLANE_UI_JOB_ID=job["id"], GPUPLANE_UI_JOB_NAME=job["name"])

        up = run_script_on(cluster.server, cluster.http_url, token, "remote", GPUPLANE_UI_PHASE="attached", **phase)
        assert up["nodes_row"]["Link"] == "attached" and up["nodes_row"]["Status"] == "online", up["nodes_row"]
        assert up["detail_link"] == "attached"
        assert up["job_node"] == {"text": "gpu-a", "href": "/nodes?node=gpu-a"}
        assert up["log_source"] == "live" and up["problems"] == []

        agent.daemon.kill()
        wait_for(lambda: agent.node()["status"] == "OFFLINE", 15, what="gpu-a OFFLINE")
        down = run_script_on(cluster.server, cluster.http_url, token, "remote", GPUPLANE_UI_PHASE="detached", **phase)
        assert down["nodes_row"]["Link"] == "detached" and down["nodes_row"]["Status"] == "offline", down["nodes_row"]
        assert down["log_source"] == "tail only: node gpu-a is offline"
        assert len(down["log_lines"]) >= len(up["log_lines"]) > 0  # the tail the server kept
        assert down["problems"] == []

        # `node forget` (issue 33 item 4): its events (the agent's silence, at least) still name it.
        node_id = agent.node()["id"]  # its job is LOST, which does not keep the node
        cluster.api.request("DELETE", f"/api/v1/nodes/{node_id}")
        assert node_id not in {n["id"] for n in cluster.api.get("/api/v1/nodes")["nodes"]}
        gone = run_script_on(cluster.server, cluster.http_url, token, "forgotten", GPUPLANE_UI_NODE_ID=node_id,
                             GPUPLANE_UI_NODE_NAME=agent.name)
        assert gone["subjects"] and set(gone["subjects"]) == {f"{agent.name} (forgotten)"}, gone
        assert gone["raw_ids"] is False and gone["problems"] == []
    finally:
        cluster.close()


# A run that logs ten points of loss each time a file burst-<n> appears in its folder, and
# nothing between: the browser test decides when points come.
BURSTS = """
import os, sys, time, gpuplane
run = gpuplane.init(project="ui-e2e", experiment="push", name="ui-push")
folder, step, burst = sys.argv[1], 0, 0
while True:
    if os.path.exists(os.path.join(folder, f"burst-{burst}")):
        for _ in range(10):
            run.log({"loss": 1 / (1 + step)}, step=step)
            step += 1
        print(f"burst {burst}: {step} points", flush=True)
        burst += 1
    time.sleep(0.02)
"""


def test_a_runs_chart_follows_its_metric_stream_and_polls_only_while_the_stream_is_down(ui):
    folder = ui.work / "bursts"
    folder.mkdir()
    (folder / "burst-0").touch()
    job = ui.jobs.submit([sys.executable, "-c", BURSTS, str(folder)], name="ui-push", gpu=0,
                         env={"PYTHONPATH": str(SDK_DIR)})
    ui.jobs.wait(job["id"], "RUNNING", timeout=30)
    run_id = wait_for(lambda: ui.jobs.get(job["id"])["run_id"], 30, interval=0.05, what="the job's run")
    wait_for(lambda: ui.jobs.client.get(f"/api/v1/runs/{run_id}/metrics?names=loss")["series"].get("loss"), 30,
             interval=0.1, what="the first burst's points")

    r = run_script(ui, "push", GPUPLANE_UI_RUN_ID=run_id, GPUPLANE_UI_BURST_DIR=str(folder))

    # The stream is up: no timer asks, neither the chart nor the headline's summary.
    assert r["quiet"]["chart_requests"] == r["quiet"]["summary_requests"] == 0, r["quiet"]
    pushed = r["pushed"]
    assert pushed["after"] > pushed["before"] and pushed["chart_requests"] >= 1 and pushed["summary_requests"] >= 1, pushed
    assert r["down"]["after"] > r["down"]["before"] and r["down"]["stream_tries"] >= 1, r["down"]
    assert r["back"]["chart_requests"] == r["back"]["summary_requests"] == 0, r["back"]  # open again: polling stopped
    assert r["problems"] == []
    ui.jobs.client.post(f"/api/v1/jobs/{job['id']}/cancel", {})


def test_every_page_meets_the_quality_bar_light_and_dark_at_a_laptops_and_a_phones_size(ui):
    """Issue 33 item 5, in one browser session (web/e2e/quality.mjs): every page, light and dark,
    at 1280x800 and 390x844, with no console error or failed request, no sideways scroll of the
    page and nothing serious from axe-core; rows reached and opened by keyboard, dialogs that keep
    and give back the focus. Last in the module, so the pages hold what the tests above made."""
    made = ui.daemon.run_ctl("token", "create", "ui-e2e-quality", "--scope", "admin", "--json")
    assert made.returncode == 0, made.stderr
    done = ui.work / "quality-sweep-go"
    done.touch()  # its trials finish at once: a finished sweep with its best
    sweep = ui.jobs.client.post("/api/v1/sweeps", {
        "name": "ui-quality", "grid": {"lr": [0.2, 0.02]}, "max_parallel": 2, "metric": "loss", "goal": "min",
        "job": {"command": [sys.executable, "-c", TRIAL, "{lr}", str(done)], "cwd": str(ui.work), "gpu": 0,
                "env": {"PYTHONPATH": str(SDK_DIR)}}})["sweep"]
    wait_for(lambda: ui.jobs.client.get(f"/api/v1/sweeps/{sweep['id']}")["sweep"]["status"] == "SUCCEEDED", 30,
             interval=0.1, what="the quality sweep's two trials")

    experiment = ui.jobs.client.get(f"/api/v1/runs/{ui.live_run['id']}")["experiment"]["id"]

    # About 80 page visits with axe: about a minute on 2 idle cores; room for a busy machine.
    r = run_script_on(ui.daemon, ui.url, json.loads(made.stdout)["secret"], "quality", limit_s=300,
                   GPUPLANE_UI_RUN_ID=ui.live_run["id"], GPUPLANE_UI_JOB_ID=ui.live_job["id"],
                   GPUPLANE_UI_RUN2_ID=ui.done_run["id"], GPUPLANE_UI_SWEEP_ID=sweep["id"],
                   GPUPLANE_UI_EXPERIMENT_ID=experiment)

    names = ["dashboard", "jobs", "job", "runs", *(f"run-{t}" for t in ("metrics", "diagnosis", "system", "events",
             "checkpoints", "details")), "compare", "events", "nodes", "checkpoints-evaluations", "sweeps", "sweep",
             "experiments", "short-link", "webhooks", "tokens", "audit", "signin", "not-found"]
    assert [(p["size"], p["theme"], p["name"]) for p in r["pages"]] == [
        (s, t, n) for s in ("1280", "390") for t in ("light", "dark") for n in names]
    for p in r["pages"]:
        assert p["problems"] == [] and p["axe"] == [] and p["overflow"] <= 0, p
        assert Path(p["shot"]).stat().st_size > 5_000, p
    kinds = {(k["page"], k["size"], next(kind for kind in ("dialog", "popovers", "table") if kind in k)) for k in r["keyboard"]}
    assert kinds == {(n, s, kind) for s in ("1280", "390") for n, kind in (
        ("jobs", "dialog"), ("jobs", "table"), ("job", "dialog"), ("runs", "table"), ("sweeps", "table"),
        ("experiments", "table"), ("experiments", "popovers"), ("tokens", "dialog"))}, kinds
    for k in r["keyboard"]:
        if "popovers" in k:
            assert all(v == {"overflow": 0, "closed": True, "focus_back": True} for v in k["popovers"].values()), k
        elif "dialog" in k:
            assert k["dialog"] == {**k["dialog"], "focus_in": True, "stayed": True, "closed": True, "focus_back": True}, k
        else:
            assert k["table"]["reached"] and k["table"]["landed"] != "/" + k["page"], k
    assert r["problems"] == [] and r["failures"] == []
