"""Control characters in user strings (a job's or node's name) never reach a terminal raw:
every CLI table and ``show`` view, and the daemon's log, write them as escapes; ``--json``
keeps the string as it is."""

from __future__ import annotations

import json
import logging
import sys

import pytest
import trio
from helpers import wait_for
from jobhelpers import ctl, submit, wait_job
from trio_websocket import open_websocket_url

from gpuplaned.cli import PrintableFormatter
from gpuplaned.protocol.printable import printable, printable_lines

pytestmark = pytest.mark.e2e

NAME = "\x1b[31mred\x1b[0m\nforged line\t\u202eevil\x07"
ESCAPED = "\\x1b[31mred\\x1b[0m\\nforged line\\t\\u202eevil\\x07"
RAW = ("\x1b", "\x07", "\t", "\u202e", "\nforged")


def assert_escaped(text: str, shown: str = ESCAPED) -> None:
    assert shown in text, text
    for raw in RAW:
        assert raw not in text, (raw, text)


def test_printable_escapes_controls_and_keeps_other_text():
    assert printable(NAME) == ESCAPED
    assert printable("café 😀 日本 \\ ok") == "café 😀 日本 \\ ok"
    assert printable("\x00\x7f\x85\u2028\u200f") == "\\x00\\x7f\\x85\\u2028\\u200f"
    assert printable_lines("a\x1b\nb\r") == "a\\x1b\nb\\r"
    assert printable(printable(NAME)) == ESCAPED  # once escaped, nothing is left to escape


def test_a_job_name_shows_escaped_in_tables_and_views(gpu_daemon, tmp_path):
    job = submit(gpu_daemon, "--name", NAME, "--gpu", "1", "--dir", str(tmp_path), "--", "sleep", "30")
    assert job["name"] == NAME  # stored as given
    wait_job(gpu_daemon, job["id"], lambda j: j["status"] == "RUNNING", what="the job to run")
    for args in (["jobs"], ["job", "show", job["id"]], ["status"]):
        done = ctl(gpu_daemon, *args)
        assert done.returncode == 0, done.stderr
        assert_escaped(done.stdout)
    top = ctl(gpu_daemon, "top", "--once")  # a name column of its own, shortened to fit
    assert top.returncode == 0, top.stderr
    assert_escaped(top.stdout, ESCAPED[:12])
    shown = json.loads(ctl(gpu_daemon, "job", "show", "--json", job["id"]).stdout)["job"]
    assert shown["name"] == NAME
    cancelled = ctl(gpu_daemon, "job", "cancel", job["id"])
    assert cancelled.returncode == 0, cancelled.stderr
    assert_escaped(cancelled.stdout)


async def test_a_node_name_shows_escaped_in_the_daemons_log_and_the_node_list(gpu_daemon):
    client = gpu_daemon.client()
    url = client.get("/api/v1/daemon")["endpoints"]["http"].replace("http://", "ws://") + "/api/v1/agent/ws"
    token = client.post("/api/v1/tokens", {"name": "agent", "scopes": ["agent"]})["secret"]
    with trio.fail_after(10):
        async with open_websocket_url(url, extra_headers=[("Authorization", f"Bearer {token}")]) as ws:
            await ws.send_message(json.dumps({"type": "hello", "node_name": NAME, "agent_version": "0.1.0",
                                              "gpus": []}))
            assert json.loads(await ws.get_message())["type"] == "hello_ok"
    line = wait_for(lambda: [ln for ln in gpu_daemon.log().splitlines() if "agent hello from" in ln],
                    what="the hello in the log")[0]
    assert_escaped(line)
    assert "\x1b" not in gpu_daemon.log()
    listed = ctl(gpu_daemon, "node", "list")
    assert listed.returncode == 0, listed.stderr
    assert_escaped(listed.stdout)


def test_the_log_formatter_keeps_a_tracebacks_lines():
    try:
        raise ValueError("bad \x1b[2J value")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "job %s", (NAME,), exc_info=sys.exc_info())
    text = PrintableFormatter("%(name)s: %(message)s").format(record)
    first, *rest = text.split("\n")
    assert first == f"x: job {ESCAPED}"
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "ValueError: bad \\x1b[2J value"
