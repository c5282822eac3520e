"""``gpuplanectl start|stop|restart`` against a real daemon."""

import json


def _actor(daemon, name):
    return daemon.client().get(f"/api/v1/actors/{name}")["actor"]


def test_stop_start_restart_store(daemon):
    result = daemon.run_ctl("stop", "store")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "store: STOPPED (0 restarts)\n"
    assert _actor(daemon, "store")["state"] == "STOPPED"

    # start waits out startsecs, so it reports RUNNING rather than STARTING.
    result = daemon.run_ctl("start", "store")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("store: RUNNING (up ")
    assert _actor(daemon, "store")["state"] == "RUNNING"

    started_before = _started_at_most(daemon)
    result = daemon.run_ctl("restart", "store", "--json")
    assert result.returncode == 0, result.stderr
    actor = json.loads(result.stdout)["actor"]
    assert (actor["name"], actor["state"]) == ("store", "RUNNING")
    assert _started_at_least(daemon) > started_before  # a new incarnation, not the old one


# When the store started, on the daemon's own clock (its uptime). Two uptimes equal to the
# millisecond say nothing: a start and a restart each wait out startsecs, so both read about
# startsecs. The order of the two reads bounds the start time from one side or the other.
def _started_at_most(daemon):
    actor_uptime = _actor(daemon, "store")["uptime_s"]
    return daemon.client().get("/api/v1/daemon")["uptime_s"] - actor_uptime


def _started_at_least(daemon):
    daemon_uptime = daemon.client().get("/api/v1/daemon")["uptime_s"]
    return daemon_uptime - _actor(daemon, "store")["uptime_s"]


def test_start_no_wait_returns_while_starting(daemon):
    assert daemon.run_ctl("stop", "store").returncode == 0
    result = daemon.run_ctl("start", "store", "--no-wait", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["actor"]["state"] == "STARTING"


def test_stop_control_is_refused(daemon):
    result = daemon.run_ctl("stop", "control")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == "error: actor 'control' serves this API and cannot be stopped through it\n"
    assert _actor(daemon, "control")["state"] in ("STARTING", "RUNNING")  # untouched

    result = daemon.run_ctl("stop", "control", "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["error"]["code"] == "conflict"


def test_unknown_actor_is_named(daemon):
    result = daemon.run_ctl("restart", "nope")
    assert result.returncode == 1
    assert result.stderr.startswith("error: no actor named 'nope' (actors: control, store")

    result = daemon.run_ctl("start", "nope", "--json")
    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert (error["code"], error["details"]["actor"]) == ("not_found", "nope")
