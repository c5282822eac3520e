"""A private single-node Slurm for the tests: munged, slurmctld and slurmd under one folder.

Everything lives under ``root``: the configuration, the state, the logs, munge's socket and
key, the spool and the fake GPU device files (symlinks to /dev/null, which gres.conf accepts
as GPUs; ../shared/research/infra.md §A has how this was found). Clients find it through
``SLURM_CONF``; nothing touches /etc/slurm, /run/munge or systemd, and the ports are free
ones picked at start, so two test files (two xdist workers) each run their own.

The three daemons run in the foreground as this process's children, so ``stop`` ends them by
their own handles (never by name) and reaps them. Jobs run under slurmstepd, which slurmd
starts detached: ``stop`` first cancels every job and then ends any process left that carries
this cluster's ``SLURM_CONF`` or runs one of its job steps, so nothing outlives the fixture.

Debian 12's packages (Slurm 22.05.8, munge 0.5.15) are what ``make test`` installs:
``apt-get install --no-install-recommends slurmctld slurmd slurm-client munge``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from gpuplaned.slurm import SlurmCli, SlurmPaths

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")
INSTALL_HINT = ("`make test` installs them: apt-get install --no-install-recommends slurmctld slurmd "
                "slurm-client munge")
START_LIMIT_S = 30.0
STOP_GRACE_S = 5.0


class SlurmUnavailable(Exception):
    """Slurm is not installed here, or did not come up; the message says which and why."""


def missing_programs() -> list[str]:
    return [name for name in PROGRAMS if shutil.which(name, path=_SEARCH_PATH) is None]


_SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _program(name: str) -> str:
    found = shutil.which(name, path=_SEARCH_PATH)
    if found is None:
        raise SlurmUnavailable(f"{name} is not installed; {INSTALL_HINT}")
    return found


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class SlurmCluster:
    """One private Slurm: ``start()`` returns once its node is idle, ``stop()`` leaves nothing.

    Args:
        root: an empty folder for everything the cluster keeps; by default a new one under
            the temp dir, mode 0755 (munged refuses a socket under a folder others cannot
            enter, which pytest's tmp_path is).
        gpus: how many fake GPUs the node has.
        min_job_age: slurm.conf's MinJobAge, how long a finished job stays in squeue (s).
    """

    def __init__(self, root: Path | None = None, *, gpus: int = 1, min_job_age: int = 300) -> None:
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="gp-slurm-"))
            root.chmod(0o755)
        self.root = root.resolve()
        self.gpus = gpus
        self.min_job_age = min_job_age
        self.node = socket.gethostname().split(".")[0]
        self.conf = self.root / "etc" / "slurm.conf"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def env(self) -> dict[str, str]:
        """The environment a client of this cluster runs with."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        missing = missing_programs()
        if missing:
            raise SlurmUnavailable(f"not installed: {', '.join(missing)}; {INSTALL_HINT}")
        self._write_config()
        log = self.root / "log"
        self._spawn("munged", [_program("munged"), "-F", f"--socket={self.root / 'run' / 'munge.socket'}",
                               f"--key-file={self.root / 'munge' / 'munge.key'}",
                               f"--log-file={log / 'munged.log'}", f"--pid-file={self.root / 'run' / 'munged.pid'}",
                               f"--seed-file={self.root / 'munge' / 'munged.seed'}"])
        self._wait_for(lambda: (self.root / "run" / "munge.socket").exists(), "munged's socket")
        # -c: no saved state, so nothing of an earlier run (a DRAIN reason, old jobs) survives.
        self._spawn("slurmctld", [_program("slurmctld"), "-D", "-c", "-i"])
        self._spawn("slurmd", [_program("slurmd"), "-D", "-N", self.node])
        self._wait_for(self._node_idle, f"node {self.node} to be idle")

    def _write_config(self) -> None:
        for sub in ("etc", "state", f"spool/{self.node}", "log", "run", "munge", "dev"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "run").chmod(0o755)  # munged refuses a socket folder others cannot enter
        (self.root / "munge").chmod(0o700)
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            key.chmod(0o400)
        for i in range(self.gpus):
            (self.root / "dev" / f"nvidia{i}").symlink_to("/dev/null")
        ctld_port, slurmd_port = _free_ports(2)
        self.conf.write_text(f"""\
ClusterName=gp{ctld_port}
SlurmctldHost={self.node}(127.0.0.1)
SlurmUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={self.root}/run/munge.socket
CredType=cred/munge
AccountingStorageType=accounting_storage/none
StateSaveLocation={self.root}/state
SlurmdSpoolDir={self.root}/spool/%n
SlurmctldPidFile={self.root}/run/slurmctld.pid
SlurmdPidFile={self.root}/run/slurmd.pid
SlurmctldLogFile={self.root}/log/slurmctld.log
SlurmdLogFile={self.root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
MinJobAge={self.min_job_age}
DefMemPerCPU=100
GresTypes=gpu
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory=2000 Gres=gpu:fake:{self.gpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        last = f"[0-{self.gpus - 1}]" if self.gpus > 1 else "0"
        (self.root / "etc" / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName={self.node} Name=gpu Type=fake File={self.root}/dev/nvidia{last}\n")

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(self.root / "log" / f"{name}.out", "wb")  # noqa: SIM115 - the child holds it
        with out:
            self.procs[name] = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                                                stderr=subprocess.STDOUT, start_new_session=True)

    def _wait_for(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_LIMIT_S
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise SlurmUnavailable(f"{name} exited with {proc.returncode} while waiting for {what}"
                                           f"\n{self.logs_tail()}")
            if ready():
                return
            time.sleep(0.1)
        raise SlurmUnavailable(f"no {what} after {START_LIMIT_S:.0f} s\n{self.logs_tail()}")

    def _node_idle(self) -> bool:
        try:
            out = subprocess.run([_program("sinfo"), "-h", "-n", self.node, "-o", "%t"], env=self.env,
                                 capture_output=True, text=True, timeout=5)
        except subprocess.TimeoutExpired:
            return False
        return out.stdout.strip() == "idle"

    def logs_tail(self, lines: int = 15) -> str:
        parts = []
        for path in sorted((self.root / "log").glob("*")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(parts)

    def cli(self, *, timeout_s: float = 10.0) -> SlurmCli:
        """GPUPlane's command layer, pointed at this cluster."""
        return SlurmCli(SlurmPaths(), timeout_s=timeout_s, env=self.env)

    def client(self, *argv: str, timeout: float = 10) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (for the tests' own checks)."""
        return subprocess.run([_program(argv[0]), *argv[1:]], env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def pause_controller(self) -> None:
        """SIGSTOP slurmctld: it accepts connections (the kernel does) but answers nothing."""
        os.kill(self.procs["slurmctld"].pid, signal.SIGSTOP)

    def resume_controller(self) -> None:
        os.kill(self.procs["slurmctld"].pid, signal.SIGCONT)

    def job_processes(self) -> list[int]:
        """Live processes of this cluster's jobs: what a job started (Slurm puts this cluster's
        ``SLURM_CONF`` in every job's environment) and the job steps (slurmstepd, which keeps
        a socket in this cluster's spool open). The daemons' own helpers are not jobs."""
        wanted = f"SLURM_CONF={self.conf}".encode()
        daemons = {proc.pid for proc in self.procs.values()}
        found = []
        for name in os.listdir("/proc"):
            pid = int(name) if name.isdigit() else 0
            if not pid or pid == os.getpid() or pid in daemons:
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rpartition(")")[2].split()[0] in ("Z", "X"):
                        continue
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
            except OSError:
                continue
            if cmdline.startswith((b"slurmctld", b"slurmd")):
                continue  # slurmctld's slurmscriptd: it goes with slurmctld
            if wanted in environ or (cmdline.startswith(b"slurmstepd") and self._holds_file_under_root(pid)):
                found.append(pid)
        return found

    def _holds_file_under_root(self, pid: int) -> bool:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            return False
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(str(self.root)):
                    return True
            except OSError:
                continue
        return False

    def stop(self) -> None:
        """Cancel every job, end the daemons (slurmd first: it ignores TERM while it retries a
        dead controller, hence KILL after a grace), then anything left of the jobs."""
        ctld = self.procs.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            os.kill(ctld.pid, signal.SIGCONT)  # a test may have left it paused
            try:
                self.client("scancel", "--full", "-u", "root", timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        deadline = time.monotonic() + STOP_GRACE_S
        while (left := self.job_processes()) and time.monotonic() < deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.05)  # a killed process takes a moment to become a zombie

    def remove(self) -> None:
        """Delete the cluster's folder (after ``stop``)."""
        shutil.rmtree(self.root, ignore_errors=True)
