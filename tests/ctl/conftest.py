"""Fixtures for the job commands: a daemon with fake GPUs."""

from __future__ import annotations

import pytest
from helpers import DaemonProcess


@pytest.fixture
def gpu_daemon(daemon_factory) -> DaemonProcess:
    """A READY daemon whose one node has two fake GPUs."""
    proc = daemon_factory("--gpus", "fake:2")
    proc.start()
    proc.wait_ready()
    return proc
