"""Reading event files incrementally: live writers, half-written and corrupt records, cursors,
and a big file whose appends cost only their bytes."""

from __future__ import annotations

import os

from tbfiles import event_files, points, read_all, scalar_event
from tensorboard.compat.proto import event_pb2
from torch.utils.tensorboard import SummaryWriter

from gpuplaned.tensorboard import Cursor, EventFileReader
from gpuplaned.tensorboard.records import HEADER, frame


def test_follows_a_live_summary_writer(tmp_path):
    writer = SummaryWriter(tmp_path, flush_secs=3600)
    reader = EventFileReader(event_files(tmp_path)[0])
    seen = []
    for batch in range(3):
        for step in range(batch * 10, batch * 10 + 10):
            writer.add_scalar("loss", float(step), step)
        writer.flush()
        seen += points(reader.read(0.0).scalars["loss"])
    assert reader.read(0.0).scalars == {}  # nothing new: nothing read
    writer.close()
    reader.close()
    assert seen == [(s, float(s)) for s in range(30)]


def _write(tmp_path, n: int) -> bytes:
    with SummaryWriter(tmp_path) as writer:
        for step in range(n):
            writer.add_scalar("loss", float(step), step)
    return event_files(tmp_path)[0].read_bytes()


def test_half_written_record_waits_for_its_bytes(tmp_path):
    data = _write(tmp_path / "w", 10)
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(data[:-7])  # the last record lacks 7 bytes: a truncated file
    reader = EventFileReader(path)
    first = reader.read(0.0)
    assert points(first.scalars["loss"]) == [(s, float(s)) for s in range(9)]
    assert first.problems == [] and first.cursor.offset < len(data) - 7
    assert reader.read(100.0).scalars == {}  # still half: not a corruption, however long
    with open(path, "ab") as f:
        f.write(data[-7:])
    assert points(reader.read(200.0).scalars["loss"]) == [(9, 9.0)]
    assert reader.cursor.offset == len(data) and reader.bytes_read == len(data)


def test_cursor_resumes_a_new_reader(tmp_path):
    data = _write(tmp_path / "w", 20)
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(data[:len(data) // 2])
    first = read_all(path)
    path.write_bytes(data)  # the same inode, grown
    second = read_all(path, cursor=first.cursor)
    assert points(first.scalars["loss"]) + points(second.scalars["loss"]) == [(s, float(s)) for s in range(20)]
    other = tmp_path / "new"
    other.write_bytes(data)
    os.replace(other, path)  # another file (inode) at the same path: read from the start
    third = read_all(path, cursor=second.cursor)
    assert len(third.scalars["loss"]) == 20 and [p.what for p in third.problems] == ["file replaced"]
    path.write_bytes(data[:100])  # shorter than the cursor: written anew
    assert [p.what for p in read_all(path, cursor=third.cursor).problems] == ["file replaced"]


def _records(n: int, tag: str = "loss") -> list[bytes]:
    return [frame(scalar_event(step, tag, float(step)).SerializeToString()) for step in range(n)]


def test_corrupt_data_is_retried_then_skipped_and_the_rest_read(tmp_path):
    records = _records(10)
    damaged = bytearray(records[4])
    damaged[HEADER + 3] ^= 0xFF  # a byte of the data: its CRC fails
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"".join(records[:4]) + bytes(damaged) + b"".join(records[5:]))
    reader = EventFileReader(path, grace=30.0)
    assert [s for s, _ in points(reader.read(0.0).scalars["loss"])] == [0, 1, 2, 3]
    assert reader.read(29.0).scalars == {}  # within the grace period: retried, not skipped
    late = reader.read(31.0)
    assert [s for s, _ in points(late.scalars["loss"])] == [5, 6, 7, 8, 9]
    assert [(p.what, p.offset) for p in late.problems] == [("bad data crc", sum(map(len, records[:4])))]


def test_corrupt_data_that_heals_in_the_grace_period_is_read(tmp_path):
    records = _records(3)
    damaged = bytearray(records[1])
    damaged[-1] ^= 0x01  # its CRC, as a writer that has not flushed yet would leave it
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(records[0] + bytes(damaged) + records[2])
    reader = EventFileReader(path)
    assert len(reader.read(0.0).scalars["loss"]) == 1
    path.write_bytes(b"".join(records))
    assert [s for s, _ in points(reader.read(5.0).scalars["loss"])] == [1, 2]


def test_corrupt_length_is_skipped_by_finding_the_next_record(tmp_path):
    records = _records(6)
    damaged = bytearray(records[2])
    damaged[0] ^= 0x40  # the length: where the record ends is not known
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"".join(records[:2]) + bytes(damaged) + b"".join(records[3:]))
    result = read_all(path, now=0.0, grace=0.0)
    assert [s for s, _ in points(result.scalars["loss"])] == [0, 1, 3, 4, 5]
    assert [p.what for p in result.problems] == ["bad length crc"]


def test_records_bigger_than_a_read(tmp_path):
    big = frame(event_pb2.Event(step=3, graph_def=b"x" * 65536).SerializeToString())
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"".join(_records(3)) + big + b"".join(_records(3, "after")))
    result = read_all(path, chunk=4096)
    assert len(result.scalars["loss"]) == 3 and len(result.scalars["after"]) == 3
    assert result.cursor.offset == path.stat().st_size


def test_a_million_events_then_appends_read_only_the_new_bytes(tmp_path):
    """A 1M-event file read in 1 MiB reads; 1k appended events cost exactly their bytes."""
    template = [frame(scalar_event(step, "train/loss", 0.5).SerializeToString()) for step in range(1000)]
    path = tmp_path / "events.out.tfevents.1.host"
    with open(path, "wb") as f:
        block = b"".join(template)
        for _ in range(1000):
            f.write(block)
    size = path.stat().st_size
    reader = EventFileReader(path)
    first = reader.read(0.0)
    assert len(first.scalars["train/loss"]) == 1_000_000 and reader.bytes_read == size
    appended = b"".join(frame(scalar_event(step, "train/loss", 1.5).SerializeToString())
                        for step in range(1000, 2000))
    with open(path, "ab") as f:
        f.write(appended)
    second = reader.read(0.0)
    assert reader.bytes_read - size == len(appended)
    assert second.records == 1000 and second.scalars["train/loss"].steps.tolist() == list(range(1000, 2000))
    assert second.cursor == Cursor(path.stat().st_ino, size + len(appended))
    reader.close()
