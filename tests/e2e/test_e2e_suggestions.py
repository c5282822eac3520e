"""Every next step the CLI and MCP suggest runs as written. On one real daemon: two training
runs through the SDK (checkpoints, no primary metric, then one), and a failed job of every
cause ``explain`` knows. The CLI's reports (``job explain``, ``run diagnose``, ``run compare``)
write their commands in backquotes: each is run as a user would paste it. The MCP answers'
``next_actions`` are called through a real ``mcp`` client over ``gpuplanectl mcp-stdio``,
following the suggestions of those answers in turn, each kind once; their ``advice`` holds
the same commands as the CLI's, run too."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers import Jobs, wait_for
from mcp import Client, StdioServerParameters

from gpuplaned.protocol.diagnosis_replies import CAUSES

pytestmark = pytest.mark.e2e

SDK_DIR = str(Path(__file__).resolve().parents[2] / "sdk")
COMMAND = re.compile(r"`(gpuplanectl [^`]+)`")

TRAIN = textwrap.dedent("""
    import math, sys
    import gpuplane
    lr = float(sys.argv[1])
    run = gpuplane.init(project="p", experiment="e", config={"lr": lr})
    for step in range(200):
        run.log({"train/loss": 2.0 * math.exp(-lr * step / 50) + 0.1, "lr": lr}, step=step)
        if step in (100, 199):
            open(f"ck-{lr}-{step}.pt", "wb").write(b"weights")
            run.log_checkpoint(f"ck-{lr}-{step}.pt", step=step)
    run.finish()
""")
# Saves a checkpoint, then dies by SIGKILL: killed, with something to resume from.
KILLED = textwrap.dedent("""
    import os, signal
    import gpuplane
    run = gpuplane.init()
    run.log({"train/loss": 1.0}, step=1)
    open("killed-ck.pt", "wb").write(b"weights")
    run.log_checkpoint("killed-ck.pt", step=1)
    run.finish()
    os.kill(os.getpid(), signal.SIGKILL)
""")
FAILURES = {  # cause -> how a job gets it (sh scripts, but spawn_failure's argv)
    "exit_code": "echo 'Traceback (most recent call last):' >&2; echo 'ValueError: boom' >&2; exit 3",
    "oom": "echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1",
    "disk_full": "echo 'OSError: [Errno 28] No space left on device' >&2; exit 1",
    "nan_divergence": "echo 'step 40 loss nan' >&2; exit 1",
    "dataloader_hang": "echo 'RuntimeError: DataLoader worker (pid 4242) exited unexpectedly' >&2; exit 1",
    "stalled": "echo 'epoch 1'; sleep 2.5; exit 1",
}


def _ctl(jobs: Jobs, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuplanectl", *args], env=jobs.daemon.env, cwd=jobs.workdir,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def _commands(actions: list[str]) -> list[str]:
    """The commands in next actions; a command outside backquotes (not runnable as written) fails."""
    for action in actions:
        assert "gpuplanectl" not in COMMAND.sub("", action), f"a command outside backquotes: {action!r}"
    return [c for action in actions for c in COMMAND.findall(action)]


def _next_lines(report: str) -> list[str]:
    """The ``next:`` part of a CLI report, one action a line."""
    _, _, after = report.partition("\nnext:\n")
    return [line.removeprefix("  - ") for line in after.splitlines() if line.startswith("  - ")]


def _start(jobs: Jobs) -> dict[str, Any]:
    """Two training runs and a failed job of every cause; what each is, by name."""
    (jobs.workdir / "train.py").write_text(TRAIN)
    (jobs.workdir / "killed.py").write_text(KILLED)
    sdk = {"PYTHONPATH": SDK_DIR}
    made = {f"train{k}": jobs.submit([sys.executable, "train.py", lr], gpu=0, env=sdk)["id"]
            for k, lr in enumerate(("0.5", "1.5"))}
    made |= {cause: jobs.sh(script, gpu=0)["id"] for cause, script in FAILURES.items()}
    made["timeout"] = jobs.sh("echo 'epoch 1 of 90' >&2; sleep 30", gpu=0, timeout_s=0.5, stop_grace_s=0.5)["id"]
    made["spawn_failure"] = jobs.submit(["/nonexistent/prog", "--flag"], gpu=0)["id"]
    made["killed_or_preempted"] = jobs.submit([sys.executable, "killed.py"], gpu=0, env=sdk)["id"]
    ended = {name: jobs.wait(job_id, timeout=40) for name, job_id in made.items()}
    assert [ended[f"train{k}"]["status"] for k in range(2)] == ["SUCCEEDED"] * 2, jobs.daemon.log()
    return ended


def _run_cli(jobs: Jobs, command: str) -> None:
    words = shlex.split(command)
    assert words[0] == "gpuplanectl"
    done = _ctl(jobs, *words[1:])
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def _stdio(jobs: Jobs) -> Client:
    return Client(StdioServerParameters(command=sys.executable, args=["-m", "gpuplanectl", "mcp-stdio"],
                                        env=jobs.daemon.env))


async def _call(client: Client, jobs: Jobs, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One tools/call; a long poll gets an event to wake it (a failing job of its own)."""
    result = None

    async def call() -> None:
        nonlocal result
        result = await client.call_tool(tool, arguments)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            if tool == "wait_for_events" and "job_id" not in arguments:
                await trio.sleep(0.3)
                await trio.to_thread.run_sync(lambda: jobs.sh("exit 1", gpu=0))
    assert not result.is_error, f"{tool} {json.dumps(arguments)}: {result.content}"
    return result.structured_content


async def _follow(client: Client, jobs: Jobs, seeds: list[tuple[str, dict[str, Any]]]) -> tuple[set, list[str]]:
    """Call the seeds, then every next action of every answer (each kind of suggestion once: its
    tool, why and argument names), an answer's own before the rest (so a job just submitted is
    still running when its poll is called); the kinds called and the commands in their advice."""
    queue = list(seeds)
    seen: set[tuple[str, str, tuple[str, ...]]] = set()
    commands: list[str] = []
    while queue:
        tool, args = queue.pop(0)
        body = await _call(client, jobs, tool, args)
        commands += _commands(body.get("advice") or [])
        new = []
        for action in body["next_actions"]:
            kind = (action["tool"], action["why"], tuple(sorted(action["arguments"])))
            if kind not in seen:
                seen.add(kind)
                new.append((action["tool"], action["arguments"]))
        queue[:0] = new
        assert len(seen) < 100, "suggestions without end"
    return seen, commands


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


async def test_every_suggested_next_step_runs_as_written(daemon_factory, tmp_path):
    config = tmp_path / "gpuplaned.toml"
    config.write_text("[detector]\ninterval_s = 0.2\nstall_after_s = 1\n")
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1", f"--config={config}")
    ended = await trio.to_thread.run_sync(_start, jobs)
    runs = [ended["train0"]["run_id"], ended["train1"]["run_id"]]
    failed = {name: job for name, job in ended.items() if not name.startswith("train")}

    # The CLI: every cause explained, the runs diagnosed and compared; their commands collected.
    causes, commands = {}, []
    for name, job in failed.items():
        causes[name] = json.loads(_ctl(jobs, "job", "explain", job["id"], "--json").stdout)["cause"]
        report = _ctl(jobs, "job", "explain", job["id"])
        assert report.returncode == 0, report.stderr
        commands += _commands(_next_lines(report.stdout))
    assert causes == {name: name for name in failed}  # each cause, the one it was made to have
    assert set(causes.values()) == set(CAUSES) - {"none"}
    for args in (("run", "diagnose", runs[0]), ("run", "compare", *runs)):
        report = _ctl(jobs, *args)
        assert report.returncode == 0, report.stderr
        commands += _commands(_next_lines(report.stdout))
    cli = _dedupe(commands)
    # what the suggestions name, each with this job's or run's id
    assert f"gpuplanectl job logs {failed['exit_code']['id']} --stream stderr --tail 50" in cli
    assert f"gpuplanectl job retry {failed['killed_or_preempted']['id']} --resume-from last" in cli
    assert f"gpuplanectl job retry {failed['timeout']['id']}" in cli  # nothing to resume from: afresh
    assert f"gpuplanectl ckpt prune {failed['disk_full']['run_id']}" in cli

    # MCP: the answers' next actions, followed; no primary metric yet, then one.
    ck = jobs.client.get(f"/api/v1/runs/{runs[0]}/checkpoints")["checkpoints"]
    seeds = [("submit_job", {"command": ["sleep", "5"], "cwd": str(jobs.workdir), "gpu": 0}),
             ("list_nodes", {}), ("list_jobs", {}), ("list_events", {}),
             ("compare_runs", {"run_ids": runs}), ("compare_checkpoints", {"checkpoint_ids": [c["id"] for c in ck]})]
    seeds += [(tool, {"run_id": run}) for run in runs for tool in ("diagnose_run", "get_run_summary")]
    seeds += [("get_job", {"job_id": job["id"]}) for job in failed.values()]
    seeds += [("explain_failure", {"job_id": job["id"]}) for job in failed.values()]
    async with _stdio(jobs) as client:
        called, advised = await _follow(client, jobs, seeds)
        tools = {tool for tool, _why, _args in called}
        assert "get_best_checkpoint" not in tools  # no primary metric: no best to ask for
        assert {"explain_failure", "retry_job", "tail_logs", "diagnose_run", "list_checkpoints", "wait_for_events",
                "evaluate_checkpoint", "get_run_summary", "query_metrics", "get_job"} <= tools

        jobs.client.request("PATCH", "/api/v1/metric-definitions/train/loss", {"direction": "minimize"})
        jobs.client.request("PUT", "/api/v1/primary-metric", {"metric": "train/loss", "project": "p",
                                                               "experiment": "e"})
        more, advised_later = await _follow(client, jobs, [("diagnose_run", {"run_id": runs[0]})])
        assert "get_best_checkpoint" in {tool for tool, _why, _args in more}

    # The CLI's commands, and those in MCP's advice, as written (retries last: they queue jobs).
    everything = _dedupe(cli + advised + advised_later)
    assert set(advised) & set(cli)  # the advice carries the CLI's commands
    for command in sorted(everything, key=lambda c: " retry " in c):
        await trio.to_thread.run_sync(_run_cli, jobs, command)
