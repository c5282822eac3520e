"""Columns of numbers to a chunk blob and back.

A blob is a 10-byte header (format, column count, row count, CRC-32 of the payload) and
the columns' bytes. Plain blobs (written on the hot ingest path) hold the arrays as they
are. Packed blobs delta-encode the integer columns marked ``delta``, split every column
into byte planes (all first bytes, then all second bytes...: timestamps and steps become
long runs of zeros, float exponents line up) and deflate the result. The CRC makes a
damaged blob an error instead of wrong numbers.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from itertools import accumulate
from operator import sub

PLAIN = 0
PACKED = 1
DEFLATED = 2  # deflated without byte planes: small blobs read often, where un-planing costs more than it saves
ZLIB_LEVEL = 1  # level 6 saves ~2% on training series and costs 1.5x the time (docs/timeseries.md)

_HEADER = struct.Struct("<BBII")
_SWAP = sys.byteorder != "little"  # blobs are little-endian whatever the machine


class CorruptChunk(Exception):
    """A stored chunk does not decode; the message names the chunk."""


# A layout is a tuple of (typecode, delta) per column; every typecode is 8 bytes wide.
Layout = tuple[tuple[str, bool], ...]


def encode(columns: list, layout: Layout, packed: bool, planes: bool = True) -> bytes:
    """``columns`` are sequences (arrays or lists) of equal length, in ``layout`` order."""
    n = len(columns[0])
    parts = []
    for values, (code, delta) in zip(columns, layout):
        if packed and delta and n:
            values = [values[0], *map(sub, values[1:], values[:-1])]
        a = values if isinstance(values, array) and values.typecode == code else array(code, values)
        if _SWAP:
            a = array(code, a)
            a.byteswap()
        raw = a.tobytes()
        parts.append(_planes(raw) if packed and planes else raw)
    payload = b"".join(parts)
    fmt = (PACKED if planes else DEFLATED) if packed else PLAIN
    if packed:
        payload = zlib.compress(payload, ZLIB_LEVEL)
    return _HEADER.pack(fmt, len(layout), n, zlib.crc32(payload)) + payload


def decode(blob: bytes, layout: Layout, what: str) -> list[array]:
    """The columns of ``blob`` as arrays; ``what`` names the chunk in errors."""
    try:
        fmt, ncols, n, crc = _HEADER.unpack_from(blob)
    except struct.error:
        raise CorruptChunk(f"{what}: blob too short ({len(blob)} bytes)") from None
    payload = memoryview(blob)[_HEADER.size:]
    if fmt not in (PLAIN, PACKED, DEFLATED) or ncols != len(layout):
        raise CorruptChunk(f"{what}: unknown format {fmt} with {ncols} columns")
    if zlib.crc32(payload) != crc:
        raise CorruptChunk(f"{what}: checksum mismatch (the blob is damaged)")
    if fmt != PLAIN:
        try:
            payload = memoryview(zlib.decompress(payload))
        except zlib.error as exc:
            raise CorruptChunk(f"{what}: cannot inflate: {exc}") from None
    if len(payload) != 8 * n * ncols:
        raise CorruptChunk(f"{what}: {len(payload)} bytes for {n} rows of {ncols} columns")
    out = []
    for i, (code, delta) in enumerate(layout):
        raw = payload[8 * n * i: 8 * n * (i + 1)]
        a = array(code)
        a.frombytes(_unplanes(raw) if fmt == PACKED else raw)
        if _SWAP:
            a.byteswap()
        if fmt != PLAIN and delta:
            a = _undelta(a)
        out.append(a)
    return out


def _undelta(deltas: array) -> array:
    """The running sum of an int64 column: numpy's, ~50x faster than ``accumulate`` into an
    array (a packed chunk of 8000 points took 13 ms to read, most of it here). Exact: the
    deltas were taken from int64 values, so every prefix sum is one of those values."""
    if deltas.typecode != "q":
        return array(deltas.typecode, accumulate(deltas))
    import numpy  # here, as in the two below: only packed chunks need it, and a daemon starts without it (~0.1 s)

    out = array("q")
    out.frombytes(numpy.cumsum(numpy.frombuffer(deltas, dtype=numpy.int64)).tobytes())
    return out


def _planes(raw: bytes) -> bytes:
    """Byte i of every value together, for i in 0..7 (a transpose of the n x 8 bytes)."""
    import numpy

    return numpy.frombuffer(raw, dtype=numpy.uint8).reshape(len(raw) // 8, 8).T.tobytes()


def _unplanes(raw: memoryview) -> bytes:
    """The byte planes put back in place: plane i holds byte i of every value (a transpose)."""
    import numpy

    return numpy.frombuffer(raw, dtype=numpy.uint8).reshape(8, len(raw) // 8).T.tobytes()
