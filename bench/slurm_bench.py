"""What the Slurm foundations cost, on the private test cluster (tests/slurm/slurmkit.py).

    .venv/bin/python bench/slurm_bench.py [--runs 10] [--jobs 100] [--seconds 60]

1. Submit -> the job's first instruction: ``gpuplaned.slurm.submit`` (the script on stdin,
   the name, ``--export=NONE``, the job's env) beside a bare ``sbatch --wrap`` in the same run,
   alternating. The first instruction writes ``time.time()`` (wall clock, the one both sides
   share) to a file; the clock starts before the call.
2. The polling cost with ``--jobs`` of our jobs queued (held, so they stay): how long one
   ``poll`` (one squeue) takes for all of them, and how many Slurm calls a watcher makes in
   ``--seconds`` at the default period (``Backoff().period_s``).

Issue 32 asks for both through the runner; the runner integration is not built yet, so this
measures the layer it will stand on (docs/slurm.md).

``--fake``: instead, the polling cost through the runner itself (its Slurm backend, the real
``gpuplaned.slurm`` code) with ``--jobs`` of our jobs queued in a ``FakeSlurm``, in trio's
virtual time (no Slurm needed): the Slurm calls in ``--seconds`` of that time, at the
backend's period (``[slurm] poll_interval_s`` as tests/actors/runnerkit.py sets it).
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--fake", action="store_true", help="the runner's polling cost on a FakeSlurm, in virtual time")
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
