"""A real daemon (two fake GPUs) and a ``requests`` session that reaches it over its Unix socket."""

from __future__ import annotations

import pytest
from helpers import Jobs
from unixhttp import unix_session


@pytest.fixture
def jobs(daemon_factory, tmp_path) -> Jobs:
    """A READY daemon with no GPUs, driven from ``tmp_path/work`` (a module may define its own)."""
    return Jobs.start(daemon_factory, tmp_path / "work", "--gpus=none")


@pytest.fixture
def api(jobs):
    """The client of ``jobs``' daemon."""
    return jobs.client


@pytest.fixture
def api_jobs(daemon_factory, tmp_path) -> Jobs:
    """A READY daemon with two fake GPUs and its node registered, driven from ``tmp_path/work``."""
    return Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:2")


@pytest.fixture
def api_session(api_jobs):
    """A ``requests`` session on the daemon's Unix socket; use with ``BASE_URL``."""
    session = unix_session(str(api_jobs.daemon.socket_path))
    yield session
    session.close()
