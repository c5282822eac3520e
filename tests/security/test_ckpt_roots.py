"""Checkpoint files stay in their run's folders (issue 29, items 2 and 3), on real files, real
symbolic links and a real daemon:

- the watcher neither walks a ``checkpoints -> /elsewhere`` link nor takes a linked file;
- retention deletes nothing reached through such a link, and nothing whose size matches but
  whose content differs (a file is deleted only on the fingerprint the daemon took of it);
- ``ckpt verify`` hashes nothing outside the run's folders;
- a run a script opened through an agent has its files on the agent's host: the server
  touches nothing at its paths;
- a deletion walks down from the run's folder following no link.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers import Jobs, wait_for
from remote_cluster import Cluster

from gpuplaned.checkpoints import on_disk
from gpuplaned.checkpoints.files import fingerprint
from gpuplaned.checkpoints.recognize import find_candidates
from gpuplaned.protocol.checkpoint_ops import CheckpointRemove

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk"


# ------------------------------------------------------------------ on real files, no daemon


def test_the_walk_follows_no_link_out_of_the_jobs_folder(tmp_path):
    cwd, elsewhere = tmp_path / "job", tmp_path / "elsewhere"
    cwd.mkdir()
    elsewhere.mkdir()
    (elsewhere / "step_1.pt").write_bytes(b"x")
    (cwd / "checkpoints").symlink_to(elsewhere)
    (cwd / "outputs").mkdir()
    (cwd / "outputs" / "step_2.pt").write_bytes(b"y")
    (cwd / "outputs" / "step_3.pt").symlink_to(elsewhere / "step_1.pt")  # a linked file is not taken either
    (cwd / "outputs" / "deep").symlink_to(elsewhere)
    found = [c.path for root in ("checkpoints", "outputs") for c in find_candidates(str(cwd / root), str(cwd))]
    assert found == [str(cwd / "outputs" / "step_2.pt")]
    (cwd / "inside").mkdir()  # a link that stays in the job's folder is walked
    (cwd / "inside" / "step_4.pt").write_bytes(b"z")
    (cwd / "runs").symlink_to(cwd / "inside")
    assert [c.path for c in find_candidates(str(cwd / "runs"), str(cwd))] == [str(cwd / "runs" / "step_4.pt")]


def test_a_deletion_takes_only_a_fingerprinted_file_really_inside_the_roots(tmp_path):
    root, elsewhere = tmp_path / "job", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    target = elsewhere / "a.pt"
    target.write_bytes(b"a" * 64)
    (root / "checkpoints").symlink_to(elsewhere)
    through = str(root / "checkpoints" / "a.pt")
    roots = (str(root),)

    refused = on_disk.remove(CheckpointRemove(through, fingerprint(through), 64, False, roots))
    assert "outside its run's folders" in refused.refused and target.exists()
    assert "no folder" in on_disk.remove(CheckpointRemove(str(target), fingerprint(str(target)), 64, False)).refused
    mine = root / "b.pt"
    mine.write_bytes(b"b" * 64)
    unfingerprinted = on_disk.remove(CheckpointRemove(str(mine), None, 64, False, roots))
    assert "size alone" in unfingerprinted.refused and mine.exists()
    assert "folders itself" in on_disk.remove(CheckpointRemove(str(root), None, None, False, roots)).refused
    assert on_disk.remove(CheckpointRemove(str(mine), fingerprint(str(mine)), 64, False, roots)).gone
    assert not mine.exists() and target.exists()
    assert "outside" in on_disk.read(through, roots).error


# ------------------------------------------------------------------ on a real daemon

JOB = """
import os, time, gpuplane
run = gpuplane.init()
os.makedirs("outputs", exist_ok=True)
for step, folder in ((1, "checkpoints"), (2, "outputs"), (3, "outputs")):
    path = f"{folder}/step_{step}.pt"
    with open(path, "wb") as f:
        f.write(bytes([step]) * 4096)
    run.log({"val/loss": 1.0 / step}, step=step)
    run.log_checkpoint(path, step=step)
with open("outputs/step_9.pt", "wb") as f:  # the watcher's alone
    f.write(b"9" * 4096)
run.finish()
"""


@pytest.fixture
def jobs(daemon_factory, tmp_path) -> Jobs:
    config = tmp_path / "d" / "config" / "gpuplane"
    config.mkdir(parents=True)
    (config / "gpuplaned.toml").write_text("[checkpoints]\nstable_s = 0.3\nrescan_interval_s = 0.1\n")
    jobs = Jobs.start(daemon_factory, tmp_path / "work", "--gpus=fake:1")
    jobs.client.request("PUT", "/api/v1/primary-metric", {"metric": "val/loss"})
    return jobs


def _checkpoints(jobs: Jobs, run_id: str) -> list[dict]:
    return jobs.client.get(f"/api/v1/runs/{run_id}/checkpoints")["checkpoints"]


def _under(jobs: Jobs, checkpoint: dict, folder: str) -> bool:
    return checkpoint["path"].startswith(str(jobs.workdir / folder) + os.sep)


def test_a_symlinked_checkpoints_dir_is_neither_watched_nor_deleted_from(jobs, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (jobs.workdir / "checkpoints").symlink_to(elsewhere)
    job = jobs.submit([sys.executable, "-c", JOB], gpu=0, env={"PYTHONPATH": str(SDK_DIR)})
    run_id = jobs.wait(job["id"], timeout=60)["run_id"]
    assert jobs.get(job["id"])["status"] == "SUCCEEDED", jobs.daemon.log()

    # The watcher registers outputs/step_9.pt, which the script did not, in the pass that would
    # have taken the linked one (written first): once it is there, the linked one was not taken.
    found = wait_for(lambda: (cks := _checkpoints(jobs, run_id)) and
                     any(c["path"] == str(jobs.workdir / "outputs" / "step_9.pt") for c in cks) and cks,
                     timeout=20, what="the watcher's outputs/step_9.pt")
    linked = [c for c in found if _under(jobs, c, "checkpoints")]
    assert [c["fingerprint"] for c in linked] == [None], found  # the script's word only, never the watcher's

    pruned = jobs.client.post(f"/api/v1/runs/{run_id}/checkpoints/prune",
                              {"keep_best": 0, "keep_last": 1, "dry_run": False})
    by_path = {r["path"]: r["reason"] for r in pruned["refused"]}
    assert "outside its run's folders" in by_path[str(jobs.workdir / "checkpoints" / "step_1.pt")], pruned
    # The best (step 3) and the last (step 9) stay; step 2 goes, so step 1 was refused, not spared.
    assert [d["path"] for d in pruned["deleted"]] == [str(jobs.workdir / "outputs" / "step_2.pt")], pruned
    assert (elsewhere / "step_1.pt").read_bytes() == bytes([1]) * 4096
    assert not (jobs.workdir / "outputs" / "step_2.pt").exists()


def _script_run(jobs: Jobs, cwd: Path, paths: dict[int, Path], losses: dict[int, float]) -> str:
    """A run a script opened over the local socket in ``cwd``, with ``val/loss`` and a checkpoint per step."""
    opened = jobs.client.post("/api/v1/sessions", {"cwd": str(cwd)})
    steps = sorted(losses)
    jobs.client.post(f"/api/v1/sessions/{opened['session_id']}/batches", {
        "seq": 1, "metrics": {"val/loss": {"step": steps, "ts": steps, "value": [losses[s] for s in steps]}},
        "checkpoints": [{"path": str(paths[s]), "step": s, "size_bytes": paths[s].stat().st_size} for s in steps]})
    return opened["run_id"]


def test_a_file_of_the_registered_size_but_other_content_is_not_deleted(jobs, tmp_path):
    cwd = tmp_path / "script"
    cwd.mkdir()
    paths = {s: cwd / f"step_{s}.pt" for s in (10, 20, 30, 40)}
    for step, path in paths.items():
        path.write_bytes(bytes([step]) * 777)
    run_id = _script_run(jobs, cwd, paths, {10: 0.1, 20: 0.5, 30: 0.6, 40: 0.7})
    assert all(c["fingerprint"] for c in _checkpoints(jobs, run_id))  # taken as the script registered them
    stat = paths[20].stat()
    paths[20].write_bytes(b"\0" * 777)  # another file of the same size and mtime
    os.utime(paths[20], ns=(stat.st_atime_ns, stat.st_mtime_ns))

    pruned = jobs.client.post(f"/api/v1/runs/{run_id}/checkpoints/prune",
                              {"keep_best": 1, "keep_last": 1, "dry_run": False})
    assert [d["path"] for d in pruned["deleted"]] == [str(paths[30])], pruned
    [refused] = pruned["refused"]
    assert refused["path"] == str(paths[20]) and "fingerprint differs" in refused["reason"]
    assert paths[20].read_bytes() == b"\0" * 777 and not paths[30].exists()


def test_verify_hashes_nothing_outside_the_runs_folders(jobs, tmp_path):
    cwd, outside = tmp_path / "script", tmp_path / "secret.bin"
    cwd.mkdir()
    outside.write_bytes(b"s" * 100)
    inside = cwd / "step_1.pt"
    inside.write_bytes(b"i" * 100)
    run_id = _script_run(jobs, cwd, {1: inside, 2: outside}, {1: 0.5, 2: 0.4})
    by_step = {c["step"]: c for c in _checkpoints(jobs, run_id)}
    assert by_step[2]["fingerprint"] is None  # the daemon took no fingerprint of a file outside
    secret = jobs.client.post(f"/api/v1/checkpoints/{by_step[2]['id']}/verify")
    assert secret["present"] is False and secret["full_hash"] is None and "outside" in secret["error"], secret
    mine = jobs.client.post(f"/api/v1/checkpoints/{by_step[1]['id']}/verify")
    assert mine["present"] is True and mine["changed"] is False and mine["full_hash"].startswith("sha256:")


def test_a_run_an_agent_relayed_keeps_its_files_on_the_agents_host(tmp_path):
    """A script on an agent's node opens its run through the agent: its paths name that host's
    files, so the server neither fingerprints nor deletes what lies at those paths on its own."""
    cluster = Cluster(tmp_path / "cluster")
    try:
        agent = cluster.agent("a1", cluster.token("agents", ["agent"]))
        cwd = tmp_path / "script"
        cwd.mkdir()
        paths = {s: cwd / f"step_{s}.pt" for s in (1, 2, 3)}
        for step, path in paths.items():
            path.write_bytes(bytes([step]) * 100)
        run_id = _script_run(Jobs(agent.daemon, cwd), cwd, paths, {1: 0.1, 2: 0.5, 3: 0.6})
        server = Jobs(cluster.server, cwd)
        assert [c["fingerprint"] for c in _checkpoints(server, run_id)] == [None] * 3
        pruned = cluster.api.post(f"/api/v1/runs/{run_id}/checkpoints/prune",
                                  {"keep_best": 0, "keep_last": 1, "dry_run": False})
        assert pruned["deleted"] == [] and len(pruned["refused"]) == 2, pruned
        assert all(p.exists() for p in paths.values())
    finally:
        cluster.close()


def test_a_link_inside_a_checkpoint_dir_is_neither_read_nor_hashed(tmp_path):
    hf = tmp_path / "job" / "outputs" / "checkpoint-10"
    hf.mkdir(parents=True)
    (hf / "model.safetensors").write_bytes(b"m" * 64)
    secret = tmp_path / "secret.key"
    secret.write_bytes(b"one")
    (hf / "leak.bin").symlink_to(secret)
    roots = (str(tmp_path / "job"),)
    before = on_disk.read(str(hf), roots)
    secret.write_bytes(b"two, longer")
    after = on_disk.read(str(hf), roots)
    assert before.present and (before.full_hash, before.size_bytes) == (after.full_hash, 64)
    assert on_disk.remove(CheckpointRemove(str(hf), after.fingerprint, 64, False, roots)).gone
    assert secret.read_bytes() == b"two, longer" and not hf.exists()
