"""The chunk codec: what is stored decodes to the same numbers, in every format, and the bytes
of a packed blob stay what earlier versions wrote (databases outlive the code)."""

from __future__ import annotations

import math
from array import array

import pytest

from gpuplaned.tsdb import codec

LAYOUT = (("q", True), ("q", True), ("d", False))  # ts and step delta-encoded, like a run series
COLUMNS = [array("q", [1_700_000_000_000, 1_700_000_000_100, 1_700_000_000_250]), array("q", [0, 1, 2]),
           array("d", [0.5, 0.25, math.nan])]
# Written by the byte-plane and delta code before it used numpy (gpuplaned 0.1, issue 16).
PACKED_BEFORE = bytes.fromhex("0103030000004367e4d8780163489996c1c0f09481e13c034337030323030c3022983021ecf4830b3f"
                              "ecedeb01ff1f074a")


def same(got: list[array], want: list[array]) -> bool:
    return [a.typecode for a in got] == [a.typecode for a in want] and all(
        x == y or (math.isnan(x) and math.isnan(y)) for a, b in zip(got, want) for x, y in zip(a, b))


def test_a_blob_written_before_decodes_and_is_written_the_same():
    assert same(codec.decode(PACKED_BEFORE, LAYOUT, "chunk 1"), COLUMNS)
    assert codec.encode(COLUMNS, LAYOUT, True) == PACKED_BEFORE


@pytest.mark.parametrize(("packed", "planes"), [(False, True), (True, True), (True, False)])
@pytest.mark.parametrize("n", [0, 1, 9, 5000])
def test_every_format_round_trips_including_int64_extremes(packed, planes, n):
    big = [(-1) ** k * (2**63 - 1 - k) if k % 3 == 0 else k for k in range(n)]
    cols = [array("q", sorted(big)), array("q", big), array("d", [k / 7 for k in range(n)])]
    assert same(codec.decode(codec.encode(cols, LAYOUT[:1] + (("q", False),) + LAYOUT[2:], packed, planes),
                             LAYOUT[:1] + (("q", False),) + LAYOUT[2:], "chunk 2"), cols)
