"""``ids=`` of the compare routes: 2 to 10 distinct ids of the right shape, bad ones named."""

from __future__ import annotations

import pytest

from gpuplaned.protocol.errors import ApiError
from gpuplaned.service.api.diagnosis import parse_ids


@pytest.mark.parametrize("raw, prefix, ids", [
    ("run_A,my-run.2", "run", ["run_A", "my-run.2"]),  # a session may name its run
    (" run_A , run_B ,run_A", "run", ["run_A", "run_B"]),
    ("ck_01ABC,ck_02DEF", "ck", ["ck_01ABC", "ck_02DEF"]),
])
def test_accepted(raw, prefix, ids):
    assert parse_ids(raw, prefix) == ids


@pytest.mark.parametrize("raw, prefix, named", [
    ("run_A,no/pe,bad id", "run", ["no/pe", "bad id"]),
    ("ck_1,run_A", "ck", ["run_A"]),
    ("run_A", "run", None),
    ("", "run", None),
    (",".join(f"r{k}" for k in range(11)), "run", None),
])
def test_refused(raw, prefix, named):
    with pytest.raises(ApiError) as refused:
        parse_ids(raw, prefix)
    assert refused.value.code.value == "bad_request" and refused.value.details.get("ids") == named
