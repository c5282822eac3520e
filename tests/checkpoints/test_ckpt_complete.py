"""Whether a checkpoint file is whole, told from its format: real ``torch.save`` files (zip and
legacy), safetensors files written to the format's layout, cut at every kind of place."""

from __future__ import annotations

import json
import struct

import pytest
import torch

from gpuplaned.checkpoints.complete import incomplete


def _torch_file(path, **kwargs):
    torch.save({"w": torch.arange(100_000, dtype=torch.float32), "step": 3}, path, **kwargs)
    return path.read_bytes()


def _safetensors(tensors: dict[str, bytes]) -> bytes:
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, data in tensors.items():
        header[name] = {"dtype": "U8", "shape": [len(data)], "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    encoded = json.dumps(header).encode()
    return struct.pack("<Q", len(encoded)) + encoded + b"".join(tensors.values())


def test_a_whole_torch_save_is_whole_and_every_cut_is_not(tmp_path):
    whole = _torch_file(tmp_path / "model.pt")
    assert incomplete(str(tmp_path / "model.pt")) is None
    for keep in (10, len(whole) // 3, len(whole) - 23, len(whole) - 1):
        cut = tmp_path / f"cut_{keep}.pt"
        cut.write_bytes(whole[:keep])
        assert "without its end record" in incomplete(str(cut)), keep


def test_the_legacy_format_cannot_tell_and_counts_as_whole(tmp_path):
    whole = _torch_file(tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    (tmp_path / "old_cut.pt").write_bytes(whole[: len(whole) // 2])
    assert incomplete(str(tmp_path / "old.pt")) is None
    assert incomplete(str(tmp_path / "old_cut.pt")) is None  # as before: the stability window decides


@pytest.mark.parametrize("keep", [4, 8 + 10, -1])
def test_a_safetensors_file_is_whole_only_at_its_promised_length(tmp_path, keep):
    data = _safetensors({"a": b"\x01" * 1000, "b": b"\x02" * 500})
    (tmp_path / "whole.safetensors").write_bytes(data)
    assert incomplete(str(tmp_path / "whole.safetensors")) is None
    (tmp_path / "cut.safetensors").write_bytes(data[:keep])
    assert incomplete(str(tmp_path / "cut.safetensors")).startswith("a safetensors file")


def test_a_directory_is_whole_when_each_file_is_and_names_the_one_that_is_not(tmp_path):
    ckpt = tmp_path / "checkpoint-500"
    ckpt.mkdir()
    (ckpt / "trainer_state.json").write_text('{"global_step": 500}')
    whole = _torch_file(ckpt / "pytorch_model.bin")
    assert incomplete(str(ckpt)) is None
    (ckpt / "optimizer.pt").write_bytes(whole[:1000])
    assert incomplete(str(ckpt)).startswith("optimizer.pt: a zip")
