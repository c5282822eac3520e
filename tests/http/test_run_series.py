"""GET /api/v1/runs/{id}/series: one series' raw points in full, from a real daemon.

Every point comes back in x order, NaN and infinities included (null and listed in
``nonfinite`` as JSON numbers, exact with encoding=base64); pages joined through
``next_cursor`` are the full read; the reply fits the OpenAPI document.
"""

from __future__ import annotations

import base64
import math
from array import array

import pytest
from helpers import running_jobs
from test_openapi import Checker
from unixhttp import BASE_URL, unix_session

from gpuplaned.http import openapi
from gpuplaned.protocol.errors import ApiError, ErrorCode

pytestmark = pytest.mark.e2e

TEMPLATE = "/api/v1/runs/{run_id}/series"
T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """One daemon for the module: each test opens runs of its own and reads only those, so none
    needs a fresh daemon, whose start was most of such a test's time."""
    with running_jobs(tmp_path_factory.mktemp("series"), "--gpus=none") as jobs:
        yield jobs


@pytest.fixture
def session(jobs):
    s = unix_session(str(jobs.daemon.socket_path))
    yield s
    s.close()


def open_run(api, run_id=None):
    opened = api.post("/api/v1/sessions", {"run_id": run_id} if run_id else {})
    return opened["session_id"], opened["run_id"]


def send(api, sid, seq, name, steps, ts, values):
    api.post(f"/api/v1/sessions/{sid}/batches",
             {"seq": seq, "metrics": {name: {"step": list(steps), "ts": list(ts), "value": list(values)}}})


def same(a, b):
    return repr(a) == repr(b)  # NaN equals NaN in a repr


def decode(column, code):
    out = array(code)
    out.frombytes(base64.b64decode(column))
    return out.tolist()


def test_every_point_in_full_as_numbers_and_as_base64(api, session):
    sid, run_id = open_run(api)
    n = 25_000
    values = [1.0 / (s + 1) for s in range(n)]
    values[7], values[10], values[20_000] = math.nan, math.inf, -math.inf
    for seq, lo in enumerate(range(0, n, 5_000)):  # five chunks
        steps = range(lo, lo + 5_000)
        send(api, sid, seq, "train/loss", steps, [T0 + 10 * s for s in steps], values[lo:lo + 5_000])
    check = Checker(openapi.document()).check
    url = f"{BASE_URL}/api/v1/runs/{run_id}/series"
    full = check(session.get(url, params={"name": "train/loss"}), "GET", TEMPLATE, 200)
    assert (full["run_id"], full["name"], full["x_axis"], full["encoding"], full["count"]) == \
        (run_id, "train/loss", "step", "json", n)
    assert full["step"] == list(range(n)) and full["ts"] == [T0 + 10 * s for s in range(n)]
    assert full["value"] == [v if math.isfinite(v) else None for v in values]
    assert full["nonfinite"] == {"NaN": [7], "Infinity": [10], "-Infinity": [20_000]}
    assert full["next_cursor"] is None
    packed = check(session.get(url, params={"name": "train/loss", "encoding": "base64"}), "GET", TEMPLATE, 200)
    assert decode(packed["step"], "q") == full["step"] and decode(packed["ts"], "q") == full["ts"]
    assert same(decode(packed["value"], "d"), values) and packed["nonfinite"] == full["nonfinite"]
    some = check(session.get(url, params={"name": "train/loss", "columns": "value,step", "start": 10, "end": 19}),
                 "GET", TEMPLATE, 200)
    assert set(some) - {"run_id", "name", "x_axis", "encoding", "count", "nonfinite", "next_cursor"} == \
        {"step", "value"}
    assert some["step"] == list(range(10, 20)) and some["value"] == [None, *values[11:20]]
    assert some["nonfinite"] == {"NaN": [], "Infinity": [0], "-Infinity": []}  # indices in this page
    by_ts = check(session.get(url, params={"name": "train/loss", "x": "ts", "start": T0 + 95, "end": T0 + 130}),
                  "GET", TEMPLATE, 200)
    assert by_ts["x_axis"] == "ts" and by_ts["ts"] == [T0 + 100, T0 + 110, T0 + 120, T0 + 130]
    assert by_ts["value"] == [None, values[11], values[12], values[13]] and by_ts["nonfinite"]["Infinity"] == [0]
    check(session.get(url, params={"name": "nothing"}), "GET", TEMPLATE, 404)
    check(session.get(url, params={"name": "train/loss", "limit": 0}), "GET", TEMPLATE, 400)


def test_pages_joined_are_the_full_read_even_across_equal_steps(api):
    sid, run_id = open_run(api)
    # Steps repeat (several points per step), and a second batch overlaps the first in ts.
    send(api, sid, 0, "loss", [s // 4 for s in range(200)], [T0 + s for s in range(200)], [float(s) for s in range(200)])
    send(api, sid, 1, "loss", [10] * 30, [T0 + 5 + 2 * i for i in range(30)], [1000.0 + i for i in range(30)])
    for x in ("step", "ts"):
        full = api.get(f"/api/v1/runs/{run_id}/series?name=loss&x={x}")
        assert full["count"] == 230
        keys = [(s, t) for s, t in zip(full["step"], full["ts"])]
        assert keys == sorted(keys, key=lambda k: k[0] if x == "step" else k[1])
        for limit in (1, 3, 7, 50, 229, 230):
            got, cursor, pages = {"step": [], "ts": [], "value": []}, None, 0
            while True:
                page = api.get(f"/api/v1/runs/{run_id}/series?name=loss&x={x}&limit={limit}"
                               + (f"&cursor={cursor}" if cursor else ""))
                pages += 1
                assert page["count"] <= limit
                for k in got:
                    got[k] += page[k]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert got == {k: full[k] for k in got}, (x, limit)
            assert pages == -(-230 // limit)
    with pytest.raises(ApiError) as err:  # a cursor of one axis is refused on the other
        api.get(f"/api/v1/runs/{run_id}/series?name=loss&x=ts&cursor={page_cursor(api, run_id)}")
    assert err.value.code == ErrorCode.BAD_REQUEST and err.value.details["field"] == "cursor"


def page_cursor(api, run_id):
    return api.get(f"/api/v1/runs/{run_id}/series?name=loss&x=step&limit=1")["next_cursor"]


def test_a_resumed_run_comes_by_step_then_by_ts(api):
    sid, run_id = open_run(api)
    send(api, sid, 0, "loss", range(0, 100), [T0 + s for s in range(100)], [1.0] * 100)
    resumed, _ = open_run(api, run_id)  # back to step 50, later in time
    send(api, resumed, 0, "loss", range(50, 120), [T0 + 1000 + s for s in range(70)], [2.0] * 70)
    got = api.get(f"/api/v1/runs/{run_id}/series?name=loss&start=49&end=51")
    assert list(zip(got["step"], got["value"])) == [(49, 1.0), (50, 1.0), (50, 2.0), (51, 1.0), (51, 2.0)]
    by_ts = api.get(f"/api/v1/runs/{run_id}/series?name=loss&x=ts")
    assert by_ts["ts"] == sorted(by_ts["ts"]) and by_ts["count"] == 170


@pytest.mark.parametrize(("query", "field"), [
    ("", "name"),
    ("name=loss&x=epoch", "x"),
    ("name=loss&limit=0", "limit"),
    ("name=loss&limit=1000001", "limit"),
    ("name=loss&start=5&end=1", "start"),
    ("name=loss&start=-1", "start"),
    ("name=loss&end=x", "end"),
    ("name=loss&columns=step,wall", "columns"),
    ("name=loss&columns=", "columns"),
    ("name=loss&encoding=msgpack", "encoding"),
    ("name=loss&cursor=nope", "cursor"),
])
def test_bad_queries_name_their_parameter(api, query, field):
    sid, run_id = open_run(api)
    send(api, sid, 0, "loss", [0], [T0], [1.0])
    with pytest.raises(ApiError) as err:
        api.get(f"/api/v1/runs/{run_id}/series?{query}")
    assert err.value.code == ErrorCode.BAD_REQUEST and err.value.details["field"] == field, query


def test_unknown_runs_and_series_are_404(api):
    sid, run_id = open_run(api)
    for path in ("/api/v1/runs/run_nope/series?name=loss", f"/api/v1/runs/{run_id}/series?name=loss"):
        with pytest.raises(ApiError) as err:
            api.get(path)
        assert err.value.code == ErrorCode.NOT_FOUND
