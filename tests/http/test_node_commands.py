"""Node commands and scheduling constraints on a real daemon (node ``box``, two fake GPUs of
"Fake GPU 80GB", 81920 MiB each): ``node drain|undrain`` through the CLI and REST (by name
and by id, audited), ``forget`` refusing a live node, and submits whose GPU constraint no
node meets waiting QUEUED with a reason that names it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers import DaemonProcess, kill_processes_with_env, wait_for

from gpuplaned.protocol.errors import ApiError

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    root = tmp_path_factory.mktemp("nodes")
    daemon = DaemonProcess(root / "d", "--gpus=fake:2", "--node-name", "box").start()
    try:
        daemon.wait_ready()
        wait_for(lambda: daemon.client().get("/api/v1/nodes")["nodes"], what="the node to register")
        (root / "work").mkdir()
        yield daemon, root / "work"
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


def ctl(daemon: DaemonProcess, *args: str) -> Any:
    return daemon.run_ctl(*args)


def submit(daemon: DaemonProcess, *args: str) -> dict[str, Any]:
    result = daemon.run_ctl("submit", "--json", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)["job"]


def wait_job(daemon: DaemonProcess, job_id: str, until: Any = None, what: str = "the job to end") -> dict[str, Any]:
    until = until or (lambda j: j["status"] in ("SUCCEEDED", "FAILED", "CANCELLED"))

    def reached() -> dict[str, Any] | None:
        job = daemon.client().get(f"/api/v1/jobs/{job_id}")["job"]
        return job if until(job) else None

    return wait_for(reached, timeout=20, interval=0.05, what=what)


def _passes(daemon: DaemonProcess) -> int:
    return daemon.client().get("/api/v1/actors/scheduler")["actor"]["stats"]["passes"]


def _after_two_passes(daemon: DaemonProcess) -> None:
    """Until the scheduler has run two whole passes from now: whatever they would place, is."""
    start = _passes(daemon)
    wait_for(lambda: _passes(daemon) >= start + 2, timeout=10, what="two scheduler passes")


def _node(daemon: DaemonProcess) -> dict:
    return daemon.client().get("/api/v1/nodes/box")["node"]


def test_drain_stops_new_jobs_running_ones_go_on_and_undrain_places_them(box):
    daemon, work = box
    running = submit(daemon, "--gpu", "1", "--dir", str(work), "--", "sleep", "60")
    running = wait_job(daemon, running["id"], lambda j: j["status"] == "RUNNING", what="the first job to run")

    drained = ctl(daemon, "node", "drain", "box")
    assert drained.returncode == 0, drained.stderr
    node_id = running["node_id"]
    assert drained.stdout == f"node box ({node_id}) drained: it gets no new jobs, its running jobs go on\n"
    node = _node(daemon)
    assert node["drained"] is True and node["accepting"] is False and "DRAINED" in node["conditions"]
    listed = ctl(daemon, "node", "list")
    assert "DRAINED (not accepting jobs)" in listed.stdout.splitlines()[1]
    again = ctl(daemon, "node", "drain", "--json", "box")  # draining a drained node changes nothing
    assert again.returncode == 0 and json.loads(again.stdout)["node"]["drained"] is True

    waiting = submit(daemon, "--gpu", "1", "--dir", str(work), "--", "true")
    assert waiting["status"] == "QUEUED"
    assert waiting["queue_reason"] == "every node that could run it is drained: box"
    _after_two_passes(daemon)
    assert daemon.client().get(f"/api/v1/jobs/{waiting['id']}")["job"]["status"] == "QUEUED"
    assert daemon.client().get(f"/api/v1/jobs/{running['id']}")["job"]["status"] == "RUNNING"

    # Undrained through REST, by id: the queued job runs at once.
    undrained = daemon.client().post(f"/api/v1/nodes/{node_id}/undrain")["node"]
    assert undrained["drained"] is False and "DRAINED" not in undrained["conditions"]
    done = wait_job(daemon, waiting["id"], what="the queued job to run once undrained")
    assert done["status"] == "SUCCEEDED" and done["queue_reason"] is None
    assert daemon.client().post(f"/api/v1/jobs/{running['id']}/cancel")["job"]["cancel_requested"]
    wait_job(daemon, running["id"], what="the first job to stop")

    entries = daemon.client().get("/api/v1/audit?limit=50")["entries"]
    actions = [(e["action"], e["arguments"]["path"].get("node"), e["outcome"]) for e in entries]
    assert ("POST /api/v1/nodes/<node>/drain", "box", "ok") in actions
    assert ("POST /api/v1/nodes/<node>/undrain", node_id, "ok") in actions


def test_unknown_node_and_forgetting_a_live_one_are_refused(box):
    daemon, _ = box
    for verb in ("drain", "undrain", "forget"):
        refused = ctl(daemon, "node", verb, "nope")
        assert refused.returncode == 1 and refused.stderr.startswith("error: no node 'nope'"), refused.stderr
    with pytest.raises(ApiError) as missing:
        daemon.client().post("/api/v1/nodes/nope/drain")
    assert missing.value.code.value == "not_found"
    node_id = _node(daemon)["id"]
    with pytest.raises(ApiError) as live:
        daemon.client().request("DELETE", f"/api/v1/nodes/{node_id}")
    assert live.value.code.value == "conflict" and "is online" in live.value.message
    refused = ctl(daemon, "node", "forget", "box")
    assert refused.returncode == 1 and "only an offline node can be forgotten" in refused.stderr
    assert _node(daemon)["id"] == node_id
    # The audit names the node it was asked to forget (a parameter named like a secret would be redacted).
    entries = daemon.client().get("/api/v1/audit?limit=50")["entries"]
    forgets = [e["arguments"]["path"] for e in entries if e["action"] == "DELETE /api/v1/nodes/<node>"]
    assert {"node": "box"} in forgets and {"node": node_id} in forgets


def test_a_constraint_no_node_meets_waits_queued_saying_which(box):
    daemon, work = box
    before = len(daemon.client().get("/api/v1/jobs")["jobs"])
    planned = ctl(daemon, "submit", "--dry-run", "--gpu-model", "a100", "--dir", str(work), "--", "true")
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.splitlines()[1:] == [
        "  no node has 1 GPU(s) whose model contains 'a100' (the most on one matching node: 0)",
        "dry run: nothing was queued"]
    assert planned.stdout.startswith("would wait in the queue at position ")
    placed = ctl(daemon, "submit", "--dry-run", "--gpu", "1", "--dir", str(work), "--", "true")
    assert placed.returncode == 0 and placed.stdout.startswith("would run now on node "), placed.stdout
    refused = ctl(daemon, "submit", "--dry-run", "--gpu", "64", "--dir", str(work), "--", "true")
    assert refused.returncode == 1 and refused.stdout.startswith("would be refused\n"), refused.stdout
    assert json.loads(ctl(daemon, "submit", "--dry-run", "--json", "--gpu", "64", "--dir", str(work), "--", "true"
                          ).stdout)["plan"]["would"] == "refuse"
    assert len(daemon.client().get("/api/v1/jobs")["jobs"]) == before
    model = ctl(daemon, "submit", "--gpu-model", "a100", "--dir", str(work), "--", "true")
    assert model.returncode == 0, model.stderr
    job_id, _, rest = model.stdout.partition(" ")
    assert rest == ("QUEUED: waits, no node has 1 GPU(s) whose model contains 'a100' "
                    "(the most on one matching node: 0)\n")
    memory = submit(daemon, "--gpu", "2", "--min-gpu-memory", "100GiB", "--dir", str(work), "--", "true")
    assert memory["min_gpu_memory_mb"] == 102400
    assert memory["queue_reason"] == ("no node has 2 GPU(s) with at least 102400 MiB of memory "
                                      "(the most on one matching node: 0)")
    # Both wait without holding a GPU: a job that fits runs past them.
    fits = submit(daemon, "--gpu", "2", "--gpu-model", "FAKE", "--min-gpu-memory", "80GiB", "--placement", "spread",
                  "--dir", str(work), "--", "true")
    assert (fits["gpu_model"], fits["min_gpu_memory_mb"], fits["placement"]) == ("FAKE", 81920, "spread")
    assert wait_job(daemon, fits["id"])["status"] == "SUCCEEDED"
    assert "gpu wants:  model ~ 'FAKE', >= 81920 MiB, spread\n" in ctl(daemon, "job", "show", fits["id"]).stdout
    _after_two_passes(daemon)
    for waiting in (job_id, memory["id"]):
        job = daemon.client().get(f"/api/v1/jobs/{waiting}")["job"]
        assert job["status"] == "QUEUED" and job["queue_reason"].startswith("no node has ")
        shown = ctl(daemon, "job", "show", "--json", waiting)
        assert json.loads(shown.stdout)["job"]["queue_reason"] == job["queue_reason"]
        text = ctl(daemon, "job", "show", waiting).stdout
        assert "waits:" in text and job["queue_reason"] in text
        daemon.client().post(f"/api/v1/jobs/{waiting}/cancel")


def test_bad_constraints_are_refused_naming_them(box):
    daemon, work = box
    refused = ctl(daemon, "submit", "--min-gpu-memory", "lots", "--dir", str(work), "--", "true")
    assert refused.returncode == 2
    assert "--min-gpu-memory 'lots': expected an amount like 40GiB, 24G or 16000 (MiB)" in refused.stderr
    refused = ctl(daemon, "submit", "--gpu", "0", "--gpu-model", "a100", "--dir", str(work), "--", "true")
    assert refused.returncode == 2 and "gpu_model" in refused.stderr and "gpu >= 1" in refused.stderr
    refused = ctl(daemon, "submit", "--placement", "scatter", "--dir", str(work), "--", "true")
    assert refused.returncode == 2 and "placement" in refused.stderr
    assert daemon.client().get("/api/v1/jobs?status=QUEUED")["jobs"] == []
