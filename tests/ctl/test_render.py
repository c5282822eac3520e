"""Pure formatting and the daemon-home rule, without processes."""

import pytest
from gpuplanectl import render
from gpuplanectl.commands.daemon import daemon_home


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (12.9, "12s"), (59.99, "59s"), (60, "1m00s"), (185, "3m05s"), (3599, "59m59s"),
     (3600, "1h00m"), (3720, "1h02m"), (86399, "23h59m"), (90000, "1d01h"), (None, "-"), (-1, "-")],
)
def test_format_uptime(seconds, text):
    assert render.format_uptime(seconds) == text


def test_table_aligns_columns_and_does_not_pad_the_last():
    out = render.table(["A", "LONG HEADER", "C"], [["xxxx", "y", "last"], ["z", "", "-"]])
    assert out.splitlines() == [
        "A     LONG HEADER  C",
        "xxxx  y            last",
        "z                  -",
    ]


def test_actor_line_and_last_error():
    actor = {"name": "flaky", "state": "RUNNING", "uptime_s": 65.2, "restarts": 2,
             "last_error": "InjectedCrash: boom\nTraceback...", "last_error_at": 1_000_000}
    assert render.last_error_text(actor, now=1012.5) == "InjectedCrash: boom (12s ago)"
    line = render.actor_line(actor)
    assert line.startswith("flaky: RUNNING (up 1m05s, 2 restarts, last error: InjectedCrash: boom (")
    stopped = {"name": "store", "state": "STOPPED", "uptime_s": 0.0, "restarts": 1, "last_error": None}
    assert render.actor_line(stopped) == "store: STOPPED (1 restart)"


def test_daemon_home_follows_the_daemons_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    config = tmp_path / "gpuplaned.toml"
    config.write_text('home = "/srv/from-config"\n')
    xdg = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    (tmp_path / "xdg" / "gpuplane").mkdir(parents=True)
    (tmp_path / "xdg" / "gpuplane" / "gpuplaned.toml").write_text('home = "/srv/from-default-config"\n')

    env = {"GPUPLANE_HOME": "/srv/from-env", **xdg}
    assert str(daemon_home("/srv/flag", str(config), env)) == "/srv/flag"
    assert str(daemon_home(None, str(config), env)) == "/srv/from-env"
    assert str(daemon_home(None, str(config), xdg)) == "/srv/from-config"
    assert str(daemon_home(None, None, xdg)) == "/srv/from-default-config"
    assert daemon_home(None, None, {"XDG_CONFIG_HOME": str(tmp_path / "none")}) == (
        tmp_path / "user" / ".local" / "share" / "gpuplane")
    config.write_text("not toml [")
    assert daemon_home(None, str(config), {}) == tmp_path / "user" / ".local" / "share" / "gpuplane"


def test_exit_codes_for_api_errors():
    from gpuplanectl.exit_codes import for_error

    from gpuplaned.protocol.errors import ErrorCode

    assert for_error(ErrorCode.BAD_REQUEST) == 2
    assert {for_error(code) for code in ErrorCode if code is not ErrorCode.BAD_REQUEST} == {1}
