import uuid

import pytest
from shimkit import Jobs, kill_job_processes

from gpuplaned.launching.client import open_launcher


@pytest.fixture
def jobs(tmp_path):
    """A request factory whose jobs carry a unique marker; leftovers are SIGKILLed at teardown."""
    factory = Jobs(tmp_path, uuid.uuid4().hex)
    yield factory
    kill_job_processes(factory.marker)


@pytest.fixture
async def launcher():
    async with open_launcher() as launcher:
        yield launcher
