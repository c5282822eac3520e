"""The private Slurm of the tests: it says why when it cannot run, and leaves nothing behind."""

import os

import pytest
import slurmkit
from slurmkit import SlurmCluster, SlurmUnavailable


def test_a_missing_program_is_named_with_how_to_install_it(monkeypatch):
    monkeypatch.setattr(slurmkit, "PROGRAMS", (*slurmkit.PROGRAMS, "no-such-slurmd"))
    cluster = SlurmCluster()
    try:
        with pytest.raises(SlurmUnavailable, match=r"not installed: no-such-slurmd; `make test` installs them"):
            cluster.start()
    finally:
        cluster.stop()
        cluster.remove()


def test_stop_ends_the_daemons_and_the_jobs():
    cluster = SlurmCluster()
    try:
        cluster.start()
        daemons = list(cluster.procs.values())
        out = cluster.client("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 300")
        assert out.returncode == 0, out.stderr
        job = out.stdout.strip()
        while not cluster.job_processes():  # the step is up (its sleep, its slurmstepd)
            assert cluster.client("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() in ("PENDING", "RUNNING")
    finally:
        cluster.stop()
        cluster.remove()
    assert cluster.job_processes() == []
    assert len(daemons) == 3 and all(proc.returncode is not None for proc in daemons)  # ended and reaped
    assert not any(os.path.exists(f"/proc/{proc.pid}") for proc in daemons)
