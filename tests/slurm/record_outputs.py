"""Record what Slurm's clients print, live, from the test fixture: tests/slurm/recorded/<release>/.

    .venv/bin/python tests/slurm/record_outputs.py          # as root, Slurm installed

One private cluster with one fake GPU, and a queue that shows the states and reasons the
parsers must read: a running GPU job, one waiting on Resources, one on Priority, one held,
one on a Dependency, a throttled array, a completed, a failed and a cancelled job; then the
node drained, so a job asking for it waits with ReqNodeNotAvail. Every command is the one
``gpuplaned.slurm`` runs, with the same format. The node name and times are as they were.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from slurmkit import SlurmCluster

from gpuplaned.slurm.commands import scrubbed_environment
from gpuplaned.slurm.parsing import SACCT_FIELDS, SQUEUE_FORMAT

HERE = Path(__file__).resolve().parent


def main() -> None:
    cluster = SlurmCluster(gpus=1)
    try:
        cluster.start()
        record(cluster)
    finally:
        cluster.stop()
        cluster.remove()


def run(cluster: SlurmCluster, *argv: str) -> subprocess.CompletedProcess[str]:
    env = scrubbed_environment(cluster.env)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)


def sbatch(cluster: SlurmCluster, *args: str) -> str:
    out = run(cluster, "sbatch", "--parsable", "-o", "/dev/null", *args)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def record(cluster: SlurmCluster) -> None:
    version = run(cluster, "squeue", "--version").stdout.split()[-1]
    release = ".".join(version.split(".")[:2])
    folder = HERE / "recorded" / release
    folder.mkdir(parents=True, exist_ok=True)
    done = sbatch(cluster, "-J", "gp-done-1", "--wrap", "exit 0")
    failed = sbatch(cluster, "-J", "gp-failed-1", "--wrap", "exit 3")
    cancelled = sbatch(cluster, "-J", "gp-cancelled-1", "--wrap", "sleep 300")
    time.sleep(3)  # the first scheduling pass
    run(cluster, "scancel", cancelled)
    running = sbatch(cluster, "-J", "gp-running-1", "--gres=gpu:1", "--wrap", "sleep 300")
    sbatch(cluster, "-J", "gp-resources-1", "--gres=gpu:1", "--wrap", "sleep 300")
    sbatch(cluster, "-J", "gp-priority-1", "--gres=gpu:1", "--wrap", "sleep 300")
    sbatch(cluster, "-J", "gp-held-1", "-H", "--wrap", "sleep 300")
    sbatch(cluster, "-J", "gp-after-1", f"--dependency=afterok:{running}", "--wrap", "true")
    sbatch(cluster, "-J", "gp-array-1", "--array=0-3%1", "--wrap", "sleep 300")
    time.sleep(4)  # a scheduling pass sets the reasons
    squeue = run(cluster, "squeue", "-h", "-t", "all", "-o", SQUEUE_FORMAT)
    (folder / "squeue.txt").write_text(squeue.stdout)
    scontrol = run(cluster, "scontrol", "-o", "show", "job")
    (folder / "scontrol_show_job.txt").write_text(scontrol.stdout)
    ended = run(cluster, "scontrol", "-o", "show", "job", failed)
    (folder / "scontrol_show_job_failed.txt").write_text(ended.stdout)
    run(cluster, "scontrol", "update", f"NodeName={cluster.node}", "State=DRAIN", "Reason=recording")
    sbatch(cluster, "-J", "gp-drained-1", "-w", cluster.node, "--wrap", "true")
    time.sleep(4)
    drained = run(cluster, "squeue", "-h", "-t", "all", "-n", "gp-drained-1", "-o", SQUEUE_FORMAT)
    (folder / "squeue_drained.txt").write_text(drained.stdout)
    drained_job = run(cluster, "scontrol", "-o", "show", "job", drained.stdout.split("|")[0])
    (folder / "scontrol_show_job_drained.txt").write_text(drained_job.stdout)
    sacct = run(cluster, "sacct", "-n", "-P", "-X", "-j", done, "-o", ",".join(SACCT_FIELDS))
    (folder / "sacct_without_slurmdbd.txt").write_text(f"exit {sacct.returncode}\n{sacct.stderr}")
    unknown = run(cluster, "squeue", "-h", "-t", "all", "-j", "99999", "-o", SQUEUE_FORMAT)
    (folder / "squeue_unknown_id.txt").write_text(f"exit {unknown.returncode}\n{unknown.stderr}")
    (folder / "version.txt").write_text(run(cluster, "squeue", "--version").stdout)
    print(f"recorded Slurm {version} into {folder}", file=sys.stderr)


if __name__ == "__main__":
    main()
