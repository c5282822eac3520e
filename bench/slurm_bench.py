"""What the Slurm foundations cost, on the private test cluster (tests/slurm/slurmkit.py).

    .venv/bin/python bench/slurm_bench.py [--runs 10] [--jobs 100] [--seconds 60]

1. Submit -> the job's first instruction: ``gpuplaned.slurm.submit`` (the script on stdin,
   the name, ``--export=NONE``, the job's env) beside a bare ``sbatch --wrap`` in the same run,
   alternating. The first instruction writes ``time.time()`` (wall clock, the one both sides
   share) to a file; the clock starts before the call.
2. The polling cost with ``--jobs`` of our jobs queued (held, so they stay): how long one
   ``poll`` (one squeue) takes for all of them, and how many Slurm calls a watcher makes in
   ``--seconds`` at the default period (``Backoff().period_s``).

``--runner``: both through the runner itself: a real daemon whose node has ``[node] runner =
"slurm"`` on the same private cluster. (1) A job submitted to it over its control socket
(``POST /api/v1/jobs``) beside a bare ``sbatch --wrap``, alternating, the same stamp as above;
(2) with ``--jobs`` of its jobs queued (one runs ``sleep``, the rest wait for the one GPU with
reason Resources), every Slurm command the daemon runs in ``--seconds``, counted by wrappers
its ``[slurm] bin_dir`` points at (``[slurm] poll_interval_s`` at its default, 2 s).

``--fake``: instead, the polling cost through the runner itself (its Slurm backend, the real
``gpuplaned.slurm`` code) with ``--jobs`` of our jobs queued in a ``FakeSlurm``, in trio's
virtual time (no Slurm needed): the Slurm calls in ``--seconds`` of that time, at the
backend's period (``[slurm] poll_interval_s`` as tests/actors/runnerkit.py sets it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "slurm"))

from slurmkit import SlurmCluster  # noqa: E402 - the test fixture's cluster

from gpuplaned.slurm import Backoff, SubmitSpec, poll, submit  # noqa: E402
from gpuplaned.slurm.commands import scrubbed_environment  # noqa: E402

STAMP = "import time,sys; open(sys.argv[1], 'w').write(repr(time.time()))"


async def first_instruction(cluster: SlurmCluster, work: Path, runs: int) -> dict[str, list[float]]:
    cli = cluster.cli()
    took: dict[str, list[float]] = {"gpuplaned.slurm.submit": [], "bare sbatch": []}
    for i in range(runs):
        for kind in took:
            stamp = work / f"{kind.split()[0]}-{i}.t"
            started = time.time()
            if kind == "bare sbatch":
                await trio.to_thread.run_sync(lambda: subprocess.run(
                    ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", f"python3 -c \"{STAMP}\" {stamp}"],
                    env=scrubbed_environment(cluster.env), check=True, capture_output=True))
            else:
                job_dir = work / f"job{i}"
                job_dir.mkdir(exist_ok=True)
                await submit(cli, SubmitSpec(job_id=f"b{i}", attempt=1, argv=("python3", "-c", STAMP, str(stamp)),
                                             job_dir=job_dir, chdir=job_dir, env={"PATH": "/usr/bin:/bin"}))
            while not stamp.exists() or not stamp.read_text():
                await trio.sleep(0.005)
            took[kind].append(float(stamp.read_text()) - started)
    return took


async def polling_cost(cluster: SlurmCluster, jobs: int, seconds: float) -> dict[str, float]:
    ids = []
    for i in range(jobs):
        out = cluster.client("sbatch", "--parsable", "-H", "-J", f"gp-q{i}-1", "-o", "/dev/null", "--wrap", "true")
        ids.append(out.stdout.strip())
    cli = cluster.cli()
    one = []
    for _ in range(10):
        started = time.perf_counter()
        rows = await poll(cli, ids)
        one.append(time.perf_counter() - started)
        assert len(rows) == jobs
    cli.calls = 0
    backoff = Backoff()
    with trio.move_on_after(seconds):
        while True:
            await poll(cli, ids)
            await trio.sleep(backoff.answered())
    return {"poll_ms_median": statistics.median(one) * 1000, "calls": cli.calls,
            "calls_per_minute": cli.calls * 60 / seconds, "period_s": backoff.period_s}


async def fake_polling_cost(jobs: int, seconds: float, work: Path) -> dict[str, float]:
    """The runner's Slurm calls in ``seconds`` with ``jobs`` queued in a FakeSlurm (virtual time)."""
    import attrs

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "actors"))
    from runnerkit import SLURM, job, start_runner

    from gpuplaned.testing.launcher import FakeLauncher
    from gpuplaned.testing.slurm import FakeSlurm, SlurmScript

    fake = FakeSlurm(default=SlurmScript(pending=(("Priority", 100 * seconds),)))
    async with trio.open_nursery() as nursery:
        node = await start_runner(nursery, work, FakeLauncher(), slurm=fake)
        for i in range(jobs):
            await node.link.dispatch(attrs.evolve(job(f"job_{i}", gpus=()), gpus=1))
        for _ in range(jobs):  # each one's WAITING: all are with Slurm
            await node.link.next_report()
        before = len(fake.commands)
        await trio.sleep(seconds)
        minute = fake.commands[before:]
        nursery.cancel_scope.cancel()
    return {"calls": len(minute), "squeue": sum(1 for c in minute if c[0] == "squeue"),
            "calls_per_minute": len(minute) * 60 / seconds, "period_s": float(SLURM["poll_interval_s"])}


WRAPPER = """#!/bin/sh
echo "$0" >> {log}
exec {real} "$@"
"""


def runner_costs(cluster: SlurmCluster, work: Path, runs: int, jobs: int, seconds: float) -> None:
    """Submit -> first instruction and the polling cost through a real daemon's Slurm node."""
    import shutil

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from helpers import DaemonProcess, Jobs, kill_processes_with_env, wait_for

    bin_dir, calls = work / "bin", work / "slurm-calls.log"
    bin_dir.mkdir()
    for tool in ("sbatch", "squeue", "scontrol", "scancel", "sacct", "sinfo"):
        wrapper = bin_dir / tool
        wrapper.write_text(WRAPPER.format(log=calls, real=shutil.which(tool)))
        wrapper.chmod(0o755)
    daemon = DaemonProcess(work / "daemon", env={"SLURM_CONF": str(cluster.conf), "GPUPLANE_HTTP": "off"})
    config = daemon.root / "config" / "gpuplane" / "gpuplaned.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[node]\nname = "hpc"\nrunner = "slurm"\n[slurm]\nbin_dir = "{bin_dir}"\n')
    daemon.start()
    try:
        daemon.wait_ready()
        api = Jobs(daemon, work / "jobs")
        api.wait_node()
        took: dict[str, list[float]] = {"GPUPlane, Slurm node": [], "bare sbatch": []}
        for i in range(runs):
            for kind in took:
                stamp = api.workdir / f"{kind.split()[0].strip(',')}-{i}.t"
                started = time.time()
                if kind == "bare sbatch":
                    subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap",
                                    f"python3 -c \"{STAMP}\" {stamp}"], env=scrubbed_environment(cluster.env),
                                   check=True, capture_output=True)
                else:
                    api.submit(["python3", "-c", STAMP, str(stamp)], gpu=0)
                wait_for(lambda: stamp.exists() and stamp.read_text(), 60, interval=0.005, what=str(stamp))
                took[kind].append(float(stamp.read_text()) - started)
        for kind, values in took.items():
            print(f"through the runner: submit -> first instruction, {kind}: median "
                  f"{statistics.median(values) * 1000:.0f} ms, min {min(values) * 1000:.0f}, "
                  f"max {max(values) * 1000:.0f} ({len(values)} runs)")
        ours = statistics.median(took["GPUPlane, Slurm node"]) / statistics.median(took["bare sbatch"])
        print(f"through the runner: GPUPlane / bare sbatch = {ours:.2f}x")
        api.submit(["sleep", "3600"], gpu=1)
        for _ in range(jobs - 1):
            api.submit(["true"], gpu=1)
        wait_for(lambda: len(cluster.client("squeue", "-h", "-o", "%i").stdout.split()) >= jobs, 120,
                 what=f"{jobs} jobs in squeue")
        time.sleep(5)  # every submission's look-ups are over
        before = len(calls.read_text().splitlines())
        time.sleep(seconds)
        made = [Path(line).name for line in calls.read_text().splitlines()[before:]]
        print(f"through the runner, {jobs} jobs queued: {len(made)} Slurm calls in {seconds:g} s "
              f"({', '.join(f'{made.count(t)} {t}' for t in sorted(set(made)))}) "
              f"= {len(made) * 60 / seconds:.0f} calls/minute")
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")
        cluster.client("scancel", "--user", os.environ.get("USER", "root"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--fake", action="store_true", help="the runner's polling cost on a FakeSlurm, in virtual time")
    parser.add_argument("--runner", action="store_true", help="both figures through a real daemon's Slurm node")
    args = parser.parse_args()
    if args.fake:
        import tempfile

        from trio.testing import MockClock

        with tempfile.TemporaryDirectory() as work:
            started = time.perf_counter()
            cost = trio.run(fake_polling_cost, args.jobs, args.seconds, Path(work),
                            clock=MockClock(autojump_threshold=0))
        print(f"runner on FakeSlurm, {args.jobs} jobs queued: {cost['calls']} Slurm calls "
              f"({cost['squeue']} squeue) in {args.seconds:g} s of virtual time at a {cost['period_s']:g} s period "
              f"= {cost['calls_per_minute']:.0f} calls/minute ({time.perf_counter() - started:.1f} s wall)")
        return
    cluster = SlurmCluster(gpus=1)
    try:
        cluster.start()
        work = cluster.root / "bench"
        work.mkdir()
        if args.runner:
            runner_costs(cluster, work, args.runs, args.jobs, args.seconds)
            return
        took = trio.run(first_instruction, cluster, work, args.runs)
        for kind, values in took.items():
            print(f"submit -> first instruction, {kind}: median {statistics.median(values) * 1000:.0f} ms, "
                  f"min {min(values) * 1000:.0f}, max {max(values) * 1000:.0f} ({len(values)} runs)")
        cost = trio.run(polling_cost, cluster, args.jobs, args.seconds)
        print(f"polling {args.jobs} queued jobs: one squeue {cost['poll_ms_median']:.0f} ms (median of 10); "
              f"{cost['calls']} Slurm calls in {args.seconds:g} s at a {cost['period_s']:g} s period "
              f"= {cost['calls_per_minute']:.0f} calls/minute, whatever the number of jobs")
    finally:
        cluster.stop()
        cluster.remove()


if __name__ == "__main__":
    main()
