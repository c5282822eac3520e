"""The event hook's cursor file: named by the filter under the state dir, replaced atomically."""

from __future__ import annotations

from gpuplanectl.commands.event_hook import default_cursor_file, read_cursor, write_cursor


def test_the_default_cursor_is_under_the_state_dir_and_named_by_the_filter(tmp_path):
    env = {"XDG_STATE_HOME": str(tmp_path)}
    oom = default_cursor_file({"type": "OOM"}, env)
    assert oom.parent == tmp_path / "gpuplane" / "event-hooks"
    assert oom == default_cursor_file({"type": "OOM"}, env) != default_cursor_file({"type": "RUN_FINISHED"}, env)
    home = default_cursor_file({}, {"HOME": str(tmp_path)})
    assert home.parent == tmp_path / ".local" / "state" / "gpuplane" / "event-hooks"


def test_write_then_read(tmp_path):
    path = tmp_path / "deep" / "c"
    assert read_cursor(path) is None
    write_cursor(path, "ev_1")
    write_cursor(path, "ev_2")
    assert read_cursor(path) == "ev_2"
    assert [p.name for p in path.parent.iterdir()] == ["c"]  # no temporary file left
