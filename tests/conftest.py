import signal

import pytest
from helpers import DaemonProcess, kill_processes_with_env

from gpuplaned.protocol.agent import GpuInfo, Hello
from gpuplaned.store import job_rows
from gpuplaned.store.database import open_writer

# A suite started in the background of a shell (`make test &`) inherits SIGINT ignored, and so
# would every process a test starts: the tests that press Ctrl-C on a follower would wait in
# vain. What a test sends must reach its process as it would from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The longest files start first. Under `--dist loadfile` a file runs whole on one worker, and
# with `--no-loadscope-reorder` (the Makefile's) in the order collected; xdist's own order, by a
# file's count of tests, ignored this list and started the 70 s browser file (2 tests) about
# 700 s into an 810 s run. Measured from a full run's junit times (3 workers, 2026-12-07:
# 2,402 s in all); a file missing here only keeps its place among the rest.
LONGEST_FIRST = (
    "tests/ui/test_ui_e2e.py", "tests/e2e/test_e2e_remote_agents.py", "tests/http/test_schemathesis.py",
    "tests/ctl/test_remote_cli.py", "tests/ui/test_ui_push.py", "tests/slurm/test_slurm_node.py",
    "tests/ctl/test_groups_cli.py", "tests/e2e/test_daemon_lifecycle.py", "tests/e2e/test_e2e_monitor.py",
    "tests/ctl/test_jobs.py", "tests/e2e/test_e2e_jobs.py", "tests/mcp/test_mcp_server.py",
)


def pytest_collection_modifyitems(items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: each file's own order kept


@pytest.fixture
def daemon_factory(tmp_path):
    """Start real gpuplaned processes in private dirs; all are killed at teardown."""
    started: list[DaemonProcess] = []

    def make(*args: str, name: str = "d", **kwargs) -> DaemonProcess:
        proc = DaemonProcess(tmp_path / name, *args, **kwargs)
        started.append(proc)
        return proc

    yield make
    for proc in started:
        proc.kill()
    # Jobs outlive their daemon by design; a test's jobs must not outlive the test.
    for proc in started:
        kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={proc.runtime_dir}")


@pytest.fixture
def daemon(daemon_factory):
    """One READY daemon with the default role."""
    proc = daemon_factory()
    proc.start()
    proc.wait_ready()
    return proc


@pytest.fixture
def conn(tmp_path):
    """A store in a fresh SQLite file, every migration applied (a test module may define its own)."""
    conn = open_writer(tmp_path / "gpuplane.db")
    yield conn
    conn.close()


@pytest.fixture
def db(tmp_path):
    """``(conn, node_id)``: a store in a fresh SQLite file, every migration applied, with one node
    ``n1`` of one fake GPU (a test module may define its own ``db``)."""
    conn = open_writer(tmp_path / "gpuplane.db")
    node_id, _ = job_rows.register_node(conn, Hello("n1", "0", (GpuInfo(0, "Fake", 1024),)), 1_700_000_000_000)
    yield conn, node_id
    conn.close()
