"""Helpers for the tests of gpuplaned.tensorboard: reading a whole file, and Events built with
tensorboard's own protobuf classes (written by its EventFileWriter in the tests)."""

from __future__ import annotations

from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2

from gpuplaned.tensorboard import EventFileReader


def read_all(path, now: float = 0.0, **kwargs):
    reader = EventFileReader(path, **kwargs)
    result = reader.read(now)
    reader.close()
    return result


def points(columns) -> list[tuple[int, float]]:
    return list(zip(columns.steps.tolist(), columns.values.tolist()))


def event_files(folder) -> list:
    return sorted(p for p in folder.rglob("events.out.tfevents.*"))


def scalar_event(step: int, tag: str, value: float, *, wall: float = 1.0e9) -> event_pb2.Event:
    """An old-style scalar Event, as PyTorch writes it."""
    return event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]))


def tensor_event(step: int, tag: str, tensor: tensor_pb2.TensorProto, plugin: str | None) -> event_pb2.Event:
    value = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
    if plugin is not None:
        value.metadata.plugin_data.plugin_name = plugin
    return event_pb2.Event(wall_time=1.0e9 + step, step=step, summary=summary_pb2.Summary(value=[value]))
