"""Recognizers, fingerprints and open-for-writing checks on real files: ``torch.save``
files, Hugging Face ``checkpoint-*/`` dirs with a real ``trainer_state.json``, Lightning
names, DeepSpeed shard dirs, and a real child process that holds a file open."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from gpuplaned.checkpoints.files import fingerprint, full_hash, observe
from gpuplaned.checkpoints.recognize import (
    DEEPSPEED,
    FILE,
    HF,
    LIGHTNING,
    Candidate,
    file_step,
    find_candidates,
    resolve,
    watched_roots,
)
from gpuplaned.job_processes import JobProcesses


def _save(path, step):
    torch.save({"step": step, "weights": torch.arange(1000, dtype=torch.float32) * step}, path)


def _hf_dir(root, step, epoch):
    d = root / f"checkpoint-{step}"
    d.mkdir(parents=True)
    torch.save({"w": torch.ones(10)}, d / "pytorch_model.bin")
    (d / "config.json").write_text("{}")
    # What transformers' Trainer writes (TrainerState.save_to_json), trimmed of nothing we read.
    state = {"best_metric": None, "best_model_checkpoint": None, "epoch": epoch, "eval_steps": 500,
             "global_step": step, "is_hyper_param_search": False, "is_local_process_zero": True,
             "is_world_process_zero": True, "log_history": [{"epoch": epoch, "loss": 1.5, "step": step}],
             "logging_steps": 10, "max_steps": 1000, "num_train_epochs": 3, "save_steps": step,
             "total_flos": 0.0, "train_batch_size": 8, "trial_name": None, "trial_params": None}
    (d / "trainer_state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
    return d


def _by_path(root):
    return {os.path.relpath(c.path, root): resolve(c) for c in find_candidates(str(root))}


def test_torch_save_files_are_recognised_with_their_step(tmp_path):
    for step in (100, 200):
        _save(tmp_path / f"step_{step}.pt", step)
    _save(tmp_path / "model_000300.pth", 300)
    _save(tmp_path / "last.pt", 300)
    _save(tmp_path / "ckpt-400.pt.tmp", 400)  # a save in progress
    _save(tmp_path / "step_500.pt.partial", 500)
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    found = _by_path(tmp_path)
    assert found == {
        "step_100.pt": Candidate(str(tmp_path / "step_100.pt"), FILE, 100),
        "step_200.pt": Candidate(str(tmp_path / "step_200.pt"), FILE, 200),
        "model_000300.pth": Candidate(str(tmp_path / "model_000300.pth"), FILE, 300),
        "last.pt": Candidate(str(tmp_path / "last.pt"), FILE, None),
    }
    assert torch.load(tmp_path / "step_200.pt")["step"] == 200  # read, never touched


@pytest.mark.parametrize(("name", "expected"), [
    ("epoch=3-step=400.ckpt", (LIGHTNING, 400, 3.0)),
    ("epoch=0-step=50-v1.ckpt", (LIGHTNING, 50, 0.0)),
    ("model-epoch=2-step=300-val_loss=0.12.ckpt", (LIGHTNING, 300, 2.0)),
    ("global_step1200.pt", (FILE, 1200, None)),
    ("iter_700.safetensors", (FILE, 700, None)),
    ("model.safetensors", (FILE, None, None)),
    ("best.ckpt", (FILE, None, None)),
])
def test_names(name, expected):
    assert file_step(name) == expected


def test_a_hugging_face_dir_is_one_checkpoint_with_step_and_epoch_from_trainer_state(tmp_path):
    _hf_dir(tmp_path / "outputs", 500, 1.25)
    bare = tmp_path / "outputs" / "checkpoint-1000"
    bare.mkdir()
    torch.save({}, bare / "pytorch_model.bin")  # no trainer_state.json (yet): the name's step
    broken = _hf_dir(tmp_path / "outputs" / "b", 7, 0.1)
    (broken / "trainer_state.json").write_text('{"global_step": "seven"}')
    found = _by_path(tmp_path)
    assert found == {
        "outputs/checkpoint-500": Candidate(str(tmp_path / "outputs/checkpoint-500"), HF, 500, 1.25),
        "outputs/checkpoint-1000": Candidate(str(bare), HF, 1000, None),
        "outputs/b/checkpoint-7": Candidate(str(broken), HF, 7, None),
    }


def test_lightning_and_deepspeed_layouts(tmp_path):
    lightning = tmp_path / "runs/lightning_logs/version_0/checkpoints"
    lightning.mkdir(parents=True)
    _save(lightning / "epoch=1-step=20.ckpt", 20)
    shard = tmp_path / "checkpoints/global_step30"
    shard.mkdir(parents=True)
    for rank in (0, 1):
        _save(shard / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt", 30)
        _save(shard / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt", 30)
    (tmp_path / "checkpoints/latest").write_text("global_step30")
    found = _by_path(tmp_path)
    assert found == {
        "runs/lightning_logs/version_0/checkpoints/epoch=1-step=20.ckpt":
            Candidate(str(lightning / "epoch=1-step=20.ckpt"), LIGHTNING, 20, 1.0),
        "checkpoints/global_step30": Candidate(str(shard), DEEPSPEED, 30),
    }


def test_a_missing_root_has_none_and_the_roots_of_a_job(tmp_path):
    assert list(find_candidates(str(tmp_path / "nope"))) == []
    assert watched_roots("/w", ("ck", "/abs/out", "ck/")) == (
        "/w/checkpoints", "/w/outputs", "/w/runs", "/w/ck", "/abs/out")


def test_fingerprint_follows_content_size_and_mtime(tmp_path):
    path = tmp_path / "step_1.pt"
    _save(path, 1)
    first = fingerprint(str(path))
    assert first.startswith("sha1:") and fingerprint(str(path)) == first
    st = os.stat(path)
    obs = observe(str(path))
    assert (obs.size, obs.mtime_ns, obs.writing) == (st.st_size, st.st_mtime_ns, False)
    _save(path, 2)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime, other bytes
    assert fingerprint(str(path)) != first


def test_fingerprint_reads_only_the_edges_of_a_big_file(tmp_path):
    path = tmp_path / "big.bin"
    middle = 3 * 1024 * 1024
    with open(path, "wb") as f:
        f.write(b"a" * (1024 * 1024) + b"b" * middle + b"c" * (1024 * 1024))
    st = os.stat(path)
    before, full = fingerprint(str(path)), full_hash(str(path))
    with open(path, "r+b") as f:  # the test's own file: a change in the middle, same size and mtime
        f.seek(2 * 1024 * 1024)
        f.write(b"X")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert fingerprint(str(path)) == before  # what the fingerprint cannot see...
    assert full_hash(str(path)) != full  # ...the full hash does


def test_a_directory_fingerprint_and_observation_cover_its_files(tmp_path):
    d = _hf_dir(tmp_path, 10, 1.0)
    obs, fp = observe(str(d)), fingerprint(str(d))
    assert obs.size == sum(p.stat().st_size for p in d.iterdir())
    (d / "optimizer.pt").write_bytes(b"late")  # a file added later: both change
    assert observe(str(d)).size == obs.size + 4
    assert fingerprint(str(d)) != fp
    assert full_hash(str(d)).startswith("sha256:")


def test_a_file_held_open_for_writing_by_the_job_is_seen(tmp_path):
    path = tmp_path / "step_5.pt"
    with subprocess.Popen(
            [sys.executable, "-c", "import sys; f = open(sys.argv[1], 'wb'); f.write(b'x'); f.flush(); "
             "print('open', flush=True); sys.stdin.read()", str(path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True) as writer:
        assert writer.stdout.readline() == b"open\n"
        processes = JobProcesses()
        processes.track("job", pgid=writer.pid, main_pid=writer.pid, started_at=time.time())
        processes.track("none", pgid=writer.pid + 10_000_000, started_at=time.time())  # no such group
        processes.scan()
        held = writing(processes, "job")
        assert str(path) in held
        assert observe(str(path), held).writing
        assert observe(str(tmp_path), held).writing  # a directory holding it too
        assert writing(processes, "none") == frozenset()
        writer.stdin.close()
        writer.wait(10)
    assert str(path) not in writing(processes, "job")


def writing(processes: JobProcesses, key: str) -> frozenset[str]:
    """What ckptwatch takes as written by the job now: its open files in any mode but ``r``."""
    return frozenset(p for p, mode in processes.open_files(key) if mode != "r")
