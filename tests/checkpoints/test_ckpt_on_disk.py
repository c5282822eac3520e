"""Reading and deleting a registered checkpoint's file where it lies (``gpuplaned.checkpoints.on_disk``):
what a client or script registered is hostile input, so a path the OS would refuse or a relative
one is an answer that names it, never an exception, and nothing is touched."""

from __future__ import annotations

import pytest

from gpuplaned.checkpoints import on_disk
from gpuplaned.checkpoints.files import fingerprint
from gpuplaned.protocol.checkpoint_ops import CheckpointRemove


@pytest.mark.parametrize("path", ["model.pt", "a\0b", "/ckpt/\0model.pt", "../etc/passwd"])
def test_a_path_that_is_not_an_absolute_one_is_refused_by_name(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.pt").write_bytes(b"weights")
    reading = on_disk.read(path, (str(tmp_path),))
    assert not reading.present and reading.error.startswith("not an absolute path on this node: ")
    removal = on_disk.remove(CheckpointRemove(path, None, 7, dry_run=False, roots=(str(tmp_path),)))
    assert not removal.gone and removal.refused.startswith("not an absolute path on this node: ")
    assert (tmp_path / "model.pt").read_bytes() == b"weights"


def test_an_absolute_path_is_read_and_removed_when_unchanged(tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(b"weights")
    roots = (str(tmp_path),)
    reading = on_disk.read(str(path), roots)
    assert reading.present and reading.size_bytes == 7 and reading.fingerprint == fingerprint(str(path))
    assert on_disk.remove(CheckpointRemove(str(path), reading.fingerprint, 7, dry_run=False, roots=roots)).gone
    assert not path.exists()
    assert on_disk.remove(CheckpointRemove(str(path), reading.fingerprint, 7, dry_run=False, roots=roots)).already_gone
