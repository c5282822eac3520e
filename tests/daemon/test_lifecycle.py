import pytest

from gpuplaned.lifecycle import DaemonState, Lifecycle


def test_normal_path_and_first_reason_kept():
    life = Lifecycle()
    assert life.state is DaemonState.NOT_READY
    life.ready()
    assert life.stopping("SIGTERM")
    assert not life.stopping("owner died")
    assert life.stop_reason == "SIGTERM"
    life.closed()
    assert life.state is DaemonState.CLOSED


def test_stop_during_startup_and_illegal_moves():
    life = Lifecycle()
    assert life.stopping("SIGINT during start")
    with pytest.raises(ValueError, match="from STOPPING to READY"):
        life.ready()
