"""``gpuplanectl backup --agent`` on a real remote agent (issue 28): an agent keeps no database,
and its backup holds what the server does not have, its unsent spool, job dirs and identity
(``uplink/agent-id``, the token file), so that a box reinstalled from it resumes as the same
agent and the server gets everything the box had not sent yet."""

from __future__ import annotations

import shutil
import tarfile

import pytest
from helpers import kill_processes_with_env, wait_for
from remote_cluster import Cluster

from gpuplaned.launching.job_files import EXIT_FILE

pytestmark = pytest.mark.e2e

LINES = 300
# Waits for "go", then writes its output and ends: all of it while the link is cut.
JOB = f'while [ ! -e go ]; do sleep 0.05; done; for i in $(seq 1 {LINES}); do echo "line $i"; done'


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(tmp_path / "remote")
    yield cluster
    cluster.close()


def spooled(home, *needles: str) -> bool:
    """Some unacknowledged spool line holds every needle."""
    for segment in sorted((home / "uplink").glob("*.jsonl")):
        for line in segment.read_text(errors="replace").splitlines():
            if all(needle in line for needle in needles):
                return True
    return False


def test_an_agents_backup_brings_a_reinstalled_box_back_without_loss(cluster, tmp_path):
    token_file = tmp_path / "agent.token"
    token = cluster.token("box", ["agent"])
    token_file.write_text(token + "\n")
    config = cluster.config.read_text()
    cluster.config.write_text(config.replace("[uplink]\n", f'[uplink]\ntoken_file = "{token_file}"\n'))
    agent = cluster.agent("box", token)
    node_id = agent.node()["id"]
    home = agent.daemon.home
    agent_id = (home / "uplink" / "agent-id").read_text()
    work = tmp_path / "work"
    work.mkdir()
    job = cluster.api.post("/api/v1/jobs", {"command": ["sh", "-c", JOB], "cwd": str(work), "gpu": 0,
                                            "node": "box"})["job"]
    job = cluster.wait_job(job["id"], "RUNNING")

    agent.proxy.cut()  # from here on the box keeps what it learns in its spool
    (work / "go").touch()
    wait_for((agent.log_file(job).parent / EXIT_FILE).exists, 30, what="the job to end on the box")
    wait_for(lambda: spooled(home, '"stream":"logs"', f"line {LINES}")
             and spooled(home, '"stream":"status"', job["id"]), 30, what="the job's output and end in the spool")

    refused = agent.daemon.run_ctl("backup", "--to", str(tmp_path / "nope"))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"{home} is an agent's home: it keeps no database" in refused.stderr and "--agent" in refused.stderr

    backup = tmp_path / "backup"
    done = agent.daemon.run_ctl("backup", "--agent", "--to", str(backup))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"backed up {home} to {backup}" in done.stdout and "gpuplane.db" not in done.stdout
    assert f"agent-token: the agent token ([uplink] token_file {token_file})" in done.stdout
    with tarfile.open(backup / "agent.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"uplink/agent-id", "uplink/state.json", f"jobs/{job['id']}/attempt-1/stdout.log"} <= names
    assert (backup / "agent-token").read_text() == token + "\n"

    # The box dies and is reinstalled: its home and token file are gone.
    agent.daemon.kill()
    kill_processes_with_env(f"GPUPLANE_RUNTIME_DIR={agent.daemon.runtime_dir}")
    cluster.wait_job(job["id"], "LOST", timeout=30)
    shutil.rmtree(home)
    token_file.unlink()

    not_agent = agent.daemon.run_ctl("restore", str(backup))
    assert not_agent.returncode == 2
    assert "is an agent's backup (no database): restore it with --agent" in not_agent.stderr
    restored = agent.daemon.run_ctl("restore", "--agent", str(backup))
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert f"agent token: not put back; the backup's copy is {backup / 'agent-token'} (it was {token_file})" \
        in restored.stdout
    shutil.copy(backup / "agent-token", token_file)  # what the user does with it
    assert (home / "uplink" / "agent-id").read_text() == agent_id

    agent.proxy.restore()
    agent.restart()
    wait_for(lambda: (agent.node() or {}).get("status") == "ONLINE", 30, what="the box ONLINE again")
    assert agent.node()["id"] == node_id  # the same node, by the same agent
    ended = cluster.wait_job(job["id"], "SUCCEEDED", "FAILED", timeout=30)
    assert (ended["status"], ended["exit_code"]) == ("SUCCEEDED", 0)

    def stored_lines() -> list[str] | None:
        lines = cluster.api.get(f"/api/v1/jobs/{job['id']}/logs?stream=stdout&tail={LINES}")["lines"]
        return [line["line"] for line in lines] if len(lines) == LINES else None

    assert wait_for(stored_lines, 30, what="every line the box had not sent") == \
        [f"line {i}" for i in range(1, LINES + 1)]
