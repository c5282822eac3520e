import pytest
from slurmkit import SlurmCluster, SlurmUnavailable


@pytest.fixture
def slurm_factory():
    """Start private Slurm clusters (``make(gpus=1, min_job_age=300)``); each is stopped at
    teardown with its jobs, whatever the test did. Where Slurm cannot be installed or
    started the test fails, saying why: these tests never skip."""
    started: list[SlurmCluster] = []

    def make(*, gpus: int = 1, min_job_age: int = 300) -> SlurmCluster:
        cluster = SlurmCluster(gpus=gpus, min_job_age=min_job_age)
        started.append(cluster)
        try:
            cluster.start()
        except SlurmUnavailable as error:
            why = str(error)
        else:
            return cluster
        pytest.fail(f"the Slurm test fixture cannot run: {why}", pytrace=False)

    yield make
    leftovers = {}
    for cluster in started:
        cluster.stop()
        leftovers[cluster.root] = cluster.job_processes()
        cluster.remove()
    assert not any(leftovers.values()), f"job processes outlived their cluster: {leftovers}"


@pytest.fixture
def slurm(slurm_factory):
    """One private cluster with one fake GPU."""
    return slurm_factory()
