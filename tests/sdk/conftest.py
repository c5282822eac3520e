"""Every SDK test keeps its spool away from the real user's home."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_home(tmp_path, monkeypatch):
    # A Run given an env without GPUPLANE_HOME spools under ~/.local/share/gpuplane: make ~ the test's.
    monkeypatch.setenv("HOME", str(tmp_path / "user-home"))
    monkeypatch.delenv("GPUPLANE_HOME", raising=False)
