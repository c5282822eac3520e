"""Scalars out of TensorBoard ``Event`` records: a hand-written protobuf wire parser that
learns each record shape once and then decodes every record of that shape with numpy.
Pure: no I/O, no trio.

What counts as a scalar (every form the writers in use produce):

- ``Summary.Value.simple_value``: the old style, with no plugin name; PyTorch's
  ``SummaryWriter.add_scalar`` by default, TF1, tensorboardX;
- a one-element numeric ``tensor`` whose plugin is ``scalars`` or whose metadata says
  ``DATA_CLASS_SCALAR``: ``add_scalar(new_style=True)`` (``float_val``, or ``double_val``
  with ``double_precision``), TF2 and tensorboard's own ``summary.v1`` (``tensor_content``);
- a one-element numeric tensor with no metadata, whose tag's first metadata (TF2 writes it
  only with the first value of a tag) was ``scalars``, or that has never had any: no
  other plugin writes one-element numeric tensors.

Images, audio, histograms (old and new style), text, graphs and every other field are
skipped by their length, never decoded; a tensor's bytes are read only once its value is
known to be a scalar.

Why not ``event_pb2.Event.FromString``: even with protobuf's C (upb) backend, parsing 500k
scalar events into messages and walking them takes about 0.75 s, which alone is more than
the bench's budget (20x ``EventAccumulator``, ~0.5 s). Here each record shape (same length,
same bytes but for the wall time, the step and the values) is parsed once in Python; the
parse says where its variable bytes lie (``Span``), and every record of the shape in a
buffer is checked against the shape and decoded with a few numpy operations.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs

# numpy is imported in the functions that use it, at the first event file decoded: a daemon's
# start does not load it (~0.1 s).
if TYPE_CHECKING:
    import numpy as np

__all__ = ["Columns", "EventDecoder", "WireError"]

# Records longer than this are parsed one by one (images, graphs, text): there are few of
# them and their bytes are skipped by length anyway.
_SHAPED_MAX = 1024
# Records of one length in a buffer are decoded shape by shape, at most this many shapes
# (per-layer metrics can give dozens of same-length tags); past that, or after _MAX_MISSES
# shapes of fewer than _FEW records each, the rest are parsed one by one.
_MAX_SHAPES = 128
_MAX_MISSES = 8
_FEW = 8

_DATA_CLASS_SCALAR = 1
# TensorProto dtype -> (numpy dtype of tensor_content, typed field number, wire kind)
_DT = {
    1: ("<f4", 5, "f4"),  # DT_FLOAT: float_val
    2: ("<f8", 6, "f8"),  # DT_DOUBLE: double_val
    3: ("<i4", 7, "varint"),  # DT_INT32: int_val
    4: ("u1", 7, "varint"),  # DT_UINT8
    5: ("<i2", 7, "varint"),  # DT_INT16
    6: ("i1", 7, "varint"),  # DT_INT8
    9: ("<i8", 10, "varint"),  # DT_INT64: int64_val
    10: ("u1", 11, "varint"),  # DT_BOOL: bool_val
    19: ("<f2", 13, "half"),  # DT_HALF: half_val (the bits, in a varint)
}
_f4 = struct.Struct("<f")
_f8 = struct.Struct("<d")


class WireError(ValueError):
    """A record that is no well-formed Event."""


@attrs.frozen
class Columns:
    """One tag's points, in file order."""

    steps: np.ndarray  # int64
    walls: np.ndarray  # float64, seconds since the epoch
    values: np.ndarray  # float64

    def __len__(self) -> int:
        return len(self.steps)

    @classmethod
    def concat(cls, parts: Iterable[Columns]) -> Columns:
        import numpy as np

        parts = list(parts)
        if len(parts) == 1:
            return parts[0]
        return cls(np.concatenate([p.steps for p in parts]), np.concatenate([p.walls for p in parts]),
                   np.concatenate([p.values for p in parts]))


@attrs.frozen
class Span:
    """Variable bytes of a record shape: ``width`` bytes at ``offset`` read as ``kind``
    (a numpy dtype, ``varint`` or ``half``), for the wall time, the step or a tag's value."""

    offset: int
    width: int
    kind: str
    tag: str | None = None  # None: the wall time or the step (see ``role``)
    role: str = "value"


@attrs.frozen
class Shape:
    """A parsed record: its values, and where they lie, so that same-shaped records can be
    decoded without parsing."""

    wall: float
    step: int
    values: tuple[tuple[str, float], ...]
    spans: tuple[Span, ...]


def _varint(b: bytes, p: int) -> tuple[int, int]:
    x = shift = 0
    while True:
        if p >= len(b) or shift > 63:
            raise WireError("bad varint")
        c = b[p]
        p += 1
        x |= (c & 0x7F) << shift
        if c < 0x80:
            return x, p
        shift += 7


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def _fields(b: bytes, p: int, end: int):
    """(field number, wire type, value start, value end, varint value) of each field."""
    while p < end:
        key, p = _varint(b, p)
        number, wire = key >> 3, key & 7
        if wire == 0:
            start = p
            value, p = _varint(b, p)
            yield number, wire, start, p, value
        elif wire == 1:
            yield number, wire, p, p + 8, 0
            p += 8
        elif wire == 2:
            length, p = _varint(b, p)
            yield number, wire, p, p + length, 0
            p += length
        elif wire == 5:
            yield number, wire, p, p + 4, 0
            p += 4
        else:
            raise WireError(f"wire type {wire}")
        if p > end:
            raise WireError("field past the end")


class EventDecoder:
    """Decodes the Events of one event file; remembers each tag's plugin (TF2 sends a tag's
    metadata only with its first value)."""

    def __init__(self) -> None:
        self.plugins: dict[str, str] = {}

    # -- one record ------------------------------------------------------------------------

    def parse(self, b: bytes) -> Shape:
        """Parse one Event record. Raises WireError for malformed bytes."""
        wall, step = 0.0, 0
        values: list[tuple[str, float]] = []
        spans: list[Span] = []
        for number, wire, start, end, value in _fields(b, 0, len(b)):
            if number == 1 and wire == 1:
                wall = _f8.unpack_from(b, start)[0]
                spans.append(Span(start, 8, "<f8", role="wall"))
            elif number == 2 and wire == 0:
                step = _signed(value)
                spans.append(Span(start, end - start, "varint", role="step"))
            elif number == 5 and wire == 2:
                for vnumber, vwire, vstart, vend, _ in _fields(b, start, end):
                    if vnumber == 1 and vwire == 2:
                        self._value(b, vstart, vend, values, spans)
        return Shape(wall, step, tuple(values), tuple(spans))

    def _value(self, b: bytes, p: int, end: int, values: list, spans: list) -> None:
        tag = ""
        simple: int | None = None
        tensor: tuple[int, int] | None = None
        plugin: str | None = None
        data_class = 0
        for number, wire, start, stop, value in _fields(b, p, end):
            if number == 1 and wire == 2:
                tag = b[start:stop].decode("utf-8", "replace")
            elif number == 7 and wire == 2 and not tag:
                tag = b[start:stop].decode("utf-8", "replace")  # TF1's node_name
            elif number == 2 and wire == 5:
                simple = start
            elif number == 8 and wire == 2:
                tensor = (start, stop)
            elif number == 9 and wire == 2:
                plugin, data_class = _metadata(b, start, stop)
        if plugin is not None and tag not in self.plugins:
            self.plugins[tag] = plugin
        if simple is not None:
            values.append((tag, _f4.unpack_from(b, simple)[0]))
            spans.append(Span(simple, 4, "<f4", tag))
            return
        if tensor is None:
            return
        known = plugin if plugin is not None else self.plugins.get(tag, "")
        if known not in ("scalars", "") and data_class != _DATA_CLASS_SCALAR:
            return  # a histogram, an image, text...: not decoded
        found = _tensor_scalar(b, *tensor)
        if found is not None:
            span, number = found
            values.append((tag, number))
            spans.append(attrs.evolve(span, tag=tag))

    # -- many records ----------------------------------------------------------------------

    def decode(self, buf: bytes, starts: list[int], lengths: list[int]) -> dict[str, Columns]:
        """The scalars of the records at ``starts``/``lengths`` in ``buf``, per tag, in
        record order. A malformed record is skipped (it passed its CRC: the writer wrote
        it so, and no later pass would read it differently)."""
        import numpy as np

        out: dict[str, list[tuple[np.ndarray, Columns]]] = {}
        if not starts:
            return {}
        raw = np.frombuffer(buf, np.uint8)
        st = np.asarray(starts, np.int64)
        ln = np.asarray(lengths, np.int64)
        order = np.argsort(ln, kind="stable")
        sorted_ln = ln[order]
        cuts = np.flatnonzero(np.diff(sorted_ln)) + 1
        groups = np.split(order, cuts)
        # The first-seen metadata of a tag should be seen first: take the groups in the
        # order of their first record.
        groups.sort(key=lambda g: g[0])
        for idx in groups:
            length = int(ln[idx[0]])
            if length > _SHAPED_MAX or len(idx) == 1:
                self._one_by_one(buf, st, ln, idx, out)
            else:
                self._shaped(buf, raw, st, ln, length, idx, out)
        return {tag: _ordered(parts) for tag, parts in out.items()}

    def _one_by_one(self, buf, st, ln, idx, out) -> None:
        import numpy as np

        for i in idx:
            s = int(st[i])
            try:
                shape = self.parse(buf[s:s + int(ln[i])])
            except WireError:
                continue
            for tag, value in shape.values:
                out.setdefault(tag, []).append((np.array([i]), Columns(
                    np.array([shape.step], np.int64), np.array([shape.wall]), np.array([value], np.float64))))

    def _shaped(self, buf, raw, st, ln, length, idx, out) -> None:
        """Peel off the first record's shape, then the next left's, and so on: one numpy
        pass over what is left per shape (records of one length are mostly few shapes: a
        tag each). Shapes that match almost nothing mean records that differ throughout
        (text, small images): after a few, the rest are parsed one by one."""
        import numpy as np

        rows = raw[st[idx][:, None] + np.arange(length)]
        misses = 0
        for _ in range(_MAX_SHAPES):
            if not len(idx) or misses >= _MAX_MISSES:
                break
            s = int(st[idx[0]])
            try:
                shape = self.parse(buf[s:s + length])
            except WireError:
                idx, rows = idx[1:], rows[1:]
                continue
            same = _matching(rows, shape.spans)
            if shape.values:
                self._emit(rows[same], idx[same], shape, out)
            misses += int(same.sum()) < _FEW
            keep = ~same
            idx, rows = idx[keep], rows[keep]
        if len(idx):
            self._one_by_one(buf, st, ln, idx, out)

    @staticmethod
    def _emit(rows: np.ndarray, idx: np.ndarray, shape: Shape, out) -> None:
        import numpy as np

        steps = np.zeros(len(idx), np.int64)
        walls = np.zeros(len(idx), np.float64)
        for span in shape.spans:
            if span.role == "wall":
                walls = _read(rows, span)
            elif span.role == "step":
                steps = _read(rows, span)
        for span in shape.spans:
            if span.role == "value":
                out.setdefault(span.tag, []).append((idx, Columns(steps, walls, _read(rows, span).astype(np.float64))))


def _metadata(b: bytes, p: int, end: int) -> tuple[str, int]:
    plugin, data_class = "", 0
    for number, wire, start, stop, value in _fields(b, p, end):
        if number == 1 and wire == 2:
            for pnumber, pwire, pstart, pstop, _ in _fields(b, start, stop):
                if pnumber == 1 and pwire == 2:
                    plugin = b[pstart:pstop].decode("utf-8", "replace")
        elif number == 4 and wire == 0:
            data_class = value
    return plugin, data_class


def _tensor_scalar(b: bytes, p: int, end: int) -> tuple[Span, float] | None:
    """The one value of a one-element numeric TensorProto, with its span; else None."""
    import numpy as np

    dtype = 0
    elements = 1
    content: tuple[int, int] | None = None
    typed: dict[int, tuple[int, int, int]] = {}  # field -> (wire, start, end) of its first
    for number, wire, start, stop, value in _fields(b, p, end):
        if number == 1 and wire == 0:
            dtype = value
        elif number == 2 and wire == 2:
            for dnumber, dwire, dstart, dstop, _ in _fields(b, start, stop):
                if dnumber == 2 and dwire == 2:
                    for snumber, swire, _s, _e, size in _fields(b, dstart, dstop):
                        if snumber == 1 and swire == 0:
                            elements *= size
        elif number == 4 and wire == 2:
            content = (start, stop)
        elif number not in typed:
            typed[number] = (wire, start, stop)
    if dtype not in _DT or elements != 1:
        return None
    np_dtype, field, kind = _DT[dtype]
    if content is not None and content[1] > content[0]:
        width = np.dtype(np_dtype).itemsize
        if content[1] - content[0] != width:
            return None
        span = Span(content[0], width, np_dtype)
        return span, float(np.frombuffer(b, np_dtype, 1, content[0])[0])
    if field not in typed:
        return None
    wire, start, stop = typed[field]
    if kind in ("f4", "f8"):
        width = 4 if kind == "f4" else 8
        if wire == 2 and stop - start != width:  # packed: exactly one element
            return None
        span = Span(start, width, "<" + kind)
        return span, float(np.frombuffer(b, "<" + kind, 1, start)[0])
    if wire == 2:  # packed varints: exactly one
        value, after = _varint(b, start)
        if after != stop:
            return None
        end_ = stop
    else:
        value, end_ = _varint(b, start)
    span = Span(start, end_ - start, kind)
    return span, _varint_number(value, kind)


def _varint_number(value: int, kind: str) -> float:
    import numpy as np

    if kind == "half":
        return float(np.array([value & 0xFFFF], np.uint16).view(np.float16)[0])
    return float(_signed(value))


def _matching(rows: np.ndarray, spans: tuple[Span, ...]) -> np.ndarray:
    """Which rows have the first row's shape: the same bytes outside its spans, and
    varints of the same widths."""
    import numpy as np

    fixed = np.ones(rows.shape[1], bool)
    for span in spans:
        fixed[span.offset:span.offset + span.width] = False
    same = (rows[:, fixed] == rows[0, fixed]).all(axis=1)
    for span in spans:
        if span.kind in ("varint", "half"):
            o, w = span.offset, span.width
            if w > 1:
                same &= (rows[:, o:o + w - 1] & 0x80).all(axis=1)
            same &= rows[:, o + w - 1] < 0x80
    return same


def _read(rows: np.ndarray, span: Span) -> np.ndarray:
    import numpy as np

    o, w = span.offset, span.width
    if span.kind in ("varint", "half"):
        x = np.zeros(len(rows), np.uint64)
        for i in range(w):
            x |= (rows[:, o + i] & 0x7F).astype(np.uint64) << np.uint64(7 * i)
        if span.kind == "half":
            return (x & np.uint64(0xFFFF)).astype(np.uint16).view(np.float16).astype(np.float64)
        return x.view(np.int64)
    return np.ascontiguousarray(rows[:, o:o + w]).view(span.kind).ravel()


def _ordered(parts: list[tuple[np.ndarray, Columns]]) -> Columns:
    import numpy as np

    if len(parts) == 1:
        return parts[0][1]
    idx = np.concatenate([i for i, _ in parts])
    order = np.argsort(idx, kind="stable")
    whole = Columns.concat(c for _, c in parts)
    return Columns(whole.steps[order], whole.walls[order], whole.values[order])
