"""The one converter structures a StrEnum field by its members' values, strictly."""

from __future__ import annotations

import attrs
import pytest

from gpuplaned.domain.failures import ExitReason
from gpuplaned.protocol.converter import structure
from gpuplaned.protocol.errors import ApiError


@attrs.frozen
class Record:
    reason: ExitReason


def test_a_strenum_field_takes_its_values_only():
    assert structure({"reason": "timeout"}, Record).reason is ExitReason.TIMEOUT
    with pytest.raises(ApiError) as bad:
        structure({"reason": "vanished"}, Record)
    assert bad.value.details == {"field": "reason"}
    with pytest.raises(ApiError, match="reason: must be a string"):
        structure({"reason": 1}, Record)
