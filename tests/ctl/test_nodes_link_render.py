"""How ``node list``, ``status`` and ``node show`` write a remote node's link (issue 18): its state,
last heartbeat as an age, the spool backlog and the clock skew; ``local`` for the server's own node,
and no link columns at all while every node is local."""

from __future__ import annotations

from gpuplanectl import render_nodes

NOW = 1_800_000_000.0
MS = int(NOW * 1000)


def _node(name: str, *, remote: bool, link: dict | None = None, heartbeat: int | None = None) -> dict:
    return {"id": f"nd_{name}", "name": name, "status": "ONLINE", "gpu_backend": "fake", "gpus": [], "cpu_jobs": 0,
            "max_cpu_jobs": 2, "conditions": [], "accepting": True, "snapshot": None, "labels": [], "hardware": {},
            "last_heartbeat_at": heartbeat, "remote": remote, "link": link}


def _link(state: str = "attached", **fields) -> dict:
    return {"state": state, "last_heard_at": MS - 1000, "last_heartbeat_at": MS - 3000, "backlog_records": 0,
            "backlog_bytes": 0, "skew_ms": 12, **fields}


def test_the_list_has_link_columns_once_a_node_is_remote():
    nodes = [_node("box", remote=False, heartbeat=MS),
             _node("gpu1", remote=True, link=_link()),
             _node("gpu2", remote=True, link=_link("detached", backlog_records=123_456, backlog_bytes=5 * 2**20,
                                                   skew_ms=-42_400, last_heartbeat_at=MS - 125_000)),
             _node("gpu3", remote=True, heartbeat=MS - 7000)]  # not heard from since the server started
    assert render_nodes.node_list_table(nodes, now=NOW).splitlines() == [
        "NODE  STATUS  BACKEND  GPUS  FREE  CPU JOBS  LINK      HEARTBEAT  BACKLOG           SKEW    CONDITIONS",
        "box   ONLINE  fake     0     0     0/2       local     -          -                 -       -",
        "gpu1  ONLINE  fake     0     0     0/2       attached  3s ago     0                 +12 ms  -",
        "gpu2  ONLINE  fake     0     0     0/2       detached  2m05s ago  123.5k / 5.0 MiB  -42 s   -",
        "gpu3  ONLINE  fake     0     0     0/2       detached  7s ago     -                 -       -",
    ]


def test_only_local_nodes_keep_the_narrow_list():
    header = render_nodes.node_list_table([_node("box", remote=False)], now=NOW).splitlines()[0]
    assert header == "NODE  STATUS  BACKEND  GPUS  FREE  CPU JOBS  CONDITIONS"


def test_the_parts():
    assert render_nodes.age_text(None, NOW) == "-"
    assert render_nodes.age_text(MS + 500, NOW) == "0s ago"  # the server's clock a little ahead of this one
    assert [render_nodes.count_text(n) for n in (0, 9999, 10_000, 999_999, 1_250_000)] == [
        "0", "9999", "10.0k", "1000.0k", "1.2M"]
    assert render_nodes.backlog_text(None) == "-"
    assert render_nodes.backlog_text({"backlog_records": None, "backlog_bytes": None}) == "-"
    assert render_nodes.backlog_text({"backlog_records": 17, "backlog_bytes": 2048}) == "17 / 2.0 KiB"
    assert [render_nodes.skew_text(v) for v in (None, 0, 12, -3, 9999, 10_000, -61_700)] == [
        "-", "+0 ms", "+12 ms", "-3 ms", "+9999 ms", "+10 s", "-62 s"]


def test_show_says_the_link_backlog_and_skew():
    def lines(node: dict) -> list[str]:
        shown = render_nodes.node_detail(node, now=NOW).splitlines()
        start = next(i for i, line in enumerate(shown) if line.startswith("link:"))
        return shown[start:shown.index("", start)]

    assert lines(_node("gpu1", remote=True, link=_link())) == [
        "link:        attached, last heard 1s ago",
        "backlog:     0 records not yet acknowledged",
        "clock skew:  +12 ms",
    ]
    assert lines(_node("gpu2", remote=True, link=_link("detached", backlog_records=40, backlog_bytes=4096))) == [
        "link:        detached, last heard 1s ago",
        "backlog:     40 records, 4.0 KiB at its last heartbeat",
        "clock skew:  +12 ms",
    ]
    assert lines(_node("gpu3", remote=True, link=_link(last_heartbeat_at=None, backlog_records=None,
                                                       backlog_bytes=None, skew_ms=None))) == [
        "link:        attached, last heard 1s ago",
        "backlog:     not known yet (no heartbeat)",
        "clock skew:  -",
    ]
    assert lines(_node("gpu4", remote=True)) == ["link:        detached (not heard from since the server started)"]
    assert lines(_node("box", remote=False)) == ["link:        local"]
