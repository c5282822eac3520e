"""Batch submit against single submits (issue 31 item 5): N jobs in one
``POST /api/v1/jobs:batch`` against N ``POST /api/v1/jobs`` one after the other, each on a
fresh daemon (``--gpus fake:1 --max-cpu-jobs 1``) over its Unix socket (one keep-alive
connection). The jobs are 1,000 sweep trials (``gpu: 0``, their arguments and env) queued
behind a blocker job that holds the one CPU slot, so the clock measures the submit path
alone (admission, the insert, the scheduler's pass), not the jobs running.

    .venv/bin/python bench/batch_submit_bench.py           # 1,000 jobs
    .venv/bin/python bench/batch_submit_bench.py --jobs 200

Prints both times, the ratio and the batch body's size. Standard library and the test helpers.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from helpers import DaemonProcess, Jobs, kill_processes_with_env  # noqa: E402


def trials(workdir: Path, count: int) -> list[dict]:
    return [{"command": ["python", "train.py", "--lr", f"{0.0001 * (i + 1):.4f}", "--seed", str(i)],
             "cwd": str(workdir), "gpu": 0, "name": f"sweep-lr-{i:04d}", "env": {"TRIAL": str(i)},
             "timeout_s": 3600} for i in range(count)]


def timed(root: Path, count: int, batched: bool) -> float:
    """Seconds to queue ``count`` trials on a fresh daemon, in one batch or one by one."""
    daemon = DaemonProcess(root, "--gpus=fake:1", "--max-cpu-jobs=1").start()
    try:
        daemon.wait_ready()
        jobs = Jobs(daemon, root / "work")
        jobs.wait_node()
        client = jobs.client
        blocker = jobs.submit(["sleep", "600"], gpu=0)  # holds the one CPU slot: the trials wait
        jobs.wait(blocker["id"], "RUNNING")
        body = trials(jobs.workdir, count)
        start = time.perf_counter()
        if batched:
            queued = client.post("/api/v1/jobs:batch", {"jobs": body})["jobs"]
        else:
            queued = [client.post("/api/v1/jobs", one)["job"] for one in body]
        elapsed = time.perf_counter() - start
        assert len(queued) == count and all(j["status"] == "QUEUED" for j in queued), "not all queued"
        return elapsed
    finally:
        daemon.kill()
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, help="how many jobs each way (default 1000)")
    args = parser.parse_args()
    size = len(json.dumps({"jobs": trials(Path("/home/user/project"), args.jobs)}))
    with tempfile.TemporaryDirectory(prefix="batch-bench-") as tmp:
        single = timed(Path(tmp) / "single", args.jobs, batched=False)
        batch = timed(Path(tmp) / "batch", args.jobs, batched=True)
    print(f"{args.jobs} single POST /api/v1/jobs: {single:.2f} s ({single / args.jobs * 1000:.2f} ms/job)")
    print(f"1 POST /api/v1/jobs:batch of {args.jobs}: {batch:.2f} s ({batch / args.jobs * 1000:.2f} ms/job); "
          f"body {size / 1024:.0f} KiB of the 1024 KiB limit")
    print(f"ratio single/batch: {single / batch:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
