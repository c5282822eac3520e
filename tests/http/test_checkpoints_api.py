"""Checkpoints and script events through a real daemon: sent in SDK batches (exactly once with
them), listed per run with the best marked by the metric's direction."""

from __future__ import annotations

import pytest

from gpuplaned.protocol.errors import ApiError, ErrorCode

pytestmark = pytest.mark.e2e


def test_unknown_runs_and_checkpoints_are_404(api):
    run_id = api.post("/api/v1/sessions", {})["run_id"]
    assert api.get(f"/api/v1/runs/{run_id}/checkpoints") == \
        {"checkpoints": [], "metric": None, "direction": None, "best_id": None}
    for path in ("/api/v1/runs/run_nope/checkpoints", "/api/v1/checkpoints/ck_nope"):
        with pytest.raises(ApiError) as err:
            api.get(path)
        assert err.value.code == ErrorCode.NOT_FOUND
