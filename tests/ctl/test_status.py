"""``gpuplanectl status`` against real daemons, and what happens when none runs."""

import json
import re

import pytest
from helpers import DaemonProcess, wait_for


def _row(out: str, actor: str) -> list[str]:
    """One actor's row of the status table, split into its columns."""
    line = next(line for line in out.splitlines() if line.split(" ", 1)[0] == actor)
    return re.split(r"\s{2,}", line)


def _all_running(daemon) -> None:
    # READY comes once every actor called started(); RUNNING after startsecs more.
    wait_for(lambda: all(a["state"] == "RUNNING" for a in daemon.client().get("/api/v1/actors")["actors"]),
             what="every actor RUNNING")


def test_status_text_and_json(daemon):
    _all_running(daemon)
    result = daemon.run_ctl("status")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"gpuplaned 0.1.0 (pid {daemon.pid}, role all): READY, up ")
    assert lines[0].endswith(f"unix://{daemon.socket_path}")
    header = next(line for line in lines if line.startswith("ACTOR"))
    assert re.split(r"\s{2,}", header) == ["ACTOR", "STATE", "UPTIME", "RESTARTS", "LAST ERROR"]
    for actor in ("control", "store"):
        name, state, uptime, restarts, last_error = _row(result.stdout, actor)
        assert (state, restarts, last_error) == ("RUNNING", "0", "-")
        assert re.fullmatch(r"\d+s|\d+m\d\ds", uptime)
    assert result.stderr == ""

    result = daemon.run_ctl("status", "--json")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert set(body) == {"daemon", "actors", "nodes", "queue"}
    info = body["daemon"]
    assert (info["pid"], info["state"], info["role"]) == (daemon.pid, "READY", "all")
    http_url = info["endpoints"].pop("http")
    assert info["endpoints"] == {"unix": str(daemon.socket_path), "tcp": None}
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", http_url)
    assert info["runtime_dir"] == str(daemon.runtime_dir)
    actors = {actor["name"]: actor for actor in body["actors"]}
    assert {"control", "store"} <= set(actors)
    store = actors["store"]
    assert (store["state"], store["restarts"], store["last_error"]) == ("RUNNING", 0, None)
    assert store["stats"]["schema_version"] >= 1


def test_status_shows_restarts_last_error_and_fatal(daemon_factory):
    daemon = daemon_factory(env={"GPUPLANE_TESTING_ACTORS": "flaky:2,doomed:99"}).start()
    daemon.wait_ready()

    def settled():
        actors = {a["name"]: a for a in daemon.client().get("/api/v1/actors")["actors"]}
        return actors["flaky"]["state"] == "RUNNING" and actors["doomed"]["state"] == "FATAL"

    wait_for(settled, what="flaky RUNNING and doomed FATAL")
    result = daemon.run_ctl("status", "--stats")
    assert result.returncode == 0, result.stderr
    name, state, _uptime, restarts, last_error, stats = _row(result.stdout, "flaky")
    assert (state, restarts) == ("RUNNING", "2")
    assert re.fullmatch(r"InjectedCrash: injected crash 2 of 2 \(\d+s ago\)", last_error)
    assert "starts=3" in stats
    name, state, uptime, _restarts, last_error, _stats = _row(result.stdout, "doomed")
    assert (state, uptime) == ("FATAL", "-")
    assert last_error.startswith("InjectedCrash: injected crash ")

    # Starting a FATAL actor that fails again is reported as a failure, with its error.
    result = daemon.run_ctl("start", "doomed")
    assert result.returncode == 1
    assert result.stdout.startswith("doomed: FATAL (")
    assert "error: actor 'doomed' did not start: it is FATAL; last error: InjectedCrash" in result.stderr


@pytest.mark.parametrize("args", [["status"], ["start", "store"], ["stop", "store"], ["shutdown"]])
def test_no_daemon_says_how_to_start_one(tmp_path, args):
    nobody = DaemonProcess(tmp_path / "nobody")  # its dirs, never started
    result = nobody.run_ctl(*args)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"error: no gpuplaned is running (no port-file in {nobody.runtime_dir})",
        "Start one with `gpuplanectl daemon` (in the background) or `gpuplaned` (in the foreground).",
    ]


def test_no_daemon_json_and_explicit_runtime_dir(tmp_path):
    nobody = DaemonProcess(tmp_path / "nobody")
    elsewhere = tmp_path / "elsewhere"
    result = nobody.run_ctl("--runtime-dir", str(elsewhere), "status", "--json")
    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "unavailable"
    assert error["details"]["reason"] == "no_daemon"
    assert error["details"]["runtime_dir"] == str(elsewhere)
    # The hint repeats --runtime-dir, or following it would start a daemon somewhere else.
    assert f"gpuplanectl --runtime-dir {elsewhere} daemon" in error["details"]["hint"]
    assert f"gpuplaned --runtime-dir {elsewhere}" in error["details"]["hint"]


def test_global_runtime_dir_option_finds_the_daemon(daemon):
    other = DaemonProcess(daemon.root.parent / "other")  # env points at an empty runtime dir
    result = other.run_ctl("--runtime-dir", str(daemon.runtime_dir), "status", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["daemon"]["pid"] == daemon.pid


def test_status_shows_each_gpus_readings_and_owner(daemon_factory, tmp_path):
    config = tmp_path / "gpuplaned.toml"
    config.write_text("[monitor]\nsample_interval_s = 0.2\n")
    daemon = daemon_factory("--gpus", "fake:2", "--node-name", "box", "--config", str(config)).start()
    daemon.wait_ready()
    wait_for(lambda: daemon.client().get("/api/v1/nodes")["nodes"], what="the node to register")
    job = daemon.client().post("/api/v1/jobs", {"command": ["sleep", "60"], "cwd": str(tmp_path), "name": "holder",
                                                "gpu": 1})["job"]

    def held() -> dict | None:
        node = daemon.client().get("/api/v1/nodes")["nodes"][0]
        gpus = (node.get("snapshot") or {}).get("gpus") or []
        owned = [g for g in gpus if g.get("owner_job_id") == job["id"] and (g.get("utilization_pct") or 0) > 0]
        return node if owned else None

    wait_for(held, timeout=20, what="a sample of the job's GPU at work")
    result = daemon.run_ctl("status")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("NODE  GPU")))
    assert re.split(r"\s{2,}", lines[header]) == ["NODE", "GPU", "MODEL", "UTIL", "MEMORY", "TEMP", "POWER", "JOB"]
    rows = [re.split(r"\s{2,}", line) for line in lines[header + 1:header + 3]]
    owned = next(row for row in rows if row[-1] != "-")
    assert owned[0] == "box" and owned[2] == "Fake GPU 80GB"
    assert re.fullmatch(r"\d+%", owned[3]) and owned[3] != "0%"
    assert re.fullmatch(r"\d+\.\d/80\.0 GiB", owned[4])
    assert re.fullmatch(r"\d+C", owned[5]) and re.fullmatch(r"\d+/700 W", owned[6])
    assert owned[7] == f"{job['id']} (holder)"
    idle = next(row for row in rows if row is not owned)
    assert idle[3] == "0%" and idle[-1] == "-"
    node_header = next(line for line in lines if line.startswith("NODE  STATUS"))
    assert re.split(r"\s{2,}", node_header) == ["NODE", "STATUS", "BACKEND", "GPUS", "FREE", "CPU JOBS", "CONDITIONS"]
