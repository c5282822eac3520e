"""The MCP server's pure parts: the policy table covers every tool (the server cannot be built
otherwise), the digests that bound a reply's tokens, task handles' poll intervals, and the
/mcp gate's answers before READY and while stopping."""

from __future__ import annotations

import json
from types import SimpleNamespace

import attrs
import pytest

from gpuplaned.lifecycle import DaemonState
from gpuplaned.mcp import asgi, digests, policy, server, tasks, tools
from gpuplaned.protocol import patterns
from gpuplaned.protocol.errors import ApiError
from gpuplaned.protocol.run_replies import Progress, RunSummary


def test_every_tool_has_a_policy_and_every_policy_a_tool():
    tools.check()
    assert set(policy.POLICY) == set(tools.BY_NAME)
    for name, line in policy.POLICY.items():
        assert line.scope == ("write" if line.family == "write" else "read"), name
        assert line.read_only is (line.family != "write") and not (line.read_only and line.destructive)


def test_a_tool_without_a_policy_cannot_be_served(monkeypatch):
    with pytest.raises(policy.PolicyGap, match="no policy for .'wait_for_events'"):
        policy.validate_coverage([*tools.BY_NAME], {k: v for k, v in policy.POLICY.items() if k != "wait_for_events"})
    monkeypatch.delitem(policy.POLICY, "list_nodes")
    with pytest.raises(policy.PolicyGap, match="list_nodes"):
        server.build_server(None)  # type: ignore[arg-type]


def test_a_destructive_tool_names_the_command_to_type_instead(monkeypatch):
    """Whom nobody can ask is told what to type (confirm's ways out): a destructive tool without it is not served."""
    assert {t.by_hand for t in tools.TOOLS if policy.POLICY[t.name].destructive} >= {
        "gpuplanectl job cancel JOB", "gpuplanectl job remove JOB", "gpuplanectl clean"}
    monkeypatch.setattr(tools, "TOOLS", [attrs.evolve(t, by_hand=None) if t.name == "remove_job" else t
                                         for t in tools.TOOLS])
    with pytest.raises(policy.PolicyGap, match=r"without by_hand: \['remove_job'\]"):
        tools.check()


def test_declarations_carry_the_policy_as_hints():
    declared = {t.name: server.tool_declaration(t) for t in tools.TOOLS}
    assert declared["cancel_job"].annotations.destructive_hint is True
    assert declared["get_job"].annotations.read_only_hint is True
    assert declared["submit_job"].annotations.idempotent_hint is False
    assert declared["evaluate_checkpoint"].input_schema["required"][-1] == "checkpoint_id"


def test_a_series_digest_keeps_extremes_and_their_steps():
    columns = {"min": [3.0, None, 1.0, 0.5], "max": [4.0, None, 2.0, 0.9], "avg": [3.5, None, 1.5, 0.7],
               "last": [3.2, None, 1.1, 0.6], "count": [10, 0, 10, 5], "nan": [0, 0, 0, 0]}
    got = digests.digest_series([0, 10, 20, 30], columns)
    assert attrs.asdict(got.stats) == {"count": 25, "first_step": 0, "last_step": 30, "min": 0.5, "min_step": 30,
                                       "max": 4.0, "max_step": 0, "last": 0.6, "trend": "falling"}
    assert (got.x, got.min, got.max) == ([0, 20, 30], [3.0, 1.0, 0.5], [4.0, 2.0, 0.9])
    level = {k: [1.0 + i / 1e4 for i in range(10)] for k in ("min", "max", "avg", "last")}
    flat = digests.digest_series(list(range(10)), {**level, "count": [1] * 10, "nan": [0] * 10})
    rising = digests.digest_series(list(range(10)), {**level, "avg": [float(i) for i in range(10)],
                                                     "count": [1] * 10, "nan": [0] * 10})
    assert (flat.stats.trend, rising.stats.trend) == ("flat", "rising")
    empty = digests.digest_series([], {k: [] for k in columns})
    assert empty.stats.count == 0 and empty.stats.trend == "unknown"
    assert digests.describe_series("loss", empty.stats) == "loss: no points"


def test_the_line_budget_keeps_the_last_matches():
    lines = [(i * 10, text) for i, text in enumerate(["a ok", "b error", "c ok", "d error", "e error"])]
    scan = patterns.scan_lines(lines, digests.compile_grep("error"), 2)
    assert (scan.found, scan.matched, scan.scanned, scan.stopped) == ([(30, "d error"), (40, "e error")], 3, 5, None)
    assert patterns.scan_lines(lines, None, 10) == patterns.Scan(lines, 5, 5, None)
    with pytest.raises(ApiError) as bad:
        digests.compile_grep("(oops")
    assert bad.value.details["field"] == "grep" and "not a regular expression" in bad.value.message


def test_poll_intervals_and_progress_words():
    job = SimpleNamespace(status="QUEUED", started_at=None)
    assert tasks.poll_interval_ms(job, 0) == tasks.QUICK_MS
    running = SimpleNamespace(status="RUNNING", started_at=0)
    assert tasks.poll_interval_ms(running, 1_000) == tasks.QUICK_MS
    assert tasks.poll_interval_ms(running, 10 * 60_000) == tasks.SLOW_MS
    progress = Progress(step=50, max_steps=100, percent=50.0, epoch=None, steps_per_s=None, eta_s=12.4, eta_ts=None)
    summary = RunSummary(run_id="run_1", metrics={"train/loss": {"latest": {"value": 0.25}}}, progress=progress,
                         warnings=[], health=[], primary_metric=None)
    assert tasks.describe_progress(summary) == "Run run_1, step 50/100, train/loss 0.25, ETA 12 s."
    assert set(tasks.TASK_STATUS.values()) <= {"working", "completed", "failed", "cancelled"}


async def _answer(mount: asgi.McpMount, path: str = "/mcp") -> tuple[int, dict, dict]:
    sent: list[dict] = []
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await mount({"type": "http", "path": path, "query_string": b"", "headers": []}, receive, send)
    head = dict(sent[0]["headers"])
    return sent[0]["status"], head, json.loads(sent[1]["body"])


@pytest.mark.parametrize("state, code", [(DaemonState.NOT_READY, "not_ready"), (DaemonState.STOPPING, "stopping")])
async def test_the_gate_answers_503_before_ready_and_while_stopping(state, code):
    shared = SimpleNamespace(lifecycle=SimpleNamespace(state=state))
    passed: list[str] = []

    async def rest(scope, receive, send) -> None:
        passed.append(scope["path"])

    mount = asgi.McpMount(shared, rest, None)  # type: ignore[arg-type]
    status, head, body = await _answer(mount)
    assert (status, body["error"]["code"]) == (503, code)
    assert head[b"content-type"] == b"application/json"
    await mount({"type": "http", "path": "/api/v1/jobs"}, None, None)  # everything else: the app, untouched
    assert passed == ["/api/v1/jobs"]
