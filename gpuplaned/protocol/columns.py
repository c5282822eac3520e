"""Binary columns on the wire: the base64 of little-endian int64 (steps, timestamps) or
float64 (values) arrays, whatever the machine's byte order.

Parsing a float from JSON text costs the daemon about half a microsecond and formatting one
costs the SDK's sender as much (holding the training process's GIL); a column of packed
doubles costs a few nanoseconds a value either way, and keeps NaN and infinities exactly.
Used by the SDK's batches (``"encoding": "base64"``) and by ``GET /runs/{id}/series``.
"""

from __future__ import annotations

import base64
import binascii
import sys
from array import array

INT_COLUMNS = ("step", "ts")  # int64; every other column ("value") is float64
_SWAP = sys.byteorder != "little"


def typecode(column: str) -> str:
    return "q" if column in INT_COLUMNS else "d"


def encode(col: array) -> bytes:
    """The base64 (ASCII bytes) of ``col`` as little-endian."""
    if _SWAP:
        col = array(col.typecode, col)
        col.byteswap()
    return base64.b64encode(col.tobytes())


def decode(text: object, column: str) -> array:
    """The array a base64 column holds.

    Raises:
        ValueError: not a string of base64, or not a whole number of 8-byte items.
    """
    if not isinstance(text, str):
        raise ValueError("a base64 string")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not valid base64") from None
    if len(raw) % 8:
        kind = "int64" if column in INT_COLUMNS else "float64"
        raise ValueError(f"{len(raw)} bytes, not a whole number of 8-byte {kind}s")
    col = array(typecode(column))
    col.frombytes(raw)
    if _SWAP:
        col.byteswap()
    return col
