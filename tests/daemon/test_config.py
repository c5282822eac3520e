import subprocess
import sys

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
    ('[scheduler]\nmax_free_util = 0\n', "scheduler.max_free_util must be a number from 0.1 to 100"),
    ('[scheduler]\nmax_free_util = "10%"\n', "scheduler.max_free_util must be a number from 0.1 to 100"),
    ('[scheduler]\nfree_util_samples = 61\n', "scheduler.free_util_samples must be a whole number from 1 to 60"),
    ('home = ' + '[' * 3000 + ']' * 3000 + '\n', "invalid TOML: arrays or tables nested too deeply"),
    ('home = ' + '{a = ' * 3000 + '1' + '}' * 3000 + '\n', "invalid TOML: arrays or tables nested too deeply"),
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


def test_a_deeply_nested_config_stops_the_daemon_with_exit_2_and_the_reason(tmp_path):
    path = write(tmp_path, "home = " + "[" * 100_000 + "\n")
    done = subprocess.run([sys.executable, "-m", "gpuplaned", "--config", str(path)], env=env(tmp_path),
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert done.stderr == (f"gpuplaned: configuration error: {path}: invalid TOML: "
                           "arrays or tables nested too deeply\n")


def test_http_section_sets_connection_limits_and_may_hold_the_address(tmp_path):
    cfg = load_config({}, env(tmp_path))
    assert (cfg.http_limits.keep_alive_timeout_s, cfg.http_limits.body_timeout_s,
            cfg.http_limits.max_connections) == (5.0, 30.0, 256)
    path = write(tmp_path, '[http]\nlisten = "0.0.0.0:9000"\nkeep_alive_timeout_s = 1.5\nbody_timeout_s = 2\n'
                           'max_connections = 10\n')
    cfg = load_config({"config": str(path)}, env(tmp_path))
    assert (cfg.http.host, cfg.http.port) == ("0.0.0.0", 9000)
    assert (cfg.http_limits.keep_alive_timeout_s, cfg.http_limits.body_timeout_s,
            cfg.http_limits.max_connections) == (1.5, 2.0, 10)
    assert load_config({"config": str(path)}, env(tmp_path, GPUPLANE_HTTP="127.0.0.1:1")).http.port == 1
    assert load_config({"config": str(write(tmp_path, 'http = "127.0.0.1:7"\n'))}, env(tmp_path)).http.port == 7


@pytest.mark.parametrize("text, message", [
    ("[http]\nkeep_alive_timeout_s = 0\n", "http.keep_alive_timeout_s must be"),
    ("[http]\nbody_timeout_s = -1\n", "http.body_timeout_s must be"),
    ("[http]\nmax_connections = 0\n", "http.max_connections must be"),
    ('[http]\nallowed_hosts = ["gpubox.lan:8765"]\n', "http.allowed_hosts must be host names"),
    ('[http]\nallowed_hosts = "gpubox.lan"\n', "http.allowed_hosts must be a list"),
    ('[http]\nlisten = "nowhere"\n', "http.listen expected HOST:PORT"),
    ("[http]\nidle = 3\n", "unknown key http.idle"),
    ("http = 3\n", "http"),
])
def test_bad_http_section_names_the_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message):
        load_config({"config": str(path)}, env(tmp_path))


def test_each_source_is_checked_even_where_a_later_one_overrides_it(tmp_path):
    path = write(tmp_path, '[node]\ngpus = "fake:99"\n')
    with pytest.raises(ConfigError, match=f"{path}: node.gpus fake GPU count must be 1..64"):
        load_config({"config": str(path), "gpus": "fake:2"}, env(tmp_path))
    with pytest.raises(ConfigError, match="environment GPUPLANE_HTTP: http expected HOST:PORT"):
        load_config({"http": "127.0.0.1:9"}, env(tmp_path, GPUPLANE_HTTP="nowhere"))


def test_flags_set_keys_inside_sections_and_fake_gpus_take_the_files_model(tmp_path):
    path = write(tmp_path, '[node]\nfake_gpu_model = "Fake 24GB"\nfake_gpu_memory_mb = 24576\nlabels = ["a"]\n')
    cfg = load_config({"config": str(path), "gpus": "fake:3", "node_name": "box", "max_cpu_jobs": 0,
                       "label": ["b", "c"], "http": "127.0.0.1:9", "no_http": True, "owner_pid": 1}, env(tmp_path))
    assert (cfg.node.gpus.count, cfg.node.gpus.fake_model, cfg.node.gpus.fake_memory_mb) == (3, "Fake 24GB", 24576)
    assert (cfg.node.name, cfg.node.max_cpu_jobs, cfg.node.labels) == ("box", 0, ("b", "c"))
    assert (cfg.http, cfg.owner_pid) == (None, 1)  # --no-http wins over --http
    with pytest.raises(ConfigError, match="--max-cpu-jobs: node.max_cpu_jobs must be an integer >= 0"):
        load_config({"max_cpu_jobs": -1}, env(tmp_path))
