"""The SDK (stdlib only, so it cannot import the daemon) keeps its own copies of two word lists;
they are the daemon's (gpuplaned.protocol), so a run never finishes or logs an event the
daemon would refuse."""

from __future__ import annotations

from gpuplane import _run

from gpuplaned.protocol.job_states import FINISH_STATES
from gpuplaned.protocol.vocabulary import SEVERITIES


def test_the_sdks_finish_states_and_severities_are_the_daemons():
    assert _run.FINISH_STATES == FINISH_STATES
    assert _run.SEVERITIES == SEVERITIES
