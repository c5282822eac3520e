import pytest

from gpuplaned.config import ConfigError, load_config, parse_listen


def write(tmp_path, text):
    path = tmp_path / "gpuplaned.toml"
    path.write_text(text)
    return path


def env(tmp_path, **extra):
    return {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path), **extra}


def test_defaults_without_a_file(tmp_path):
    cfg = load_config({}, env(tmp_path, XDG_RUNTIME_DIR="/run/user/9"))
    assert cfg.role == "all"
    assert str(cfg.runtime_dir) == "/run/user/9/gpuplane"
    assert cfg.config_file is None
    assert cfg.store.max_batch == 1000


def test_file_then_env_then_flags(tmp_path):
    path = write(tmp_path, 'role = "server"\nhome = "/data/a"\nlog_level = "debug"\n[store]\nmax_batch = 50\n')
    cfg = load_config({"config": str(path)}, env(tmp_path))
    assert (cfg.role, str(cfg.home), cfg.log_level, cfg.store.max_batch) == ("server", "/data/a", "debug", 50)
    cfg = load_config({"config": str(path)}, env(tmp_path, GPUPLANE_HOME="/data/b"))
    assert str(cfg.home) == "/data/b"
    cfg = load_config({"config": str(path), "home": "/data/c", "role": "all"}, env(tmp_path, GPUPLANE_HOME="/data/b"))
    assert (str(cfg.home), cfg.role) == ("/data/c", "all")


def test_default_config_location_is_read(tmp_path):
    (tmp_path / "xdg" / "gpuplane").mkdir(parents=True)
    (tmp_path / "xdg" / "gpuplane" / "gpuplaned.toml").write_text('log_level = "warning"\n')
    cfg = load_config({}, env(tmp_path))
    assert cfg.log_level == "warning"
    assert cfg.config_file == tmp_path / "xdg" / "gpuplane" / "gpuplaned.toml"


@pytest.mark.parametrize("text, message", [
    ('colour = "red"\n', "unknown key colour"),
    ('[store]\nmax_btch = 3\n', "unknown key store.max_btch"),
    ('[store]\nmax_batch = 0\n', "store.max_batch must be a positive integer"),
    ('[store]\nmax_batch = "many"\n', "store.max_batch must be a positive integer"),
    ('store = 3\n', r"\[store\] must be a table"),
    ('role = "boss"\n', "role must be one of all, server, agent"),
    ('listen = "tcp://0.0.0.0:80"\n', "listen the control endpoint must be loopback"),
    ('listen = "unix://relative/x.sock"\n', "listen unix socket path must be absolute"),
    ('role = "agent"\n', "role agent needs the server's URL"),
    ('server = "ftp://x"\n', "server must be an http"),
    ('role = \n', "invalid TOML"),
])
def test_bad_config_names_the_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as info:
        load_config({"config": str(path)}, env(tmp_path))
    if "TOML" not in message and "agent" not in message:
        assert str(path) in str(info.value)


def test_missing_explicit_config_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config({"config": str(tmp_path / "nope.toml")}, env(tmp_path))


def test_bad_flag_is_named(tmp_path):
    with pytest.raises(ConfigError, match="--listen: listen expected unix:///abs/path"):
        load_config({"listen": "http://x"}, env(tmp_path))


def test_parse_listen():
    assert parse_listen("unix:///a/b.sock").unix == "/a/b.sock"
    tcp = parse_listen("tcp://127.0.0.1:8123")
    assert (tcp.host, tcp.port) == ("127.0.0.1", 8123)
    assert parse_listen("tcp://localhost:1").host == "127.0.0.1"
    assert parse_listen("tcp://[::1]:5").host == "::1"
    for bad in ("tcp://10.0.0.1:5", "tcp://example.com:5", "tcp://127.0.0.1", "tcp://127.0.0.1:x", "udp://x"):
        with pytest.raises(ValueError):
            parse_listen(bad)
