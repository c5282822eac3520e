"""A server and remote agents on loopback, for the remote-agent tests (issue 18): one ``--role
server`` daemon, and ``--role agent`` daemons each with its own home, runtime dir, fake GPU and node
name, dialing the server through its own TCP proxy (``tests/netproxy.py``) so a test can cut,
stall and restore each link."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from helpers import DaemonProcess, kill_processes_with_env, wait_for
from netproxy import TcpProxy

from gpuplaned.home import attempt_dir

HEARTBEAT_S = 0.3
# reconnect_max_s: a cut link fails each dial at once, so during a minute's cut the backoff reaches
# its ceiling; the tests give a restored link 30 s to come back, which the default 30 s would not.
CONFIG = (f"[uplink]\nheartbeat_s = {HEARTBEAT_S}\nreconnect_max_s = 3\n"
          "[checkpoints]\nstable_s = 0.3\nrescan_interval_s = 0.1\n")


class Agent:
    """One ``--role agent`` daemon and the proxy it dials the server through."""

    def __init__(self, cluster: Cluster, name: str, token: str, *, proxied: bool = True) -> None:
        self.cluster = cluster
        self.name = name
        self.token = token
        self.proxy = TcpProxy(cluster.http_address) if proxied else None
        self.daemon = self._process()

    def _process(self) -> DaemonProcess:
        url = self.proxy.url if self.proxy else self.cluster.http_url
        return self.cluster.track(DaemonProcess(
            self.cluster.root / self.name, "--role", "agent", "--server", url, "--gpus", "fake:1",
            "--node-name", self.name, "--config", str(self.cluster.config), env={"GPUPLANE_TOKEN": self.token}))

    def start(self) -> Agent:
        self.daemon.start()
        self.daemon.wait_ready()
        return self

    def restart(self) -> None:
        self.daemon = self._process()
        self.start()

    def node(self) -> dict | None:
        return self.cluster.node(self.name)

    def log_file(self, job: dict, stream: str = "stdout") -> Path:
        return attempt_dir(self.daemon.home, job["id"], job["attempt"]) / f"{stream}.log"


class Cluster:
    def __init__(self, root: Path, extra_config: str = "") -> None:
        self.root = root
        self.config = root / "gpuplaned.toml"
        root.mkdir(parents=True, exist_ok=True)
        self.config.write_text(CONFIG + extra_config)
        self.processes: list[DaemonProcess] = []
        self.agents: list[Agent] = []
        self.server = self.start_server()

    def track(self, process: DaemonProcess) -> DaemonProcess:
        self.processes.append(process)
        return process

    def start_server(self) -> DaemonProcess:
        server = self.track(DaemonProcess(self.root / "server", "--role", "server", "--http", "127.0.0.1:0",
                                          "--config", str(self.config)))
        server.start()
        info = server.wait_ready()
        self.http_url = info["endpoints"]["http"]
        split = urlsplit(self.http_url)
        self.http_address = (split.hostname, split.port)
        return server

    def restart_server(self) -> None:
        self.server = self.start_server()
        for agent in self.agents:
            if agent.proxy:
                agent.proxy.retarget(self.http_address)

    @property
    def api(self):
        return self.server.client()

    def token(self, name: str, scopes: list[str]) -> str:
        return self.api.post("/api/v1/tokens", {"name": name, "scopes": scopes})["secret"]

    def agent(self, name: str, token: str) -> Agent:
        agent = Agent(self, name, token).start()
        self.agents.append(agent)
        wait_for(lambda: (self.node(name) or {}).get("status") == "ONLINE", 15, what=f"node {name} ONLINE")
        return agent

    def nodes(self) -> list[dict]:
        return self.api.get("/api/v1/nodes")["nodes"]

    def node(self, name: str) -> dict | None:
        return next((n for n in self.nodes() if n["name"] == name), None)

    def job(self, job_id: str) -> dict:
        return self.api.get(f"/api/v1/jobs/{job_id}")["job"]

    def wait_job(self, job_id: str, *states: str, timeout: float = 30.0) -> dict:
        def reached() -> dict | None:
            job = self.job(job_id)
            return job if job["status"] in states else None
        return wait_for(reached, timeout, interval=0.05, what=f"{job_id} to be {'/'.join(states)}")

    def close(self) -> None:
        for agent in self.agents:
            if agent.proxy:
                agent.proxy.close()
        for process in self.processes:
            process.kill()
        for process in self.processes:  # jobs outlive their daemon by design, not the test
            kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={process.runtime_dir}")


@contextmanager
def running(root: Path, *agents: str, extra_config: str = "") -> Iterator[Cluster]:
    """A server and the named agents (one agent token for all), each ONLINE; everything stopped
    on the way out."""
    cluster = Cluster(root, extra_config)
    try:
        token = cluster.token("agents", ["agent"])
        for name in agents:
            cluster.agent(name, token)
        yield cluster
    finally:
        cluster.close()
