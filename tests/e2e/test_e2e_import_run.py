"""``gpuplanectl import-run DIR`` on a real daemon: a finished run's dir written by real
``SummaryWriter``s (both scalar forms, ``add_scalars`` subfolders, a resumed writer whose steps
rewind across two files), real ``torch.save`` checkpoints and a Hugging Face style
``checkpoint-*/`` with ``trainer_state.json``, and stdout logs. Imported twice: the same run,
nothing added. Hostile input: a relative path, a file, a missing dir, a dir with nothing to
import, a corrupted event record (reported, the rest imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from urllib.parse import quote

import numpy as np
import pytest
import torch
from torch.utils.tensorboard import SummaryWriter

from gpuplaned.checkpoints.files import fingerprint
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.tensorboard.records import scan

pytestmark = pytest.mark.e2e


def write_run(root) -> None:
    """A finished run: two TensorBoard files (a resume from step 6), checkpoints, logs."""
    logdir = root / "runs" / "exp"
    with SummaryWriter(logdir) as first:
        for step in range(10):
            first.add_scalar("train/loss", 10.0 - step, step)  # simple_value
            first.add_scalar("lr", 0.5, step, new_style=True)  # a one-element tensor of the scalars plugin
            first.add_scalars("acc", {"train": step / 10, "val": step / 20}, step)  # one folder per tag
    with SummaryWriter(logdir) as second:  # resumed from step 6: its points replace the first's from there
        for step in range(6, 12):
            second.add_scalar("train/loss", 100.0 + step, step)
    model = torch.nn.Linear(8, 8)
    (root / "checkpoints").mkdir()
    for step in (5, 10):
        torch.save({"step": step, "model": model.state_dict()}, root / "checkpoints" / f"step_{step}.pt")
    hf = root / "outputs" / "checkpoint-12"
    hf.mkdir(parents=True)
    torch.save(model.state_dict(), hf / "pytorch_model.bin")
    (hf / "trainer_state.json").write_text(json.dumps({"global_step": 12, "epoch": 1.5, "log_history": []}))
    (root / "stdout.log").write_text("".join(f"step {s}\n" for s in range(12)))
    (root / "stderr.txt").write_text("warning: something\n")
    (root / "notes.md").write_text("not a log\n")


def series(client, run_id: str, name: str) -> list[tuple[int, float]]:
    found = client.get(f"/api/v1/runs/{run_id}/series?name={quote(name, safe='')}")
    return list(zip(found["step"], found["value"]))


def f32(x: float) -> float:
    return float(np.float32(x))


def test_import_a_dir_twice_is_one_run_and_nothing_added(daemon, tmp_path):
    root = tmp_path / "old-run"
    root.mkdir()
    write_run(root)
    client = daemon.client()
    body = {"dir": str(root), "project": "vision", "experiment": "resnet", "name": "baseline"}
    first = client.post("/api/v1/runs/import", body)
    run = first["run"]
    assert (first["created"], first["changed"], run["source"], run["status"]) == (True, False, "import", "SUCCEEDED")
    assert (run["name"], run["project"], run["experiment"]) == ("baseline", "vision", "resnet")
    assert first["dir"] == os.path.realpath(root) and first["problems"] == []
    run_id = run["id"]

    assert series(client, run_id, "train/loss") == [(s, 10.0 - s) for s in range(6)] + [
        (s, 100.0 + s) for s in range(6, 12)]
    assert series(client, run_id, "lr") == [(s, 0.5) for s in range(10)]
    assert series(client, run_id, "acc/train") == [(s, f32(s / 10)) for s in range(10)]
    assert series(client, run_id, "acc/val") == [(s, f32(s / 20)) for s in range(10)]
    assert first["imported"] == {"points": 12 + 10 + 10 + 10, "series": 4, "checkpoints": 3, "logs": 2}
    assert first["added"] == {"points": 42, "checkpoints": 3, "logs": 2}
    summary = client.get(f"/api/v1/runs/{run_id}/summary")["summary"]
    loss = summary["metrics"]["train/loss"]
    assert loss["count"] == 12
    assert [(loss[k]["step"], loss[k]["value"]) for k in ("latest", "best")] == [(11, 111.0), (5, 5.0)]

    checkpoints = client.get(f"/api/v1/runs/{run_id}/checkpoints")["checkpoints"]
    assert [(c["path"], c["step"], c["epoch"]) for c in checkpoints] == [
        (str(root / "checkpoints/step_5.pt"), 5, None), (str(root / "checkpoints/step_10.pt"), 10, None),
        (str(root / "outputs/checkpoint-12"), 12, 1.5)]
    for ck in checkpoints:
        assert ck["fingerprint"] == fingerprint(ck["path"]) and ck["metadata"]["source"] == "import"
        assert ck["size_bytes"] > 0
    events = client.get(f"/api/v1/events?run_id={run_id}&type=CHECKPOINT_CREATED")["events"]
    assert sorted(e["context"]["path"] for e in events) == sorted(c["path"] for c in checkpoints)
    assert [(log["path"], log["stream"], log["lines"]) for log in first["logs"]] == [
        (str(root / "stderr.txt"), "stderr", 1), (str(root / "stdout.log"), "stdout", 12)]

    again = client.post("/api/v1/runs/import", {"dir": str(root / "." / "runs" / "..")})  # the same realpath
    assert (again["run_id"], again["created"], again["changed"]) == (run_id, False, False)
    assert again["added"] == {"points": 0, "checkpoints": 0, "logs": 0}
    assert again["imported"] == first["imported"]
    assert len(series(client, run_id, "train/loss")) == 12
    assert len(client.get(f"/api/v1/runs/{run_id}/checkpoints")["checkpoints"]) == 3
    assert len(client.get(f"/api/v1/events?run_id={run_id}&type=CHECKPOINT_CREATED")["events"]) == 3
    assert len(client.get("/api/v1/runs")["runs"]) == 1

    (root / "stdout.log").write_text("a new line\n")  # changed since: told, not read again
    changed = client.post("/api/v1/runs/import", {"dir": str(root)})
    assert (changed["run_id"], changed["created"], changed["changed"]) == (run_id, False, True)
    assert changed["added"] == {"points": 0, "checkpoints": 0, "logs": 0}


def test_two_imports_of_one_dir_at_once_store_everything_once(daemon, tmp_path):
    """The second finds the first's run RUNNING and goes on with it: the same batches, stored once."""
    root = tmp_path / "shared"
    with SummaryWriter(root, max_queue=1000) as writer:
        for step in range(4000):
            for tag in ("a", "b", "c", "d", "e"):
                writer.add_scalar(tag, float(step), step)
    (root / "ckpt").mkdir()
    torch.save({"w": torch.zeros(4)}, root / "ckpt" / "step_3999.pt")
    client = daemon.client()
    replies: list[dict] = []
    threads = [threading.Thread(target=lambda: replies.append(daemon.client().post("/api/v1/runs/import",
                                                                                  {"dir": str(root)})))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(replies) == 2 and replies[0]["run_id"] == replies[1]["run_id"]
    assert sorted(r["created"] for r in replies) == [False, True]
    assert sum(r["added"]["points"] for r in replies) == 20_000
    assert sum(r["added"]["checkpoints"] for r in replies) == 1
    run_id = replies[0]["run_id"]
    for tag in ("a", "e"):
        assert [s for s, _ in series(client, run_id, tag)] == list(range(4000))
    assert len(client.get(f"/api/v1/events?run_id={run_id}&type=CHECKPOINT_CREATED")["events"]) == 1
    assert client.get(f"/api/v1/runs/{run_id}")["run"]["status"] == "SUCCEEDED"


def ctl(daemon, *args: str, cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuplanectl", *args], env=daemon.env, cwd=cwd,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_the_cli_prints_the_run_id_and_with_json_the_run(daemon, tmp_path):
    root = tmp_path / "tb"
    root.mkdir()
    with SummaryWriter(root) as writer:
        for step in range(3):
            writer.add_scalar("loss", 1.0 / (step + 1), step)
    done = ctl(daemon, "import-run", "tb", "--experiment", "e1", cwd=tmp_path)  # relative: from the cwd here
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    assert run_id.startswith("run_") and done.stderr == ""
    run = daemon.client().get(f"/api/v1/runs/{run_id}")
    assert (run["run"]["name"], run["run"]["source"], run["run"]["experiment"]) == ("tb", "import", "e1")

    again = ctl(daemon, "import-run", str(root), "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    body = json.loads(again.stdout)
    assert (body["run"]["id"], body["created"], body["added"]["points"]) == (run_id, False, 0)
    said = ctl(daemon, "import-run", str(root), cwd=tmp_path)
    assert said.stdout.strip() == run_id and "imported before; nothing added" in said.stderr

    missing = ctl(daemon, "import-run", "nowhere", cwd=tmp_path)
    assert missing.returncode == 2 and f"no such directory: {tmp_path / 'nowhere'}" in missing.stderr
    refused = ctl(daemon, "import-run", "nowhere", "--json", cwd=tmp_path)
    assert json.loads(refused.stdout)["error"]["details"]["field"] == "dir"


def _corrupt_one_record(path) -> None:
    """Flip a byte in the data of a record in the middle of the file: its CRC fails."""
    buf = bytearray(path.read_bytes())
    frames = scan(bytes(buf))
    middle = frames.starts[len(frames.starts) // 2]
    buf[middle + 2] ^= 0xFF
    path.write_bytes(bytes(buf))


def refusal(client, body) -> ApiError:
    with pytest.raises(ApiError) as caught:
        client.post("/api/v1/runs/import", body)
    return caught.value


def test_hostile_input_is_refused_by_name_and_a_corrupted_record_is_skipped(daemon, tmp_path):
    client = daemon.client()
    bad = refusal(client, {"dir": "relative/dir"})
    assert (bad.code, bad.details["field"]) == (ErrorCode.BAD_REQUEST, "dir") and "absolute path" in bad.message
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    bad = refusal(client, {"dir": str(a_file)})
    assert bad.code is ErrorCode.BAD_REQUEST and f"{a_file} is not a directory" in bad.message
    bad = refusal(client, {"dir": "//."})
    assert bad.code is ErrorCode.BAD_REQUEST and "/ is the filesystem's root" in bad.message
    bad = refusal(client, {"dir": str(tmp_path / "missing")})
    assert bad.code is ErrorCode.BAD_REQUEST and "no such directory" in bad.message
    empty = tmp_path / "empty"
    (empty / "runs").mkdir(parents=True)
    (empty / "train.log").write_text("only a log\n")
    bad = refusal(client, {"dir": str(empty)})
    assert bad.code is ErrorCode.BAD_REQUEST and "no TensorBoard event files" in bad.message and "no checkpoints" in bad.message
    assert client.get("/api/v1/runs")["runs"] == []  # nothing was written

    damaged = tmp_path / "damaged"
    with SummaryWriter(damaged) as writer:
        for step in range(20):
            writer.add_scalar("loss", float(step), step)
    (event_file,) = damaged.glob("events.out.tfevents.*")
    _corrupt_one_record(event_file)
    with open(event_file, "ab") as f:
        f.write(b"\x10\x00\x00")  # and a half-written record at the end
    found = client.post("/api/v1/runs/import", {"dir": str(damaged)})
    assert [p["what"] for p in found["problems"]] == ["bad data crc", "ends in a half-written record (3 bytes skipped)"]
    assert all(p["path"] == str(event_file) for p in found["problems"])
    steps = [s for s, _ in series(client, found["run_id"], "loss")]
    assert len(steps) == 19 and len(set(range(20)) - set(steps)) == 1  # the one record skipped

    cut = tmp_path / "killed_mid_save"
    (cut / "checkpoints").mkdir(parents=True)
    torch.save({"w": torch.zeros(1000)}, cut / "checkpoints" / "step_1.pt")
    whole = (cut / "checkpoints" / "step_1.pt").read_bytes()
    (cut / "checkpoints" / "step_2.pt").write_bytes(whole[: len(whole) // 2])
    found = client.post("/api/v1/runs/import", {"dir": str(cut)})
    assert [(os.path.basename(p["path"]), p["what"][:30]) for p in found["problems"]] == [
        ("step_2.pt", "checkpoint not imported: a zip")]
    listed = client.get(f"/api/v1/runs/{found['run_id']}/checkpoints")["checkpoints"]
    assert [os.path.basename(c["path"]) for c in listed] == ["step_1.pt"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_event_file_is_refused_by_name(daemon, tmp_path):
    root = tmp_path / "locked"
    with SummaryWriter(root) as writer:
        writer.add_scalar("loss", 1.0, 0)
    (event_file,) = root.glob("events.out.tfevents.*")
    event_file.chmod(0)
    bad = refusal(daemon.client(), {"dir": str(root)})
    assert bad.code is ErrorCode.BAD_REQUEST and f"{event_file} cannot be read" in bad.message


def test_a_dir_of_several_runs_makes_a_run_of_each_in_one_experiment(daemon, tmp_path):
    """Issue 28 item 2: a sweep's folder (as tensorboard --logdir shows it) was merged into one
    run, the last file's points winning."""
    sweep = tmp_path / "sweep"
    for lr in ("lr_0.1", "lr_0.01"):
        with SummaryWriter(sweep / lr) as writer:
            for step in range(4):
                writer.add_scalar("loss", float(lr[3:]), step)
                writer.add_scalars("acc", {"val": float(lr[3:]) * 2}, step)  # a folder below the run's: its own
        (sweep / lr / "step_4.pt").write_bytes(b"w" * 64)
    with SummaryWriter(sweep / "lightning_logs" / "version_0") as writer:
        writer.add_scalar("loss", 7.0, 0)
    (sweep / "train.log").write_text("the sweep's own log\n")  # in none of the runs' folders

    done = ctl(daemon, "import-run", str(sweep), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    ids = done.stdout.split()
    assert f"skipped: {sweep / 'train.log'} at byte 0: in none of the dir's run folders" in done.stderr
    client = daemon.client()
    runs = {r["name"]: r for r in (client.get(f"/api/v1/runs/{i}")["run"] for i in ids)}
    assert sorted(runs) == ["lightning_logs/version_0", "lr_0.01", "lr_0.1"]
    assert {(r["experiment"], r["source"]) for r in runs.values()} == {("sweep", "import")}
    for name, value in (("lr_0.1", 0.1), ("lr_0.01", 0.01)):
        assert series(client, runs[name]["id"], "loss") == [(s, f32(value)) for s in range(4)]
        assert series(client, runs[name]["id"], "acc/val") == [(s, f32(value * 2)) for s in range(4)]
        listed = client.get(f"/api/v1/runs/{runs[name]['id']}/checkpoints")["checkpoints"]
        assert [c["path"] for c in listed] == [str(sweep / name / "step_4.pt")]
    assert series(client, runs["lightning_logs/version_0"]["id"], "loss") == [(0, 7.0)]

    again = client.post("/api/v1/runs/import", {"dir": str(sweep)})  # each run keyed alone: nothing added
    assert sorted(r["run_id"] for r in again["runs"]) == sorted(ids) and not again["created"]
    assert again["added"] == {"points": 0, "checkpoints": 0, "logs": 0}
    assert again["imported"] == {"points": 4 * 2 * 2 + 1, "series": 5, "checkpoints": 2, "logs": 0}
    alone = client.post("/api/v1/runs/import", {"dir": str(sweep / "lr_0.1")})  # one of them given alone: the same run
    assert alone["run_id"] == runs["lr_0.1"]["id"] and [r["run_id"] for r in alone["runs"]] == [alone["run_id"]]
