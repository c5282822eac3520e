#!/usr/bin/env python3
"""Benchmark the MCP server (issue 17): tool-call latency over streamable HTTP with a token,
beside the REST calls that answer the same question, and what a query_metrics answer costs
an agent in tokens.

A gpuplaned is started in a temporary directory (``--gpus fake:1``, its HTTP front on a free
loopback port) and given a ``read`` token. This process runs one short job (for get_job) and
logs a run through the SDK: ``--steps`` (default 1,000,000) points of ``train/loss``. Once the
daemon's compaction has packed the run (as any run read after its first minute is), one
``mcp.Client`` session and one httpx2 client (the SDK client's own HTTP library, so both sides
pay the same client costs) time, ``--repeat`` times each, after a warm-up:

- ``get_job(job_id)`` against ``GET /api/v1/jobs/{id}``: target p50 <= 20 ms;
- ``query_metrics(run_id, names=[train/loss], max_points=200)`` against
  ``GET /api/v1/runs/{id}/metrics?names=train/loss&x=step&points=200``: target p50 <= 100 ms;

and each tools/call once more as a hand-written POST (no SDK client work: its pydantic models
and its check of each answer against the tool's output schema), which tells the server's share
from the client's.

Tokens are estimated as bytes/4 of the JSON: the tools/call result as the server sent it
(content and structuredContent), against the raw series it summarises written as
``[[step, value], ...]``.

Usage::

    .venv/bin/python bench/mcp_bench.py            # a few minutes on 2 CPUs (1M points)
    .venv/bin/python bench/mcp_bench.py --quick    # 100k points, 20 repeats

Always exits 0 (a benchmark, not a test) unless the arguments are wrong or the daemon cannot
be started; the daemon is stopped and the temp dir removed on the way out.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO / "sdk"))

from diagnose_bench import stored, wait_packed  # noqa: E402
from jobs_bench import JobDaemons, stats, wait_until  # noqa: E402

TARGETS_MS = {"get_job": 20.0, "query_metrics": 100.0}
MAX_POINTS = 200
WARMUP = 5
SERIES = "train/loss"


def log_run(d: Any, steps: int) -> tuple[str, int]:
    """A run of ``steps`` points of train/loss; returns its id and the bytes of the raw series
    as JSON ``[[step, value], ...]`` (what an agent would read without query_metrics)."""
    from gpuplane import Run

    run = Run(name="mcp-bench", config={"lr": 3e-4},
              env={"GPUPLANE_RUNTIME_DIR": str(d.runtime_dir), "GPUPLANE_HOME": str(d.home)})
    rng = random.Random(1)
    raw_bytes = 2  # the outer []
    for step in range(steps):
        loss = (2.0 * math.exp(-step / (steps / 5)) + 0.1) * (1 + rng.uniform(-0.05, 0.05))
        run.log({SERIES: loss}, step=step)
        raw_bytes += len(json.dumps([step, loss], separators=(",", ":"))) + (1 if step else 0)
        if step % 10_000 == 0:
            while run.stats()["queued"] > 100_000:  # pace to the daemon: the SDK drops the oldest past 400k
                time.sleep(0.01)
    run.finish()
    assert run.stats()["dropped"] == 0, run.stats()
    return run.id, raw_bytes


def run_job(d: Any, workdir: Path) -> str:
    job = d.client.post("/api/v1/jobs", {"command": ["true"], "cwd": str(workdir), "name": "mcp-bench"})["job"]
    wait_until(lambda: d.client.get(f"/api/v1/jobs/{job['id']}")["job"]["status"] == "SUCCEEDED", 30, 0.05,
               "the bench job to succeed")
    return job["id"]


def raw_call(request_id: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """tools/call as a 2026-07-28 client writes it, without the SDK client's own work (its
    pydantic models, its check of the answer against the tool's output schema)."""
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments,
                       "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                 "io.modelcontextprotocol/clientCapabilities": {}}}}


def raw_headers(tool: str, version: str) -> dict[str, str]:
    return {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
            "MCP-Protocol-Version": version, "Mcp-Method": "tools/call", "Mcp-Name": tool}


async def measure(url: str, token: str, job_id: str, run_id: str, repeat: int) -> dict[str, Any]:
    """Latencies (ms) of each tool and its REST twin, and one query_metrics answer."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    calls = {
        "get_job": ({"job_id": job_id}, f"/api/v1/jobs/{job_id}"),
        "query_metrics": ({"run_id": run_id, "names": [SERIES], "max_points": MAX_POINTS},
                          f"/api/v1/runs/{run_id}/metrics?names={SERIES}&x=step&points={MAX_POINTS}"),
    }
    found: dict[str, Any] = {"mcp": {}, "rest": {}, "raw": {}}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
            found["protocol"] = client.protocol_version
            for tool, (arguments, path) in calls.items():
                mcp_ms, rest_ms, raw_ms = [], [], []
                for i in range(WARMUP + repeat):
                    t = time.perf_counter()
                    result = await client.call_tool(tool, arguments)
                    elapsed = (time.perf_counter() - t) * 1000
                    if result.is_error:
                        raise SystemExit(f"{tool} failed: {result.content}")
                    t = time.perf_counter()
                    response = await http.get(url + path)
                    rest_elapsed = (time.perf_counter() - t) * 1000
                    response.raise_for_status()
                    t = time.perf_counter()
                    raw = await http.post(url + "/mcp", content=json.dumps(raw_call(i, tool, arguments)),
                                          headers=raw_headers(tool, found["protocol"]))
                    raw_elapsed = (time.perf_counter() - t) * 1000
                    answer = raw.json() if raw.headers.get("content-type", "").startswith("application/json") else {}
                    if raw.status_code != 200 or "result" not in answer or answer["result"].get("isError"):
                        raise SystemExit(f"raw {tool} failed: HTTP {raw.status_code} {raw.content[:300]!r}")
                    if i >= WARMUP:
                        mcp_ms.append(elapsed)
                        rest_ms.append(rest_elapsed)
                        raw_ms.append(raw_elapsed)
                found["mcp"][tool], found["rest"][tool], found["raw"][tool] = mcp_ms, rest_ms, raw_ms
                found[f"{tool}_result"] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
                found[f"{tool}_rest_bytes"] = len(response.content)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="100k points, 20 repeats")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeat = 100_000, 20
    import trio

    root = Path(tempfile.mkdtemp(prefix="gpuplane-mcp-bench-"))
    dm = JobDaemons(sys.executable, root, None)
    try:
        d = dm.start("--gpus", "fake:1")
        url = d.client.get("/api/v1/daemon")["endpoints"]["http"].rstrip("/")
        token = d.client.post("/api/v1/tokens", {"name": "mcp-bench", "scopes": ["read"]})["secret"]
        workdir = root / "work"
        workdir.mkdir()
        job_id = run_job(d, workdir)
        t = time.perf_counter()
        run_id, raw_bytes = log_run(d, args.steps)
        while stored(d, run_id) < args.steps:
            if time.perf_counter() - t > 300:
                raise SystemExit(f"only {stored(d, run_id)} of {args.steps} points stored after 300 s")
            time.sleep(0.2)
        print(f"[bench] {args.steps} points logged and stored in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        waited = wait_packed(d, run_id)
        print(f"[bench] compacted {waited:.0f} s after", file=sys.stderr)
        found = trio.run(measure, url, token, job_id, run_id, args.repeat)
    finally:
        dm.stop_all()
        shutil.rmtree(root, ignore_errors=True)

    print(f"MCP tool calls over streamable HTTP with a token (protocol {found['protocol']}), "
          f"{args.repeat} times each, beside their REST twins on the same front")
    for tool, target in TARGETS_MS.items():
        m, r = stats(found["mcp"][tool]), stats(found["rest"][tool])
        verdict = "PASS" if m["median"] <= target else "FAIL"
        print(f"  {tool:<14} MCP  p50 {m['median']:7.2f} ms  p99 {m['p99']:7.2f} ms  (target p50 <= {target:.0f} ms: "
              f"{verdict})")
        print(f"  {'':<14} REST p50 {r['median']:7.2f} ms  p99 {r['p99']:7.2f} ms  (MCP/REST p50 "
              f"{m['median'] / r['median']:.2f}x)")
        w = stats(found["raw"][tool])
        print(f"  {'':<14} raw  p50 {w['median']:7.2f} ms  p99 {w['p99']:7.2f} ms  (the same tools/call POSTed "
              f"by hand: the server's share; MCP/raw p50 {m['median'] / w['median']:.2f}x)")
    answer = json.dumps(found["query_metrics_result"], separators=(",", ":"))
    structured = json.dumps(found["query_metrics_result"].get("structuredContent"), separators=(",", ":"))
    print(f"query_metrics answer on a {args.steps}-point series, max_points={MAX_POINTS} "
          "(tokens estimated as bytes/4 of the JSON):")
    print(f"  tools/call result        {len(answer):>11,} bytes  ~{len(answer) // 4:>10,} tokens "
          f"(structuredContent alone: {len(structured):,} bytes)")
    print(f"  REST metrics, points=200 {found['query_metrics_rest_bytes']:>11,} bytes  "
          f"~{found['query_metrics_rest_bytes'] // 4:>10,} tokens")
    print(f"  raw series [[step, v]..] {raw_bytes:>11,} bytes  ~{raw_bytes // 4:>10,} tokens "
          f"({raw_bytes / max(1, len(answer)):,.0f}x the answer)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
