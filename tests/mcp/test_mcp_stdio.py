"""``gpuplanectl mcp-stdio`` against real daemons, driven by the SDK's own ``mcp.Client`` over
stdio: the tools listed and called through the bridge in both protocol eras, a long poll that
does not hold up other calls, and the daemon gone and back under a connected client.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import trio
from gpuplanectl import mcp_bridge
from helpers import DaemonProcess, Jobs, kill_processes_with_env, wait_for
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

pytestmark = pytest.mark.e2e

BRIDGE = ["-m", "gpuplanectl", "mcp-stdio"]


def stdio_client(env: dict[str, str], *, mode: str = "auto") -> Client:
    return Client(StdioServerParameters(command=sys.executable, args=BRIDGE, env=env), mode=mode)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One READY daemon (fake GPU, node registered) and a finished job, for the read-only tests."""
    root = tmp_path_factory.mktemp("mcp-stdio")
    daemon = DaemonProcess(root / "d", "--gpus", "fake:1").start()
    try:
        daemon.wait_ready()
        jobs = Jobs(daemon, root / "work")
        jobs.wait_node()
        job = jobs.wait(jobs.submit(["true"], name="done")["id"], "SUCCEEDED")
        yield jobs, job
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


@pytest.mark.parametrize(("mode", "version"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
async def test_tools_listed_and_called_through_the_bridge(shared, mode, version):
    jobs, job = shared
    async with stdio_client(jobs.daemon.env, mode=mode) as client:
        assert client.protocol_version == version
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {"get_job", "list_jobs", "wait_for_events", "submit_job", "query_metrics"} <= tools.keys()
        assert tools["get_job"].input_schema["required"] == ["job_id"]

        got = await client.call_tool("get_job", {"job_id": job["id"]})
        assert not got.is_error, got.content
        assert json.dumps(got.structured_content).count(job["id"]) >= 1
        listed = await client.call_tool("list_jobs", {})
        assert not listed.is_error, listed.content
        assert job["id"] in json.dumps(listed.structured_content)

        # A tool's own refusal comes back as the tool's error result, not a broken pipe.
        wrong = await client.call_tool("get_job", {"job_id": "run_notajob"})
        assert wrong.is_error

        # The other methods that carry Mcp-Name at 2026-07-28: resources/read and prompts/get.
        summary = await client.read_resource(f"gpuplane://runs/{job['run_id']}/summary")
        assert job["run_id"] in summary.contents[0].text
        prompt = await client.get_prompt("study")
        assert prompt.messages


def test_header_values_encoded_as_the_sdk_does():
    from mcp.shared.inbound import encode_header_value

    for value in ("get_job", "gpuplane://runs/run_1/summary", "naïve", " edge ", "=?base64?x?=", "tab\there", ""):
        assert mcp_bridge.encode_header_value(value) == encode_header_value(value)


async def test_a_long_poll_does_not_hold_up_other_calls(shared):
    jobs, job = shared
    async with stdio_client(jobs.daemon.env) as client:
        cursor = (await client.call_tool("list_events", {"limit": 1})).structured_content.get("next_cursor")
        woken: list = []
        finished_while_waiting: list[bool] = []

        async def long_poll() -> None:
            woken.append(await client.call_tool("wait_for_events", {
                "types": ["JOB_FAILED"], "cursor": cursor, "timeout_s": 45}))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(long_poll)
            await trio.sleep(0.3)  # let the poll reach the daemon first
            for _ in range(3):
                got = await client.call_tool("get_job", {"job_id": job["id"]})
                assert not got.is_error
                finished_while_waiting.append(not woken)
            # Now give the poll its event: it wakes at once, long before its 45 s.
            failing = await trio.to_thread.run_sync(lambda: jobs.submit(["sh", "-c", "exit 3"], name="fails"))
        assert finished_while_waiting == [True, True, True]
        answer = woken[0]
        assert not answer.is_error, answer.content
        assert failing["id"] in json.dumps(answer.structured_content)


def test_only_json_rpc_on_stdout_and_no_heavy_imports(shared):
    """Raw lines in, raw lines out: a request, a notification, garbage; and the bridge
    process never imports the SDK or httpx (it starts in a fraction of mcp's 2 s)."""
    jobs, _job = shared
    probe = ("import atexit, json, sys\n"
             "atexit.register(lambda: print('HEAVY ' + json.dumps(sorted({m.split('.')[0] for m in sys.modules} "
             "& {'mcp', 'httpx', 'httpx2', 'trio', 'quart', 'cattrs'})), "
             "file=sys.stderr))\n"
             "from gpuplanectl.main import main\nsys.argv = ['gpuplanectl', 'mcp-stdio']\nmain()\n")
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "raw", "version": "0"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": "two", "method": "tools/list", "params": {}}]
    stdin = "".join(json.dumps(m) + "\n" for m in lines) + "not json\n"
    done = subprocess.run([sys.executable, "-c", probe], input=stdin, env=jobs.daemon.env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    by_id = {m["id"]: m for m in out}
    assert set(by_id) == {1, "two", None}
    assert by_id[1]["result"]["protocolVersion"] == "2025-11-25"
    assert any(t["name"] == "get_job" for t in by_id["two"]["result"]["tools"])
    assert by_id[None]["error"]["code"] == -32700
    assert "HEAVY []" in done.stderr


async def test_daemon_down_then_back_under_a_connected_client(daemon_factory, tmp_path):
    daemon = daemon_factory("--gpus", "fake:1").start()
    daemon.wait_ready()
    async with stdio_client(daemon.env) as client:
        assert (await client.call_tool("list_nodes", {})).is_error is False

        daemon.kill()
        with pytest.raises(MCPError) as refused:
            await client.call_tool("list_jobs", {})
        assert "no gpuplaned is running" in refused.value.error.message
        assert "gpuplanectl daemon" in refused.value.error.message
        assert refused.value.error.data["reason"] == "no_daemon"

        again = daemon_factory("--gpus", "fake:1").start()  # the same dirs: the same runtime dir
        again.wait_ready()
        listed = await client.call_tool("list_jobs", {})
        assert not listed.is_error, listed.content
        wait_for(lambda: again.client().get("/api/v1/nodes")["nodes"], what="the node to register")
        nodes = await client.call_tool("list_nodes", {})
        assert not nodes.is_error and nodes.structured_content


async def test_no_daemon_at_all_is_named_on_connect(tmp_path):
    """A client started before any daemon: its handshake fails with the reason, not a hang."""
    env = DaemonProcess(tmp_path / "none").env
    # The SDK raises it from inside its task groups, wrapped.
    with pytest.RaisesGroup(pytest.RaisesExc(MCPError, match="no gpuplaned is running"), flatten_subgroups=True):
        async with stdio_client(env, mode="legacy"):
            pass


def test_a_cancelled_request_is_aborted_not_answered(shared):
    """At 2026-07-28 a client cancels by notifications/cancelled; the bridge closes that
    request's POST (the HTTP spelling of a cancel) instead of posting the notification, and
    writes no answer for it. Proof that the POST was closed: on EOF the bridge exits at once,
    where a 45 s long poll still in flight would hold it for its 30 s drain."""
    jobs, _job = shared
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    bridge = subprocess.Popen([sys.executable, *BRIDGE, "--drain", "30"], env=jobs.daemon.env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def send(message: dict) -> None:
            bridge.stdin.write(json.dumps(message).encode() + b"\n")
            bridge.stdin.flush()

        # A poll no event ends: the finished job's RUN_STARTED and RUN_FINISHED come with the
        # detector's next pass (every 10 s), and answered an unfiltered poll before the cancel.
        send({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
              "params": {"name": "wait_for_events", "arguments": {"timeout_s": 45, "job_id": "job_0none"},
                         "_meta": meta}})
        send({"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {"_meta": meta}})
        first = json.loads(bridge.stdout.readline())  # the poll is in flight by the time tools/list answers
        assert first["id"] == 8 and first["result"]["tools"]
        send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}})
        send({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": meta}})
        assert json.loads(bridge.stdout.readline())["id"] == 9
        bridge.stdin.close()
        assert bridge.wait(timeout=10) == 0
        assert bridge.stdout.read() == b""  # nothing for the cancelled request
    finally:
        bridge.kill()
        bridge.wait()
        for pipe in (bridge.stdin, bridge.stdout, bridge.stderr):
            pipe.close()


async def test_the_same_pipe_to_a_remote_front_with_a_token(shared):
    """``--server``/GPUPLANE_SERVER: the bridge speaks to the HTTP front's /mcp with the
    token as a bearer header, and the token's scopes hold (a read token cannot submit)."""
    jobs, job = shared
    url = jobs.client.get("/api/v1/daemon")["endpoints"]["http"]
    token = jobs.client.post("/api/v1/tokens", {"name": "stdio-remote", "scopes": ["read"]})["secret"]
    env = {**jobs.daemon.env, "GPUPLANE_SERVER": url, "GPUPLANE_TOKEN": token}
    async with stdio_client(env) as client:
        got = await client.call_tool("get_job", {"job_id": job["id"]})
        assert not got.is_error and got.structured_content["job"]["id"] == job["id"]
        refused = await client.call_tool("submit_job", {"command": ["true"], "cwd": str(jobs.workdir)})
        assert refused.is_error
        assert "write" in refused.content[0].text
    with pytest.RaisesGroup(pytest.RaisesExc(MCPError, match=r"refused the request \(HTTP 401\)"),
                            flatten_subgroups=True):
        async with stdio_client({**env, "GPUPLANE_TOKEN": "gpp_wrong"}, mode="legacy"):
            pass


async def test_a_confirmed_cancel_through_the_bridge(shared):
    """cancel_job asks the person first: at 2026-07-28 an input_required answer, then the same
    call again with the answer; both legs are plain requests through the pipe."""
    import mcp_types as types

    jobs, _job = shared
    running = await trio.to_thread.run_sync(lambda: jobs.wait(jobs.submit(["sleep", "60"], name="to-cancel")["id"],
                                                              "RUNNING"))
    asked: list[str] = []

    async def confirm(_context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"confirm": True})

    async with Client(StdioServerParameters(command=sys.executable, args=BRIDGE, env=jobs.daemon.env),
                      elicitation_callback=confirm) as client:
        done = await client.call_tool("cancel_job", {"job_id": running["id"]})
    assert not done.is_error, done.content
    assert len(asked) == 1 and running["id"] in asked[0]
    await trio.to_thread.run_sync(lambda: jobs.wait(running["id"], "CANCELLED"))
