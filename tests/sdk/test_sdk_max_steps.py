"""``gpuplane.init(max_steps=)`` puts ``max_steps`` in the run's config (what the run's summary
reads for its progress and ETA), beside the script's own config."""

from __future__ import annotations

from sdk_fake import FakeDaemon

import gpuplane


def test_max_steps_goes_in_the_config(tmp_path, monkeypatch):
    with FakeDaemon(tmp_path / "run") as fake:
        monkeypatch.setenv("GPUPLANE_RUNTIME_DIR", str(fake.runtime_dir))
        run = gpuplane.init(config={"lr": 0.1}, max_steps=5000)
        run.finish()
        assert fake.sessions[run.session_id]["config"] == {"lr": 0.1, "max_steps": 5000}
        run = gpuplane.init()
        run.finish()
        assert fake.sessions[run.session_id].get("config") is None
