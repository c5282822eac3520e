"""Scalars decoded from files written by the real writers, in every scalar form; other
payloads skipped."""

from __future__ import annotations

import numpy as np
import pytest
from tbfiles import event_files, points, read_all, scalar_event, tensor_event
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from torch.utils.tensorboard import SummaryWriter

from gpuplaned.tensorboard.events import EventDecoder
from gpuplaned.tensorboard.records import frame, scan


def f32(x: float) -> float:
    return float(np.float32(x))


@pytest.mark.parametrize("kwargs", [{}, {"new_style": True}, {"new_style": True, "double_precision": True}],
                         ids=["simple_value", "new_style", "new_style_double"])
def test_summary_writer_scalars(tmp_path, kwargs):
    with SummaryWriter(tmp_path) as writer:
        for step in range(300):  # steps past 127 and 16383 take wider varints
            writer.add_scalar("train/loss", 1.0 / (step + 1), step * 70, **kwargs)
            writer.add_scalar("lr", 0.1 * step, step * 70, **kwargs)
    [path] = event_files(tmp_path)
    result = read_all(path)
    precise = kwargs.get("double_precision")
    want = [(s * 70, 1.0 / (s + 1) if precise else f32(1.0 / (s + 1))) for s in range(300)]
    assert points(result.scalars["train/loss"]) == want
    assert points(result.scalars["lr"]) == [(s * 70, 0.1 * s if precise else f32(0.1 * s)) for s in range(300)]
    assert result.records == 601  # the file_version event, and one per scalar
    walls = result.scalars["lr"].walls
    assert (np.diff(walls) >= 0).all() and abs(walls[0] - path.stat().st_mtime) < 60


def test_summary_writer_images_and_histograms_are_skipped(tmp_path):
    with SummaryWriter(tmp_path) as writer:
        for step in range(20):
            writer.add_scalar("loss", float(step), step)
            writer.add_histogram("weights", np.arange(100) * step, step)
            writer.add_image("sample", np.full((3, 8, 8), step / 20.0), step)
            writer.add_text("note", f"step {step}", step)
    result = read_all(event_files(tmp_path)[0])
    assert list(result.scalars) == ["loss"]
    assert points(result.scalars["loss"]) == [(s, float(s)) for s in range(20)]


def test_event_file_writer_tensor_forms(tmp_path):
    """tensorboard's own writer, with TF2's forms: the metadata only on a tag's first value,
    tensor_content, int64, and a histogram tensor that is no scalar."""
    writer = EventFileWriter(str(tmp_path))
    content = tensor_pb2.TensorProto(dtype=2, tensor_content=np.float64(2.5).tobytes())
    writer.add_event(tensor_event(1, "acc", tensor_pb2.TensorProto(dtype=1, float_val=[0.5]), "scalars"))
    writer.add_event(tensor_event(2, "acc", tensor_pb2.TensorProto(dtype=1, float_val=[0.75]), None))
    writer.add_event(tensor_event(3, "content", content, "scalars"))
    writer.add_event(tensor_event(4, "count", tensor_pb2.TensorProto(dtype=9, int64_val=[-7]), "scalars"))
    histogram = tensor_pb2.TensorProto(dtype=2, float_val=[0.0, 1.0, 3.0], tensor_shape={"dim": [{"size": 1},
                                                                                             {"size": 3}]})
    writer.add_event(tensor_event(5, "hist", histogram, "histograms"))
    writer.add_event(tensor_event(6, "hist", tensor_pb2.TensorProto(dtype=1, float_val=[9.0]), None))
    writer.add_event(tensor_event(7, "bare", tensor_pb2.TensorProto(dtype=1, float_val=[1.5]), None))
    writer.add_event(scalar_event(8, "old", 4.0))
    writer.close()
    result = read_all(event_files(tmp_path)[0])
    got = {tag: points(c) for tag, c in result.scalars.items()}
    assert got == {"acc": [(1, 0.5), (2, 0.75)], "content": [(3, 2.5)], "count": [(4, -7.0)],
                   "bare": [(7, 1.5)], "old": [(8, 4.0)]}


def _mixed(i: int, tags: list[str]):
    tag = tags[i % len(tags)]
    step = [0, i, -i, i * 100003][i % 3]
    if i % 5 == 0:
        return tensor_event(step, tag, tensor_pb2.TensorProto(dtype=1, float_val=[i / 7]), "scalars")
    if i % 7 == 0:  # text of one length, different bytes each: no shape repeats
        text = tensor_pb2.TensorProto(dtype=7, string_val=[b"%05d" % i])
        return tensor_event(step, "note", text, "text")
    return scalar_event(step, tag, i / 3, wall=1.0e9 + i)


@pytest.mark.parametrize("tags", [["a", "bb", "ccc/x", "long/" + "y" * 900], [f"layer{i:02d}/grad" for i in range(40)]],
                         ids=["mixed", "40-same-length"])
def test_shaped_decoding_agrees_with_parsing_each_record(tags):
    """The shaped (numpy) decoding gives what parsing each record does, on a mix of tags,
    forms, step 0 (no step field), negative steps, long records, many same-length tags and
    records of one length that all differ."""
    events = [_mixed(i, tags) for i in range(2000)]
    buf = b"".join(frame(e.SerializeToString()) for e in events)
    frames = scan(buf)
    shaped = EventDecoder().decode(buf, frames.starts, frames.lengths)
    one = EventDecoder()
    want: dict[str, list] = {}
    for start, length in zip(frames.starts, frames.lengths):
        shape = one.parse(buf[start:start + length])
        for tag, value in shape.values:
            want.setdefault(tag, []).append((shape.step, shape.wall, value))
    assert {t: list(zip(c.steps.tolist(), c.walls.tolist(), c.values.tolist())) for t, c in shaped.items()} == want
    assert "note" not in want and sum(map(len, want.values())) == 2000 - len([i for i in range(2000)
                                                                               if i % 5 and not i % 7])


def test_not_an_event_is_skipped():
    buf = frame(b"\x0a\xff\xff") + frame(scalar_event(3, "x", 1.0).SerializeToString())
    frames = scan(buf)
    assert points(EventDecoder().decode(buf, frames.starts, frames.lengths)["x"]) == [(3, 1.0)]


def test_protobuf_reads_what_was_decoded(tmp_path):
    """The records the reader frames are the Events tensorboard's protobuf classes read."""
    with SummaryWriter(tmp_path) as writer:
        for step in range(50):
            writer.add_scalar("m", step * 0.5, step)
    data = event_files(tmp_path)[0].read_bytes()
    frames = scan(data)
    events = [event_pb2.Event.FromString(data[s:s + n]) for s, n in zip(frames.starts, frames.lengths)]
    assert events[0].file_version == "brain.Event:2"
    assert [(e.step, e.summary.value[0].simple_value) for e in events[1:]] == [(s, s * 0.5) for s in range(50)]
    assert isinstance(events[1].summary, summary_pb2.Summary)
