"""``import-run``'s pieces that need no daemon: which files are logs, and the ingest batches
(bounded, and cut the same way every time, so a resumed import stores the same (source, seq)s)."""

from __future__ import annotations

import numpy as np

from gpuplaned.service.api.imports import run as import_run
from gpuplaned.service.api.imports.scan import is_log
from gpuplaned.tensorboard.events import Columns


def cols(n: int, first: int = 0) -> Columns:
    steps = np.arange(first, first + n, dtype=np.int64)
    return Columns(steps, steps * 0.5 + 1.0e9, steps.astype(np.float64))


def test_batches_are_bounded_complete_and_cut_the_same_way(monkeypatch):
    monkeypatch.setattr(import_run, "BATCH_POINTS", 7)
    series = {"b": cols(10), "a": cols(3, 100), "c": cols(7, 50)}
    batches = list(import_run._batches(series))
    assert [sum(len(c["step"]) for c in b.values()) for b in batches] == [7, 7, 6]
    assert batches == list(import_run._batches(dict(reversed(series.items()))))  # by name, not by order given
    joined: dict[str, list[int]] = {}
    for batch in batches:
        for name, c in batch.items():
            joined.setdefault(name, []).extend(c["step"])
            assert c["ts"] == [round(s * 500 + 1.0e12) for s in c["step"]]
    assert joined == {name: c.steps.tolist() for name, c in series.items()}


def test_which_files_are_logs():
    assert all(map(is_log, ["train.log", "stdout.txt", "stderr-0.txt", "stdout", "job.out", "job.err", "X.LOG"]))
    assert not any(map(is_log, ["notes.md", "stdout.json", "events.out.tfevents.1.host.log", "model.pt"]))


def test_a_dir_with_too_many_entries_is_refused(tmp_path, monkeypatch):
    from gpuplaned.service.api.imports import scan as import_scan

    monkeypatch.setattr(import_scan, "MAX_ENTRIES", 10)
    for i in range(4):
        (tmp_path / f"d{i}").mkdir()
        for j in range(3):
            (tmp_path / f"d{i}" / f"f{j}").write_text("")
    try:
        import_scan.survey(str(tmp_path))
    except import_scan.ImportRefused as exc:
        assert str(exc) == f"{tmp_path} holds more than 10 files and folders: give the run's own dir"
    else:
        raise AssertionError("not refused")


def test_a_tag_too_long_to_store_is_reported_and_the_rest_read(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from gpuplaned.service.api.imports import scan as import_scan

    with SummaryWriter(tmp_path) as writer:
        writer.add_scalar("x" * 300, 1.0, 0)
        writer.add_scalar("loss", 2.0, 0)
    read = import_scan.read_points(import_scan.survey(str(tmp_path)).events)
    assert list(read.series) == ["loss"]
    assert [p.what for p in read.problems] == ["series name of 300 characters (at most 200): skipped"]
