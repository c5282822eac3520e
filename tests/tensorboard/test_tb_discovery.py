"""Finding a job's event files, naming their series, and the rewind rule across files."""

from __future__ import annotations

import socket
import time

import numpy as np
from tbfiles import points, read_all
from torch.utils.tensorboard import SummaryWriter

from gpuplaned.domain.run_summary import direction_for
from gpuplaned.tensorboard import Rewinds, find_event_files, log_roots, merge
from gpuplaned.tensorboard.discovery import parse_name, writer_pid
from gpuplaned.tensorboard.events import Columns
from gpuplaned.tensorboard.rewind import order_key


def names(files) -> list[str]:
    return [f.path.name for f in files]


def test_roots_are_the_usual_dirs_tb_log_dir_and_declared_ones(tmp_path):
    roots = log_roots(tmp_path, {"TB_LOG_DIR": "tb", "HOME": "/x"}, extra=["/abs/dir", "runs"])
    assert roots == [str(tmp_path / d) for d in ("runs", "logs", "outputs", "lightning_logs", "/abs/dir", "tb")]
    assert log_roots(tmp_path, {}) == [str(tmp_path / d) for d in ("runs", "logs", "outputs", "lightning_logs")]


def test_only_this_attempts_files_from_this_host(tmp_path):
    runs = tmp_path / "runs"
    (runs / "deep" / "er").mkdir(parents=True)
    start = 1_800_000_000
    for name in [f"events.out.tfevents.{start - 3600}.myhost.1.0",  # an earlier attempt's
                 f"events.out.tfevents.{start - 5}.myhost.1.0",  # within the slack
                 f"events.out.tfevents.{start + 9}.myhost",
                 f"events.out.tfevents.{start + 9}.otherhost.2.0",
                 f"events.out.tfevents.{start + 9}.myhost.profile-empty",
                 f"events.out.tfevents.{start + 9}.myhost.sagemaker-uploaded",
                 "events.out.tfevents.notatime.myhost", "train.log"]:
        (runs / name).write_bytes(b"")
    (runs / "deep" / "er" / f"events.out.tfevents.{start + 1}.myhost.3.0").write_bytes(b"")
    files = find_event_files(log_roots(tmp_path, {}), since=start, host="myhost")
    assert names(files) == [f"events.out.tfevents.{start - 5}.myhost.1.0", f"events.out.tfevents.{start + 1}.myhost.3.0",
                            f"events.out.tfevents.{start + 9}.myhost"]
    assert [f.run for f in files] == ["", "deep/er", ""]
    assert len(find_event_files(log_roots(tmp_path, {}), since=start)) == 4  # any host


def test_parse_name():
    assert parse_name("events.out.tfevents.1700000000.gpu-box.local.123.0") == (1700000000, "gpu-box.local.123.0")
    assert parse_name("events.out.tfevents.1700000000.h.profile-empty") is None


def test_add_scalars_subfolders_are_series_of_their_own(tmp_path):
    start = time.time()
    with SummaryWriter(tmp_path / "runs" / "exp") as writer:
        for step in range(5):
            writer.add_scalar("loss", float(step), step)
            writer.add_scalars("acc", {"train": step / 10, "val": step / 20}, step)
    files = find_event_files(log_roots(tmp_path, {}), since=start, host=socket.gethostname())
    assert sorted(f.run for f in files) == ["", "acc_train", "acc_val"]
    series = {}
    for f in files:
        for tag, columns in read_all(f.path).scalars.items():
            series[f.series(tag)] = points(columns)
    assert series["loss"] == [(s, float(s)) for s in range(5)]
    assert series["acc/train"] == [(s, float(np.float32(s / 10))) for s in range(5)]
    assert series["acc/val"] == [(s, float(np.float32(s / 20))) for s in range(5)]


def test_a_resumed_writer_replaces_the_steps_from_its_first_on(tmp_path):
    """Steps 0..9 in a first file, then a restart from a checkpoint at step 6: the second file's
    6.. replace the first's, as TensorBoard shows it."""
    start = time.time()
    logdir = tmp_path / "lightning_logs"
    with SummaryWriter(logdir) as first:
        for step in range(10):
            first.add_scalar("loss", 100.0 + step, step)
            first.add_scalar("only_first", 1.0, step)
    with SummaryWriter(logdir) as second:  # same second: the name's counter orders them
        for step in range(6, 12):
            second.add_scalar("loss", 200.0 + step, step)
    files = find_event_files(log_roots(tmp_path, {}), since=start)
    # By order_key: the writers' counters compare as numbers (.9 before .10), not as text.
    assert len(files) == 2 and order_key(files[0].order) < order_key(files[1].order)
    batches = [(f.series(tag), f.order, c) for f in files for tag, c in read_all(f.path).scalars.items()]
    merged = merge(batches)
    assert points(merged["loss"]) == [(s, 100.0 + s) for s in range(6)] + [(s, 200.0 + s) for s in range(6, 12)]
    assert len(merged["only_first"]) == 10  # another tag: untouched


def cols(*steps: int) -> Columns:
    return Columns(np.array(steps, np.int64), np.zeros(len(steps)), np.array(steps, np.float64))


def test_rewinds_as_points_arrive():
    rewinds = Rewinds()
    old, new = ("events.out.tfevents.1.h", "d"), ("events.out.tfevents.2.h", "d")
    assert rewinds.take("loss", old, cols(0, 1, 2, 3))[1] is None
    kept, cut = rewinds.take("loss", new, cols(2, 3))
    assert cut == 2 and kept.steps.tolist() == [2, 3]
    assert rewinds.take("loss", new, cols(4))[1] is None
    late, cut = rewinds.take("loss", old, cols(4, 1))  # the old writer still going
    assert cut is None and late.steps.tolist() == [1]
    resumed = Rewinds(rewinds.state)  # the state survives a restart
    assert resumed.take("loss", old, cols(5))[0].steps.tolist() == []


def test_two_writers_opened_in_one_second_stay_in_the_order_they_were_opened(tmp_path):
    """PyTorch names a process's writers ``.<pid>.<n>``: ``.10`` follows ``.9`` (as strings it
    would not), so a resume written by the 11th writer replaces the 10th's points."""
    runs = tmp_path / "runs"
    runs.mkdir()
    older, newer = "events.out.tfevents.1800000000.h.77.9", "events.out.tfevents.1800000000.h.77.10"
    for name in (newer, older):
        (runs / name).write_bytes(b"")
    assert names(find_event_files(log_roots(tmp_path, {}), since=0)) == [older, newer]
    merged = merge([("loss", (older, "runs"), Columns(np.arange(10), np.arange(10), np.full(10, 1.0))),
                    ("loss", (newer, "runs"), Columns(np.arange(6, 12), np.arange(6, 12), np.full(6, 2.0)))])
    assert merged["loss"].values.tolist() == [1.0] * 6 + [2.0] * 6


def test_add_scalars_series_are_named_chart_then_line_and_get_a_direction(tmp_path):
    """Issue 28 item 6: ``add_scalars("val", {"loss": ...})`` was ``val_loss/val``, with no direction."""
    start = time.time()
    with SummaryWriter(tmp_path / "runs" / "exp") as writer:
        writer.add_scalar("train/loss", 1.0, 0)
        writer.add_scalars("val", {"loss": 0.5}, 0)
        writer.add_scalars("eval/acc", {"top1": 0.7}, 0)  # the main tag's "/" is "_" in its folder
        writer.add_scalars("val_loss", {"x": 0.2}, 0)  # a folder name that starts like another's
    files = find_event_files(log_roots(tmp_path, {}), since=start, host=socket.gethostname())
    names = sorted(f.series(tag) for f in files for tag in read_all(f.path).scalars)
    assert names == ["eval/acc/top1", "train/loss", "val/loss", "val_loss/x"]
    assert [direction_for(n) for n in names] == ["maximize", "minimize", "minimize", "minimize"]


def test_the_writer_pid_is_read_after_the_host_whatever_dots_the_host_has():
    name = "events.out.tfevents.1700000000.node1.lab.example.4242.7"
    _, rest = parse_name(name)
    assert writer_pid(rest, "node1.lab.example") == 4242
    assert writer_pid("node1.4242.1.v2", "node1") == 4242  # TensorFlow 2's
    assert writer_pid("node1", "node1") is None  # TensorFlow 1's: no pid
    assert writer_pid("node1.lab.4242.1", "node2") is None
