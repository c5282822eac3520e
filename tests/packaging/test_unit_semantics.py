"""The packaged units never kill jobs: their stop and restart rules, run for real.

These machines do not run systemd as PID 1, so the test plays systemd's part, as the unit
declares it (``unitfile.ServiceRules``): the daemon is the unit's main process, in a cgroup
of its own when this machine lets us make one (cgroup v2), and its jobs inherit that cgroup,
as they do under systemd. ``systemctl stop`` is then the unit's KillSignal sent to the pids
its KillMode names, and whether a daemon's exit is restarted follows Restart= and
RestartPreventExitStatus=. packaging/check.sh does the same with the installed package, and
then under a real systemd 252 booted in systemd-nspawn (packaging/nspawn/), where it holds too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import Jobs, processes_with_env, wait_for
from unitfile import ServiceRules, parse_unit

from gpuplaned.cli import build_parser
from gpuplaned.config import load_config
from gpuplaned.protocol.errors import EXIT_ENDPOINT_BUSY, EXIT_USAGE

REPO = Path(__file__).resolve().parents[2]
SYSTEM_UNIT = REPO / "packaging" / "systemd" / "gpuplaned.service"
USER_UNIT = REPO / "packaging" / "systemd" / "gpuplaned-user.service"
PACKAGED_CONFIG = REPO / "packaging" / "gpuplaned.toml"


@pytest.mark.parametrize("unit", [SYSTEM_UNIT, USER_UNIT], ids=["system", "user"])
def test_the_units_stop_only_the_daemon_and_do_not_restart_into_a_loop(unit):
    rules = ServiceRules.from_file(unit)
    assert rules.kill_mode == "process"
    assert rules.kill_signal == signal.SIGTERM
    assert rules.restart == "on-failure"
    assert rules.restart_prevent_codes == {EXIT_USAGE, EXIT_ENDPOINT_BUSY} == {2, 3}
    assert rules.restart_prevent_signals == set()
    assert rules.exec_start[0] == "/usr/bin/gpuplaned"


def test_the_system_unit_keeps_gpus_reachable_and_shares_the_socket_with_its_group():
    service = parse_unit(SYSTEM_UNIT.read_text())["Service"]
    # Each of these hides /dev/nvidia* from the jobs, or deletes files under jobs that outlive a stop.
    for key in ("PrivateDevices", "DevicePolicy", "DeviceAllow", "ProtectClock", "PrivateTmp", "NoNewPrivileges",
                "ProtectKernelModules", "MemoryDenyWriteExecute"):
        assert key not in service, f"{key}= is set: see the unit's comment on hardening"
    assert service["User"] == ["gpuplane"]
    assert service["RuntimeDirectory"] == ["gpuplane"] and service["RuntimeDirectoryMode"] == ["0750"]
    assert service["RuntimeDirectoryPreserve"] == ["yes"]
    assert service["StateDirectory"] == ["gpuplane"] and service["StateDirectoryMode"] == ["0700"]


def test_the_system_units_command_line_is_one_gpuplaned_accepts():
    args = ServiceRules.from_file(SYSTEM_UNIT).exec_start[1:]
    flags = vars(build_parser().parse_args(list(args)))  # exits 2 on an unknown flag
    assert flags["config"] == "/etc/gpuplane/gpuplaned.toml"
    cfg = load_config({**flags, "config": str(PACKAGED_CONFIG)}, env={})
    assert (cfg.home, cfg.runtime_dir, cfg.group_access) == (Path("/var/lib/gpuplane"), Path("/run/gpuplane"), True)


# ---- systemd's part, played for real -------------------------------------------------------

def _cgroup2_dir() -> Path | None:
    """Our own cgroup v2 directory, if cgroup v2 is mounted."""
    mount = None
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if fields[2] == "cgroup2":
                mount = Path(fields[1])
                break
    if mount is None:
        return None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return mount / line[3:].lstrip("/")
    return None


@pytest.fixture
def unit_cgroup() -> Iterator[Path | None]:
    """A cgroup for the "unit", as systemd makes one per service; None where we may not make one
    (not root, no cgroup v2): the processes are then told apart by the daemon's runtime dir."""
    parent = _cgroup2_dir()
    group = None if parent is None else parent / f"gpuplane-unit-test-{os.getpid()}"
    try:
        assert group is not None
        group.mkdir()
    except (AssertionError, OSError):
        yield None
        return
    try:
        yield group
    finally:
        try:
            (group / "cgroup.kill").write_text("1")
        except OSError:
            pass
        try:
            wait_for(lambda: not _cgroup_pids(group), timeout=10, what="the test cgroup to empty")
            group.rmdir()
        except (AssertionError, OSError):
            pass  # an empty cgroup left behind is harmless; a failing test says more than this


def _cgroup_pids(group: Path) -> list[int]:
    return [int(pid) for pid in (group / "cgroup.procs").read_text().split()]


def _enter(group: Path | None):
    """``preexec_fn``: the child joins ``group`` before it runs gpuplaned, so every process it
    starts is born in the unit's cgroup, as under systemd."""
    if group is None:
        return None
    procs = str(group / "cgroup.procs")

    def join() -> None:
        with open(procs, "w") as f:
            f.write("0")

    return join


def _unit_pids(group: Path | None, daemon) -> list[int]:
    """The pids systemd would count as the unit's: the cgroup's, or (without one) every process
    that carries the daemon's runtime dir in its environment, which its jobs inherit."""
    if group is not None:
        return _cgroup_pids(group)
    return processes_with_env(f"GPUPLANE_RUNTIME_DIR={daemon.runtime_dir}")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_systemctl_stop_as_the_unit_declares_leaves_the_job_running_and_the_next_daemon_adopts_it(
        daemon_factory, tmp_path, unit_cgroup):
    rules = ServiceRules.from_file(SYSTEM_UNIT)
    daemon = daemon_factory("--gpus=fake:1").start(preexec_fn=_enter(unit_cgroup))
    daemon.wait_ready()
    jobs = Jobs(daemon, tmp_path / "work")
    jobs.wait_node()
    job = jobs.sh("""
        echo $$ > pid
        i=0
        while [ ! -e finish ]; do i=$((i+1)); echo "line $i"; sleep 0.01; done
        echo done
    """, gpu=1)
    jobs.wait(job["id"], "RUNNING")
    job_pid = int(wait_for(lambda: jobs.file("pid").exists() and jobs.file("pid").read_text().strip(),
                           what="the job to write its pid"))
    unit_pids = _unit_pids(unit_cgroup, daemon)
    # The job is one of the unit's processes: KillMode=control-group would signal it too.
    assert job_pid in unit_pids and daemon.pid in unit_pids
    assert (job_pid, rules.kill_signal) in ServiceRules(("x",), kill_mode="control-group").stop_signals(
        daemon.pid, unit_pids)

    # systemctl stop (or restart, or a package upgrade): what the unit's KillMode sends.
    stop = rules.stop_signals(daemon.pid, unit_pids)
    assert stop == [(daemon.pid, signal.SIGTERM)]
    for pid, signum in stop:
        os.kill(pid, signum)
    returncode = daemon.wait_exit()
    assert returncode == 0, daemon.log()
    assert not rules.restarts_after(returncode)  # a clean stop: Restart=on-failure leaves it down

    out = daemon.home / "jobs" / job["id"] / "attempt-1" / "stdout.log"
    size = out.stat().st_size
    wait_for(lambda: out.stat().st_size > size + 100, what="the job to keep writing while no daemon runs")
    assert _alive(job_pid)
    if unit_cgroup is not None:
        assert job_pid in _cgroup_pids(unit_cgroup)  # still the unit's: the next start finds it there

    # systemctl start: a new main process in the same unit adopts the job.
    jobs.daemon = daemon_factory("--gpus=fake:1").start(preexec_fn=_enter(unit_cgroup))
    jobs.daemon.wait_ready()
    jobs.wait_node()
    assert jobs.wait(job["id"], "RUNNING")["status"] == "RUNNING"
    jobs.file("finish").touch()
    done = jobs.wait(job["id"])
    assert (done["status"], done["exit_code"]) == ("SUCCEEDED", 0)
    lines = out.read_text().splitlines()
    assert lines[-1] == "done" and lines[:-1] == [f"line {i}" for i in range(1, len(lines))]


def test_restart_on_failure_spares_usage_errors_and_a_busy_endpoint_and_restarts_a_crash(daemon_factory, tmp_path):
    rules = ServiceRules.from_file(SYSTEM_UNIT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANE_")}

    bad_config = tmp_path / "bad.toml"
    bad_config.write_text("no_such_key = 1\n")
    usage = subprocess.run([sys.executable, "-m", "gpuplaned", "--config", str(bad_config)], env=env,
                           capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert usage.returncode == EXIT_USAGE, usage.stderr
    assert not rules.restarts_after(usage.returncode)

    first = daemon_factory().start()
    first.wait_ready()
    second = daemon_factory(name="d").start()  # the same dirs: the endpoint is taken
    busy = second.wait_exit()
    assert busy == EXIT_ENDPOINT_BUSY, second.log()
    assert not rules.restarts_after(busy)

    first.signal(signal.SIGKILL)
    crashed = first.wait_exit()
    assert crashed == -signal.SIGKILL
    assert rules.restarts_after(crashed)  # a crash is restarted (and the e2e tests show the restart adopts jobs)
    assert rules.restarts_after(1)  # so is a runtime error
