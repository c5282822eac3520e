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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
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
