"""TFRecord framing and its masked CRC32C, against tensorboard's own writer and CRC."""

from __future__ import annotations

import io
import os

import google_crc32c
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tb_masked_crc32c
from tensorboard.summary.writer.record_writer import RecordWriter

from gpuplaned.tensorboard.records import frame, masked_crc32c, scan


def test_crc_is_native_and_agrees_with_tensorboards_table():
    assert google_crc32c.implementation == "c"  # a pure-Python fallback would be ~30x slower
    for size in (0, 1, 8, 31, 1000):
        data = os.urandom(size)
        assert masked_crc32c(data) == tb_masked_crc32c(data)


def test_frames_as_tensorboards_record_writer_does():
    out = io.BytesIO()
    writer = RecordWriter(out)
    records = [b"", b"a", os.urandom(300)]
    for r in records:
        writer.write(r)
    assert out.getvalue() == b"".join(map(frame, records))
    frames = scan(out.getvalue())
    assert [out.getvalue()[s:s + n] for s, n in zip(frames.starts, frames.lengths)] == records
    assert frames.consumed == len(out.getvalue()) and frames.bad is None


def test_scan_stops_before_a_half_written_record():
    whole = frame(b"first") + frame(b"second")
    for cut in range(len(frame(b"first")), len(whole)):
        frames = scan(whole[:cut])
        assert len(frames.starts) == 1 and frames.consumed == len(frame(b"first")) and frames.bad is None
