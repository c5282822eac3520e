"""SDK sessions against a real daemon: a batch is stored once whatever is resent, many
sessions (ranks) report to one run, and the run's series come back as chart columns."""

from __future__ import annotations

import pytest
from helpers import Jobs, running_jobs

from gpuplaned.protocol.errors import ApiError, ErrorCode

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """One daemon for the module: each test opens sessions and runs of its own and reads only
    those (the one that counts every run has a daemon of its own), so none needs a fresh daemon,
    whose start was most of such a test's time."""
    with running_jobs(tmp_path_factory.mktemp("sessions"), "--gpus=none") as jobs:
        yield jobs


def batch(seq: int, steps: range, name: str = "train/loss", value=lambda s: 1.0 / (s + 1)) -> dict:
    return {"seq": seq, "metrics": {name: {"step": list(steps), "ts": [1_000 + s for s in steps],
                                           "value": [value(s) for s in steps]}}}


def test_a_resent_batch_is_stored_once(api):
    opened = api.post("/api/v1/sessions", {"name": "resend", "project": "p", "experiment": "e"})
    sid, run_id = opened["session_id"], opened["run_id"]
    assert opened["session"]["status"] == "OPEN" and run_id.startswith("run_")
    assert api.post(f"/api/v1/sessions/{sid}/batches", batch(0, range(0, 100))) == \
        {"seq": 0, "duplicate": False, "points": 100}
    assert api.post(f"/api/v1/sessions/{sid}/batches", batch(0, range(0, 100)))["duplicate"] is True
    assert api.post(f"/api/v1/sessions/{sid}/batches", batch(1, range(100, 150)))["points"] == 50
    m = api.get(f"/api/v1/runs/{run_id}/metrics?names=train/*&points=1000")
    assert m["x"] == list(range(150)) and m["x_axis"] == "step" and m["width"] == 1
    assert m["series"]["train/loss"]["count"] == [1] * 150
    assert api.get(f"/api/v1/sessions/{sid}")["session"]["points"] == 150
    run = api.get(f"/api/v1/runs/{run_id}")["run"]
    assert (run["source"], run["status"], run["name"]) == ("sdk", "RUNNING", "resend")
    assert run["metric_sources"] == ["sdk"]


def test_ranks_share_a_run_which_ends_with_its_last_session(api):
    first = api.post("/api/v1/sessions", {"rank": 0})
    run_id = first["run_id"]
    second = api.post("/api/v1/sessions", {"run_id": run_id, "rank": 1})
    assert second["run_id"] == run_id and second["session_id"] != first["session_id"]
    api.post(f"/api/v1/sessions/{first['session_id']}/batches", batch(0, range(0, 10), "rank0/loss"))
    api.post(f"/api/v1/sessions/{second['session_id']}/batches", batch(0, range(0, 10), "rank1/loss"))
    m = api.get(f"/api/v1/runs/{run_id}/metrics")
    assert set(m["series"]) == {"rank0/loss", "rank1/loss"}
    api.post(f"/api/v1/sessions/{first['session_id']}/finish", {"status": "SUCCEEDED"})
    assert api.get(f"/api/v1/runs/{run_id}")["run"]["status"] == "RUNNING"  # rank 1 is still going
    api.post(f"/api/v1/sessions/{second['session_id']}/finish", {"status": "FAILED"})
    assert api.get(f"/api/v1/runs/{run_id}")["run"]["status"] == "FAILED"
    listed = api.get(f"/api/v1/runs/{run_id}/sessions")["sessions"]
    assert [(s["id"], s["rank"], s["status"], s["points"]) for s in listed] == \
        [(first["session_id"], 0, "SUCCEEDED", 10), (second["session_id"], 1, "FAILED", 10)]
    with pytest.raises(ApiError) as err:
        api.get("/api/v1/runs/run_nope/sessions")
    assert err.value.code == ErrorCode.NOT_FOUND
    with pytest.raises(ApiError) as err:
        api.post(f"/api/v1/sessions/{second['session_id']}/batches", batch(1, range(10, 20)))
    assert err.value.code == ErrorCode.CONFLICT and "finished" in err.value.message


def test_a_named_run_id_is_created_then_joined(daemon_factory, tmp_path):
    api = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none").client  # it counts every run
    made = api.post("/api/v1/sessions", {"run_id": "my-run.1"})
    assert made["run_id"] == "my-run.1"
    assert api.post("/api/v1/sessions", {"run_id": "my-run.1"})["run_id"] == "my-run.1"
    assert len(api.get("/api/v1/runs")["runs"]) == 1


def test_nan_and_infinity_are_kept_and_reported(api):
    opened = api.post("/api/v1/sessions", {})
    values = [1.0, float("nan"), float("inf"), 0.5]
    body = {"seq": 0, "metrics": {"loss": {"step": [0, 1, 2, 3], "ts": [1, 2, 3, 4], "value": values}}}
    api.post(f"/api/v1/sessions/{opened['session_id']}/batches", body)
    loss = api.get(f"/api/v1/runs/{opened['run_id']}/metrics?names=loss")["series"]["loss"]
    assert loss["last"] == [1.0, None, None, 0.5] and loss["nan"] == [0, 1, 0, 0]


def test_downsampled_run_series_keep_the_spike(api):
    opened = api.post("/api/v1/sessions", {})
    spike = 7_777
    api.post(f"/api/v1/sessions/{opened['session_id']}/batches",
             batch(0, range(20_000), value=lambda s: 100.0 if s == spike else 1.0))
    m = api.get(f"/api/v1/runs/{opened['run_id']}/metrics?names=train/loss&points=100")
    loss = m["series"]["train/loss"]
    assert len(m["x"]) <= 100 and max(loss["max"]) == 100.0
    bucket = m["x"][loss["max"].index(100.0)]
    assert bucket <= spike < bucket + m["width"]
    window = api.get(f"/api/v1/runs/{opened['run_id']}/metrics?names=train/loss&start=100&end=199&points=1000")
    assert window["x"] == list(range(100, 200))
    by_time = api.get(f"/api/v1/runs/{opened['run_id']}/metrics?names=train/loss&x=ts&start=1000&end=1009")
    assert by_time["x"] == list(range(1000, 1010)) and by_time["x_axis"] == "ts"


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/api/v1/sessions", {"colour": "red"}, "colour"),
    ("/api/v1/sessions", {"run_id": "has space"}, "run_id"),
    ("/api/v1/sessions", {"rank": -1}, "rank"),
    ("/api/v1/sessions", {"tags": "a,b"}, "tags"),
    ("/api/v1/sessions", {"config": [1, 2]}, "config"),
    ("/api/v1/sessions", {"started_at": -1}, "started_at"),
    ("/api/v1/sessions", {"started_at": "yesterday"}, "started_at"),
    ("/api/v1/sessions", {"started_at": 1.5}, "started_at"),
])
def test_bad_session_bodies(api, path, body, field):
    with pytest.raises(ApiError) as err:
        api.post(path, body)
    assert err.value.code == ErrorCode.BAD_REQUEST and err.value.details["field"] == field


def test_bad_batches_store_nothing(api):
    opened = api.post("/api/v1/sessions", {})
    sid, run_id = opened["session_id"], opened["run_id"]
    bad = [
        ({"seq": -1, "metrics": {}}, "seq"),
        ({"seq": True, "metrics": {}}, "seq"),
        ({"seq": 0, "metrics": []}, "metrics"),
        ({"seq": 0, "metrics": {"loss": {"ts": [1], "value": [1.0]}}}, "metrics"),  # a run series needs steps
        ({"seq": 0, "metrics": {"loss": {"step": [1, 2], "ts": [1], "value": [1.0]}}}, "metrics"),
        ({"seq": 0, "metrics": {"loss": {"step": [1], "ts": [1], "value": ["x"]}}}, "metrics"),
    ]
    for body, field in bad:
        with pytest.raises(ApiError) as err:
            api.post(f"/api/v1/sessions/{sid}/batches", body)
        assert err.value.code == ErrorCode.BAD_REQUEST and err.value.details["field"] == field, body
    assert api.get(f"/api/v1/runs/{run_id}/metrics")["series"] == {}
    # The seq of a refused batch is not spent: the same seq with good points is stored.
    assert api.post(f"/api/v1/sessions/{sid}/batches", batch(0, range(3)))["duplicate"] is False
    for target, code in (("/api/v1/sessions/nope/batches", ErrorCode.NOT_FOUND),
                         (f"/api/v1/sessions/{sid}/finish", ErrorCode.BAD_REQUEST)):
        with pytest.raises(ApiError) as err:
            api.post(target, batch(1, range(3)) if "batches" in target else {"status": "GREAT"})
        assert err.value.code == code
    for query, field in (("x=epoch", "x"), ("window=1h", "window"), ("points=0", "points"), ("start=5&end=1", "start")):
        with pytest.raises(ApiError) as err:
            api.get(f"/api/v1/runs/{run_id}/metrics?{query}")
        assert err.value.code == ErrorCode.BAD_REQUEST and err.value.details["field"] == field, query
    with pytest.raises(ApiError) as err:
        api.get("/api/v1/runs/run_nope/metrics")
    assert err.value.code == ErrorCode.NOT_FOUND


def test_the_summary_and_loss_events_follow_the_batches(api):
    opened = api.post("/api/v1/sessions", {"name": "nan-run", "config": {"max_steps": 62}})
    sid, run_id = opened["session_id"], opened["run_id"]
    steady = [2.0 + 0.01 * (i % 3) for i in range(30)]
    api.post(f"/api/v1/sessions/{sid}/batches", {"seq": 0, "metrics": {
        "train/loss": {"step": list(range(30)), "ts": list(range(30)), "value": steady},
        "eval/acc": {"step": [10, 20], "ts": [10, 20], "value": [0.4, 0.7]}}})
    api.post(f"/api/v1/sessions/{sid}/batches", {"seq": 1, "metrics": {
        "train/loss": {"step": [30, 31], "ts": [30, 31], "value": [40.0, float("nan")]}}})
    api.post(f"/api/v1/sessions/{sid}/batches", {"seq": 1, "metrics": {  # a resend: no second event
        "train/loss": {"step": [30, 31], "ts": [30, 31], "value": [40.0, float("nan")]}}})
    summary = api.get(f"/api/v1/runs/{run_id}/summary")["summary"]
    assert summary["progress"] == {"step": 31, "max_steps": 62, "percent": 50.0, "epoch": None, "steps_per_s": 1000.0,
                                   "eta_s": 0.031, "eta_ts": 62}  # the ts are in ms: a step a ms
    assert [(w["type"], w["metric"]) for w in summary["health"]] == [("LOSS_NAN", "train/loss"),
                                                                     ("LOSS_SPIKE", "train/loss")]
    assert summary["metrics"]["eval/acc"]["best"] == {"step": 20, "value": 0.7}
    loss = summary["metrics"]["train/loss"]
    assert loss["count"] == 32 and loss["latest"]["value"] == "NaN" and loss["direction"] == "minimize"
    assert summary["warnings"] == ["train/loss was NaN at step 31"]
    events = api.get(f"/api/v1/events?run_id={run_id}")["events"]
    assert sorted((e["type"], e["severity"], e["step"]) for e in events) == [
        ("LOSS_NAN", "critical", 31), ("LOSS_SPIKE", "warning", 30)]
    evidence = {e["type"]: e["context"]["evidence"] for e in events}  # the points, by step
    assert evidence == {
        "LOSS_NAN": [{"kind": "metric", "run_id": run_id, "name": "train/loss", "steps": [31, 31], "values": ["NaN"]}],
        "LOSS_SPIKE": [{"kind": "metric", "run_id": run_id, "name": "train/loss", "steps": [30, 30],
                        "values": [40.0]}]}
    with pytest.raises(ApiError) as err:
        api.get("/api/v1/runs/run_nope/summary")
    assert err.value.code == ErrorCode.NOT_FOUND


def test_many_runs_in_one_query(api):
    made = []
    for n in range(3):
        opened = api.post("/api/v1/sessions", {"name": f"lr-{n}"})
        api.post(f"/api/v1/sessions/{opened['session_id']}/batches", batch(0, range(10 * (n + 1))))
        made.append(opened["run_id"])
    found = api.post("/api/v1/runs/metrics:query", {"run_ids": made, "names": ["train/loss"], "points": 100})
    assert [r["run_id"] for r in found["runs"]] == made
    assert [len(r["x"]) for r in found["runs"]] == [10, 20, 30]
    for body, field in (({"run_ids": []}, "run_ids"), ({"run_ids": made, "colour": 1}, "colour"),
                        ({"run_ids": made, "points": 0}, "points")):
        with pytest.raises(ApiError) as err:
            api.post("/api/v1/runs/metrics:query", body)
        assert err.value.code == ErrorCode.BAD_REQUEST and err.value.details["field"] == field
    with pytest.raises(ApiError) as err:
        api.post("/api/v1/runs/metrics:query", {"run_ids": [made[0], "run_nope"]})
    assert err.value.code == ErrorCode.NOT_FOUND


def test_a_run_takes_the_scripts_project_and_config_when_it_has_none(api):
    made = api.post("/api/v1/sessions", {"experiment": "lr-sweep", "config": {"lr": 0.1}, "tags": ["a"]})
    run = api.get(f"/api/v1/runs/{made['run_id']}")
    assert (run["run"]["project"], run["run"]["experiment"]) == ("default", "lr-sweep")  # the experiment's project
    assert run["project"]["name"] == "default" and (run["run"]["config"], run["run"]["tags"]) == ({"lr": 0.1}, ["a"])
    bare = api.post("/api/v1/sessions", {"run_id": "bare-run"})  # as a job's run: no project, no config
    assert api.get("/api/v1/runs/bare-run")["run"]["config"] == {}
    api.post("/api/v1/sessions", {"run_id": "bare-run", "project": "vision", "name": "resnet", "config": {"bs": 64}})
    joined = api.get("/api/v1/runs/bare-run")["run"]
    assert (joined["project"], joined["config"]) == ("vision", {"bs": 64}) and bare["run_id"] == "bare-run"
    api.post("/api/v1/sessions", {"run_id": "bare-run", "project": "other", "config": {"bs": 1}})  # the first wins
    again = api.get("/api/v1/runs/bare-run")["run"]
    assert (again["project"], again["config"]) == ("vision", {"bs": 64})
    listed = {r["id"]: r for r in api.get("/api/v1/runs")["runs"]}
    assert listed["bare-run"]["project"] == "vision" and listed[made["run_id"]]["experiment"] == "lr-sweep"


def test_packed_columns_are_stored_like_numbers_and_bad_ones_are_refused(api):
    import base64
    from array import array

    def b64(typecode, values):
        return base64.b64encode(array(typecode, values).tobytes()).decode()  # this machine is little-endian

    opened = api.post("/api/v1/sessions", {})
    sid, run_id = opened["session_id"], opened["run_id"]
    values = [0.5, float("nan"), float("-inf"), 1e308]
    packed = {"seq": 0, "encoding": "base64", "metrics": {"loss": {
        "step": b64("q", [0, 1, 2, 3]), "ts": b64("q", [10, 11, 12, 13]), "value": b64("d", values)}}}
    assert api.post(f"/api/v1/sessions/{sid}/batches", packed)["points"] == 4
    got = api.get(f"/api/v1/runs/{run_id}/series?name=loss&encoding=base64")
    back = array("d")
    back.frombytes(base64.b64decode(got["value"]))
    assert back[0] == 0.5 and back[1] != back[1] and back[2] == float("-inf") and back[3] == 1e308
    for cols, why in (({"step": "***", "ts": b64("q", [1]), "value": b64("d", [1.0])}, "not valid base64"),
                      ({"step": b64("q", [1]), "ts": b64("q", [1]), "value": "AAAA"}, "not a whole number"),
                      ({"step": [1], "ts": [1], "value": [1.0]}, "a base64 string")):
        with pytest.raises(ApiError) as err:
            api.post(f"/api/v1/sessions/{sid}/batches", {"seq": 1, "encoding": "base64", "metrics": {"x": cols}})
        assert err.value.details["field"] == "metrics" and why in err.value.message
    with pytest.raises(ApiError) as err:
        api.post(f"/api/v1/sessions/{sid}/batches", {"seq": 1, "encoding": "msgpack", "metrics": {}})
    assert err.value.details["field"] == "encoding"


def test_run_lists_leave_the_environment_snapshot_to_the_run_itself(api):
    opened = api.post("/api/v1/sessions", {})
    api.post(f"/api/v1/sessions/{opened['session_id']}/env", {"python": "3.11.7", "packages": {"torch": "2.13.0"}})
    assert api.get(f"/api/v1/runs/{opened['run_id']}")["run"]["env_snapshot"]["python"] == "3.11.7"
    assert api.get("/api/v1/runs")["runs"][0]["env_snapshot"] is None


def test_a_new_run_begins_when_the_script_says_it_began_never_later_than_now(api):
    """The SDK says when init() ran (``started_at``): a spooled run replayed later keeps that time."""
    import time

    before = int(time.time() * 1000)
    past = api.post("/api/v1/sessions", {"name": "spooled", "started_at": before - 3_600_000})
    run = api.get(f"/api/v1/runs/{past['run_id']}")["run"]
    assert run["created_at"] == before - 3_600_000 and past["session"]["created_at"] == before - 3_600_000
    ahead = api.post("/api/v1/sessions", {"name": "fast clock", "started_at": before + 86_400_000})
    created = api.get(f"/api/v1/runs/{ahead['run_id']}")["run"]["created_at"]
    assert before <= created <= int(time.time() * 1000)  # a clock ahead of the daemon's: now
    joined = api.post("/api/v1/sessions", {"run_id": past["run_id"], "started_at": before})  # another rank
    assert api.get(f"/api/v1/runs/{joined['run_id']}")["run"]["created_at"] == before - 3_600_000
