"""Pure formatting and the daemon-home rule, without processes."""

import pytest
from gpuplanectl import render, render_nodes
from gpuplanectl.commands.daemon import daemon_home


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (12.9, "12s"), (59.99, "59s"), (60, "1m00s"), (185, "3m05s"), (3599, "59m59s"),
     (3600, "1h00m"), (3720, "1h02m"), (86399, "23h59m"), (90000, "1d01h"), (None, "-"), (-1, "-")],
)
def test_format_uptime(seconds, text):
    assert render.format_uptime(seconds) == text


def test_table_aligns_columns_and_does_not_pad_the_last():
    out = render.table(["A", "LONG HEADER", "C"], [["xxxx", "y", "last"], ["z", "", "-"]])
    assert out.splitlines() == [
        "A     LONG HEADER  C",
        "xxxx  y            last",
        "z                  -",
    ]


def test_actor_line_and_last_error():
    actor = {"name": "flaky", "state": "RUNNING", "uptime_s": 65.2, "restarts": 2,
             "last_error": "InjectedCrash: boom\nTraceback...", "last_error_at": 1_000_000}
    assert render.last_error_text(actor, now=1012.5) == "InjectedCrash: boom (12s ago)"
    line = render.actor_line(actor)
    assert line.startswith("flaky: RUNNING (up 1m05s, 2 restarts, last error: InjectedCrash: boom (")
    stopped = {"name": "store", "state": "STOPPED", "uptime_s": 0.0, "restarts": 1, "last_error": None}
    assert render.actor_line(stopped) == "store: STOPPED (1 restart)"


def test_daemon_home_follows_the_daemons_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    config = tmp_path / "gpuplaned.toml"
    config.write_text('home = "/srv/from-config"\n')
    xdg = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    (tmp_path / "xdg" / "gpuplane").mkdir(parents=True)
    (tmp_path / "xdg" / "gpuplane" / "gpuplaned.toml").write_text('home = "/srv/from-default-config"\n')

    env = {"GPUPLANE_HOME": "/srv/from-env", **xdg}
    assert str(daemon_home("/srv/flag", str(config), env)) == "/srv/flag"
    assert str(daemon_home(None, str(config), env)) == "/srv/from-env"
    assert str(daemon_home(None, str(config), xdg)) == "/srv/from-config"
    assert str(daemon_home(None, None, xdg)) == "/srv/from-default-config"
    assert daemon_home(None, None, {"XDG_CONFIG_HOME": str(tmp_path / "none")}) == (
        tmp_path / "user" / ".local" / "share" / "gpuplane")
    config.write_text("not toml [")
    assert daemon_home(None, str(config), {}) == tmp_path / "user" / ".local" / "share" / "gpuplane"


def test_exit_codes_for_api_errors():
    from gpuplanectl.exit_codes import for_error

    from gpuplaned.protocol.errors import ErrorCode

    assert for_error(ErrorCode.BAD_REQUEST) == 2
    assert {for_error(code) for code in ErrorCode if code is not ErrorCode.BAD_REQUEST} == {1}


# --- nodes, GPUs and events ------------------------------------------------------

NOW = 1_700_000_000.0
MS = int(NOW * 1000)


def _node(*, sampled: bool = True) -> dict:
    """A NODE as the API answers it: GPU 0 held by a job, GPU 1 used by a foreign process."""
    node = {
        "id": "nd_01", "name": "box", "status": "ONLINE", "connected": True, "labels": ["h100", "rack2"],
        "gpu_backend": "nvml", "gpu_backend_note": "driver 550.54", "max_cpu_jobs": 4, "cpu_jobs": 1,
        "last_heartbeat_at": MS - 2000, "accepting": False, "conditions": ["DISK_LOW"], "snapshot": None,
        "hardware": {"hostname": "box.lan", "platform": "Linux-6.1.0-x86_64", "cpu_count": 32, "memory_mb": 65536},
        "gpus": [{"index": 0, "model": "H100", "memory_mb": 81920, "owner_job_id": "job_a", "owner_job_name": "train"},
                 {"index": 1, "model": "H100", "memory_mb": 81920, "owner_job_id": None, "owner_job_name": None}],
    }
    if sampled:
        reading = {"uuid": "GPU-x", "model": "H100", "memory_total_mb": 81920, "temperature_c": 71.6,
                   "power_w": 612.2, "power_limit_w": 700.0, "sm_clock_mhz": 1980, "fan_pct": None}
        node["snapshot"] = {
            "ts": MS - 1000,
            "gpus": [
                {**reading, "index": 0, "utilization_pct": 93.4, "memory_used_mb": 40960, "throttle_reasons": ["sw_power_cap"],
                 "error": None, "owner_job_id": "job_a",
                 "processes": [{"pid": 4242, "gpu_memory_mb": 40000, "job_id": "job_a", "foreign": False}]},
                {**reading, "index": 1, "utilization_pct": 0.0, "memory_used_mb": 512, "throttle_reasons": ["idle"],
                 "error": None, "owner_job_id": None,
                 "processes": [{"pid": 999, "gpu_memory_mb": 100, "job_id": None, "foreign": True}]},
            ],
            "host": {"cpu_percent": 37.5, "load1": 1.5, "load5": 1.25, "load15": 1.0, "memory_used_mb": 16384,
                     "memory_total_mb": 65536, "swap_used_mb": None, "swap_total_mb": None,
                     "disks": [{"label": "data", "path": "/srv/gp", "used_bytes": 990 * 2**30, "free_bytes": 10 * 2**30,
                                "total_bytes": 1000 * 2**30}],
                     "net_rx_bytes": 5 * 2**20, "net_tx_bytes": 1536},
            "jobs": [{"job_id": "job_a", "gpu_indexes": [0], "gpu_memory_mb": 40000}],
            "blocked_gpus": [],
        }
    return node


@pytest.mark.parametrize(("used", "total", "compact", "text"), [
    (40960, 81920, False, "40.0/80.0 GiB"), (512, 81920, True, "0.5/80.0G"), (None, 81920, False, "-/80.0 GiB"),
    (300, 800, False, "300/800 MiB"), (2048, None, True, "2.0G"), (None, None, False, "-"),
])
def test_format_memory_pair(used, total, compact, text):
    assert render_nodes.format_memory_pair(used, total, compact=compact) == text


def test_small_formats():
    assert (render_nodes.format_pct(93.4), render_nodes.format_pct(None)) == ("93%", "-")
    assert (render_nodes.format_temp(71.6), render_nodes.format_power(612.2, 700.0), render_nodes.format_power(80, None)) == (
        "72C", "612/700 W", "80 W")
    assert [render.format_bytes(n) for n in (None, 0, 1023, 1536, 5 * 2**40)] == ["-", "0 B", "1023 B", "1.5 KiB",
                                                                                  "5.0 TiB"]


def test_gpu_status_table_with_and_without_a_sample():
    assert render_nodes.gpu_status_table([_node()]).splitlines() == [
        "NODE  GPU  MODEL  UTIL  MEMORY         TEMP  POWER      JOB",
        "box   0    H100   93%   40.0/80.0 GiB  72C   612/700 W  job_a (train)",
        "box   1    H100   0%    0.5/80.0 GiB   72C   612/700 W  -",
    ]
    assert render_nodes.gpu_status_table([_node(sampled=False)]).splitlines()[1:] == [
        "box   0    H100   -     -/80.0 GiB  -     -      job_a (train)",
        "box   1    H100   -     -/80.0 GiB  -     -      -",
    ]


def test_a_lost_gpu_is_not_free():
    node = _node()
    node["snapshot"]["gpus"][1].update(error="gpu_lost: fell off the bus", utilization_pct=None)
    assert render_nodes.free_gpus(node) == 0
    assert render_nodes.gpu_readings(node["gpus"][1], node["snapshot"]["gpus"][1])["util"] == "error"
    assert "GPU 1: gpu_lost: fell off the bus" in render_nodes.node_detail(node, now=NOW).splitlines()


def test_node_list_table_and_blocked_gpus():
    ok = {**_node(sampled=False), "name": "idle", "accepting": True, "conditions": []}
    assert render_nodes.node_list_table([_node(), ok]).splitlines() == [
        "NODE  STATUS  BACKEND  GPUS  FREE  CPU JOBS  CONDITIONS",
        "box   ONLINE  nvml     2     1     1/4       DISK_LOW (not accepting jobs)",
        "idle  ONLINE  nvml     2     1     1/4       -",
    ]
    blocked = _node()
    blocked["snapshot"]["blocked_gpus"] = [1]
    assert render_nodes.free_gpus(blocked) == 0
    assert "GPU 1: takes no new jobs for now" in render_nodes.node_detail(blocked, now=NOW).splitlines()
    assert render_nodes.hardware_text({}) == "-"


def test_node_detail():
    lines = render_nodes.node_detail(_node(), now=NOW).splitlines()
    assert lines[:8] == [
        "node:        box (nd_01)",
        "status:      ONLINE, not accepting jobs (DISK_LOW)",
        "labels:      h100, rack2",
        "hardware:    32 CPUs, 64 GiB memory, Linux-6.1.0-x86_64 (box.lan)",
        "gpu backend: nvml (driver 550.54)",
        "cpu jobs:    1 of 4",
        f"heartbeat:   {render.event_time(MS - 2000)} (2s ago)",
        f"sampled:     {render.event_time(MS - 1000)} (1s ago)",
    ]
    text = "\n".join(lines)
    assert ("GPU  MODEL  UTIL  MEMORY         TEMP  POWER      SM CLOCK  FAN  JOB\n"
            "0    H100   93%   40.0/80.0 GiB  72C   612/700 W  1980 MHz  -    job_a (train)\n"
            "1    H100   0%    0.5/80.0 GiB   72C   612/700 W  1980 MHz  -    -\n"
            "GPU 0: throttled (sw_power_cap)\n") in text  # "idle" is no news
    assert ("GPU  PID   GPU MEMORY  JOB\n"
            "0    4242  39.1 GiB    job_a\n"
            "1    999   100 MiB     foreign\n") in text
    assert "cpu:     38%, load 1.50 1.25 1.00\nmemory:  16.0/64.0 GiB\nswap:    -\n" in text
    assert "data  /srv/gp  990.0 GiB  10.0 GiB  1000.0 GiB  99%" in text

    bare = render_nodes.node_detail(_node(sampled=False), now=NOW)
    assert "sampled:     not yet" in bare
    assert bare.endswith("GPU processes: not sampled yet\n\nhost: not sampled yet")


def test_event_table_is_oldest_first_and_lines_are_fixed_width():
    # As the API lists them: newest first.
    events = [
        {"id": "ev_2", "ts": MS, "type": "DISK_OK", "severity": "info", "node_id": "nd_01", "job_id": None,
         "run_id": None, "message": "disk data is back to 20% free", "context": {}},
        {"id": "ev_1", "ts": MS - 60_000, "type": "DISK_LOW", "severity": "critical", "node_id": "nd_01",
         "job_id": None, "run_id": None, "message": "disk data\nhas 1% free", "context": {}},
    ]
    lines = render.event_table(events, {"nd_01": "box"}).splitlines()
    assert lines == [
        "TIME                 SEVERITY  TYPE      NODE  JOB  MESSAGE",
        f"{render.event_time(MS - 60_000)}  critical  DISK_LOW  box   -    disk data has 1% free",
        f"{render.event_time(MS)}  info      DISK_OK   box   -    disk data is back to 20% free",
    ]
    assert render.event_line(None).startswith("TIME                 SEVERITY  TYPE                   NODE")
    line = render.event_line({**events[1], "job_id": "job_x", "node_id": "nd_unknown"})
    assert line == (f"{render.event_time(MS - 60_000)}  critical  DISK_LOW               nd_unknown    job_x"
                    + " " * 27 + "disk data has 1% free")


def test_history_text_summarizes_the_buckets():
    def series(avg, high):
        return {"min": [None] * len(avg), "max": high, "avg": avg, "last": avg}

    metrics = {"node_id": "nd_01", "resolution": "raw", "start": 0, "end": 1, "x": [0, 1], "series": {
        "gpu0.utilization": series([40.0, 50.0], [60.0, 93.0]),
        "gpu0.memory_used_mb": series([1000, 2000], [30000, 40960]),
        "gpu1.utilization": series([None, None], [None, None]),
        "host.cpu_percent": series([10.0, None], [80.0, None]),
    }}
    assert render_nodes.history_text(metrics).splitlines() == [
        "last hour:",
        "GPU  UTIL AVG  UTIL MAX  MEMORY MAX",
        "0    45%       93%       40 GiB",
        "1    -         -         -",
        "host: cpu avg 10%, max 80%; memory max -",
    ]
    assert render_nodes.history_text({"series": {"gpu0.utilization": series([None], [None])}}) is None


@pytest.mark.parametrize(("attempt", "most", "text"), [
    (1, 1, "1"), (2, 1, "2 (1 retry)"), (3, 1, "3 (2 retries)"),  # manual retries: never "3 of 1"
    (1, 3, "1 of 3"), (3, 3, "3 of 3"), (5, 3, "5 (4 retries; the retry policy allows 3)"),
])
def test_the_attempt_in_job_show_says_what_is_true(attempt, most, text):
    assert render.attempt_detail({"attempt": attempt, "max_attempts": most}) == text


@pytest.mark.parametrize(("status", "attempt", "most", "line", "detail"), [
    ("QUEUED", 0, 1, "attempt 1,", "1"), ("QUEUED", 0, 3, "attempt 1/3,", "1 of 3"),
    ("QUEUED", 1, 1, "attempt 2,", "2 (1 retry)"),  # queued again by `job retry`: it printed "attempt 1"
    ("QUEUED", 2, 3, "attempt 3/3,", "3 of 3"), ("RUNNING", 2, 3, "attempt 2/3,", "2 of 3"),
    ("FAILED", 3, 1, "attempt 3,", "3 (2 retries)"),
])
def test_a_waiting_job_shows_the_attempt_it_will_run_as(status, attempt, most, line, detail):
    job = {"id": "job_1", "name": "t", "status": status, "attempt": attempt, "max_attempts": most, "gpu": 1}
    assert f": {status}, {line}" in render.job_line(job)
    assert render.attempt_detail(job) == detail
