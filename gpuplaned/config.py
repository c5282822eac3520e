"""Daemon configuration: defaults < TOML file < environment < command-line flags.

Every key is checked: an unknown key or a bad value is a ``ConfigError`` that names the key
(``store.max_batch``) and the file, and the daemon exits 2 without touching anything.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs

from gpuplaned.telemetry.backend import GpuSource, parse_gpus
from gpuplaned.protocol.discovery import default_runtime_dir

ROLES = ("all", "server", "agent")
LOG_LEVELS = ("debug", "info", "warning", "error")


class ConfigError(ValueError):
    """A configuration problem, worded for the user; the daemon exits 2."""


@attrs.frozen
class Listen:
    """An explicit control endpoint from ``--listen``/``listen =``."""

    unix: str | None = None
    host: str | None = None
    port: int | None = None

    def __str__(self) -> str:
        return f"unix://{self.unix}" if self.unix else f"tcp://{self.host}:{self.port}"


@attrs.frozen
class HttpFront:
    """Where the token-authenticated HTTP front listens (``--http``); None in Config: off."""

    host: str
    port: int

    @property
    def loopback(self) -> bool:
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return self.host == "localhost"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


DEFAULT_HTTP = HttpFront("127.0.0.1", 8765)


def parse_http(value: str) -> HttpFront | None:
    """``HOST:PORT`` (``[v6]:PORT``), or ``off`` for no HTTP front; port 0 picks a free one."""
    if value.strip().lower() in ("off", "none", "no", "false", ""):
        return None
    host, sep, port = value.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:8765) or off, got {value!r}")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"HOST must be an IP address or localhost, got {host!r}") from None
    return HttpFront("127.0.0.1" if host == "localhost" else host, int(port))


@attrs.frozen
class HttpLimits:
    """How the HTTP servers treat connections (``[http]``; ``gpuplaned.http.connections``).

    The timeouts hold on the control socket too; the cap only on the TCP front.
    """

    # A connection with no request in progress is closed after this long; it also bounds
    # how long a request's headers may take (from the connection's start or its last reply).
    keep_alive_timeout_s: float = 5.0
    body_timeout_s: float = 30.0  # the longest a request's body may take to arrive (then 408)
    max_connections: int = 256  # open TCP connections; more are answered 503 and closed


@attrs.frozen
class StoreConfig:
    max_batch: int = 1000  # most writes folded into one transaction
    read_connections: int = 4


@attrs.frozen
class NodeConfig:
    name: str = attrs.field(factory=socket.gethostname)
    labels: tuple[str, ...] = ()
    gpus: GpuSource = GpuSource("auto")
    max_cpu_jobs: int = 2
    log_tail_lines: int = 2000  # lines of each job's output kept in the store


@attrs.frozen
class MonitorConfig:
    sample_interval_s: float = 2.0
    batch_interval_s: float = 5.0  # metric points go to the store in batches this often
    disk_low_percent: float = 5.0  # DISK_LOW under this much free on the data or job disk
    idle_util_percent: float = 20.0  # GPU_UNDERUTILIZED: under this utilization...
    idle_memory_percent: float = 30.0  # ...and this much memory...
    idle_minutes: float = 10.0  # ...for this long
    foreign_gpu_busy: bool = True  # a GPU used by a process outside GPUPlane takes no new job...
    foreign_min_memory_mb: int = 1024  # ...once such processes hold this much of its memory (a desktop's display: less)


@attrs.frozen
class RetentionConfig:
    """How long node metrics are kept per resolution; training metrics are always kept."""

    node_raw_hours: float = 24.0
    node_1m_days: float = 7.0
    node_5m_days: float = 30.0
    pass_interval_s: float = 60.0  # how often rollups, compaction and retention run


@attrs.frozen
class UiConfig:
    """The browser UI on the HTTP front (``[ui]``; ``gpuplaned.http.ui_routes``, ``gpuplaned.service.ui_sessions``)."""

    web_dir: Path | None = None  # the built app (index.html, assets/); None: the package's or the checkout's
    session_ttl_s: int = 7 * 86_400  # how long a browser stays signed in
    login_link_ttl_s: int = 120  # how long a `gpuplanectl ui` link can be used (once)


@attrs.frozen
class Config:
    role: str = "all"
    home: Path = attrs.field(factory=lambda: Path("~/.local/share/gpuplane").expanduser())
    runtime_dir: Path = attrs.field(factory=default_runtime_dir)
    listen: Listen | None = None
    http: HttpFront | None = DEFAULT_HTTP  # None: no HTTP front
    http_limits: HttpLimits = HttpLimits()
    server: str | None = None
    log_level: str = "info"
    owner_pid: int | None = None
    config_file: Path | None = None
    store: StoreConfig = StoreConfig()
    node: NodeConfig = attrs.field(factory=NodeConfig)
    monitor: MonitorConfig = MonitorConfig()
    retention: RetentionConfig = RetentionConfig()
    ui: UiConfig = UiConfig()

    @property
    def db_path(self) -> Path:
        return self.home / "gpuplane.db"

    @property
    def fake_gpu_dir(self) -> Path:
        """Where processes claim fake GPUs (``fake:N``): ``<dir>/<gpu index>/<pid>``."""
        return self.runtime_dir / "fake-gpus"


def default_config_path(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "gpuplane" / "gpuplaned.toml"


def parse_listen(value: str) -> Listen:
    """Parse ``unix:///abs/path`` or ``tcp://127.0.0.1:PORT`` (loopback only)."""
    if value.startswith("unix://"):
        path = value[len("unix://"):]
        if not path.startswith("/"):
            raise ValueError(f"unix socket path must be absolute: {value!r} (write unix:///abs/path)")
        return Listen(unix=path)
    if value.startswith("tcp://"):
        parts = urlsplit(value)
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"bad TCP port in {value!r}") from None
        host = parts.hostname
        if host is None or port is None or parts.path not in ("", "/"):
            raise ValueError(f"expected tcp://HOST:PORT, got {value!r}")
        if host != "localhost":
            try:
                loopback = ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = False
            if not loopback:
                raise ValueError(
                    f"the control endpoint must be loopback, not {host!r}: it has no "
                    "authentication beyond this machine (remote access comes over the HTTP front)"
                )
        return Listen(host="127.0.0.1" if host == "localhost" else host, port=port)
    raise ValueError(f"expected unix:///abs/path or tcp://127.0.0.1:PORT, got {value!r}")


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in options:
            raise ValueError(f"must be one of {', '.join(options)}; got {value!r}")
        return value

    return check


def _path(value: Any) -> Path:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a non-empty path string; got {value!r}")
    return Path(value).expanduser().absolute()


def _int_at_least(low: int) -> Callable[[Any], int]:
    wanted = "a positive integer" if low == 1 else f"an integer >= {low}"

    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"must be {wanted}; got {value!r}")
        return value

    return check


def _int_between(low: int, high: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"must be a whole number from {low} to {high}; got {value!r}")
        return value

    return check


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def _number_between(low: float, high: float) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise ValueError(f"must be a number from {low:g} to {high:g}; got {value!r}")
        return float(value)

    return check


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false; got {value!r}")
    return value


def _parsed(parse: Callable[[str], Any]) -> Callable[[Any], Any]:
    """A checker for a string value that ``parse`` turns into its real type."""

    def check(value: Any) -> Any:
        if not isinstance(value, str):
            raise ValueError(f"must be a string; got {value!r}")
        return parse(value)

    return check


_listen = _parsed(parse_listen)
_http = _parsed(parse_http)
_gpus = _parsed(parse_gpus)


def _name(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", value):
        raise ValueError(f"must be 1-63 letters, digits, '.', '_' or '-'; got {value!r}")
    return value


def _labels(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError(f"must be a list of names; got {value!r}")
    return tuple(_name(v) for v in value)


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a non-empty string; got {value!r}")
    return value


def _url(value: Any) -> str:
    if not isinstance(value, str) or urlsplit(value).scheme not in ("http", "https", "ws", "wss"):
        raise ValueError(f"must be an http(s):// or ws(s):// URL; got {value!r}")
    return value


# key -> checker; sections are dotted. The only place that lists what a config may hold.
_TOP_KEYS: dict[str, Callable[[Any], Any]] = {
    "role": _choice(ROLES),
    "home": _path,
    "runtime_dir": _path,
    "listen": _listen,
    "http": _http,
    "server": _url,
    "log_level": _choice(LOG_LEVELS),
}
_SECTIONS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "http": {  # "listen" is the top-level key "http", which a TOML file with an [http] table cannot have
        "listen": _http,
        "keep_alive_timeout_s": _number_between(0.1, 3600),
        "body_timeout_s": _number_between(0.1, 3600),
        "max_connections": _int_between(1, 1_000_000),
    },
    "store": {"max_batch": _positive_int, "read_connections": _positive_int},
    "node": {
        "name": _name,
        "labels": _labels,
        "gpus": _gpus,
        "max_cpu_jobs": _non_negative_int,
        "log_tail_lines": _positive_int,
        "fake_gpu_model": _text,
        "fake_gpu_memory_mb": _positive_int,
    },
    "monitor": {
        "sample_interval_s": _number_between(0.1, 3600),
        "batch_interval_s": _number_between(0.1, 3600),
        "disk_low_percent": _number_between(0, 100),
        "idle_util_percent": _number_between(0, 100),
        "idle_memory_percent": _number_between(0, 100),
        "idle_minutes": _number_between(0, 7 * 24 * 60),
        "foreign_gpu_busy": _bool,
        "foreign_min_memory_mb": _non_negative_int,
    },
    "retention": {
        "node_raw_hours": _number_between(0.1, 24 * 3650),
        "node_1m_days": _number_between(0.01, 3650),
        "node_5m_days": _number_between(0.01, 3650),
        "pass_interval_s": _number_between(0.1, 86_400),
    },
    "ui": {
        "web_dir": _path,
        "session_ttl_s": _int_between(60, 366 * 86_400),
        "login_link_ttl_s": _int_between(1, 3600),
    },
}
# Flags that set a key inside a section: flag name -> (section, key).
_SECTION_FLAGS = {"gpus": ("node", "gpus"), "node_name": ("node", "name"), "max_cpu_jobs": ("node", "max_cpu_jobs")}


def _check(where: str, key: str, checker: Callable[[Any], Any], value: Any) -> Any:
    try:
        return checker(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {key} {exc}") from None


def load_config(
    flags: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
) -> Config:
    """Build the configuration.

    Args:
        flags: values given on the command line (None for "not given"); ``config`` names the file.
        env: the environment (defaults to ``os.environ``).

    Raises:
        ConfigError: an unreadable or unparsable file, an unknown key or a bad value.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}

    explicit = flags.get("config")
    path = Path(explicit).expanduser() if explicit else default_config_path(env)
    config_file: Path | None = None
    if explicit or path.exists():
        data = _read_toml(path)
        config_file = path.absolute()
        where = str(path)
        for key, value in data.items():
            if key in _SECTIONS and (isinstance(value, dict) or key not in _TOP_KEYS):  # http: a string or a table
                if not isinstance(value, dict):
                    raise ConfigError(f"{where}: [{key}] must be a table")
                for sub, sub_value in value.items():
                    checker = _SECTIONS[key].get(sub)
                    if checker is None:
                        raise ConfigError(
                            f"{where}: unknown key {key}.{sub} (known: "
                            + ", ".join(f"{key}.{k}" for k in _SECTIONS[key]) + ")"
                        )
                    sections[key][sub] = _check(where, f"{key}.{sub}", checker, sub_value)
            elif key in _TOP_KEYS:
                values[key] = _check(where, key, _TOP_KEYS[key], value)
            else:
                known = ", ".join(list(_TOP_KEYS) + [f"[{s}]" for s in _SECTIONS])
                raise ConfigError(f"{where}: unknown key {key} (known: {known})")

    if "listen" in sections["http"]:
        values["http"] = sections["http"].pop("listen")
    for key, var in (("home", "GPUPLANE_HOME"), ("runtime_dir", "GPUPLANE_RUNTIME_DIR")):
        if env.get(var):
            values[key] = _check(f"environment {var}", key, _path, env[var])
    if env.get("GPUPLANE_WEB_DIR"):
        sections["ui"]["web_dir"] = _check("environment GPUPLANE_WEB_DIR", "ui.web_dir", _path, env["GPUPLANE_WEB_DIR"])
    if env.get("GPUPLANE_HTTP"):
        values["http"] = _check("environment GPUPLANE_HTTP", "http", _http, env["GPUPLANE_HTTP"])

    for key, checker in _TOP_KEYS.items():
        if flags.get(key) is not None:
            values[key] = _check(f"--{key.replace('_', '-')}", key, checker, flags[key])
    for flag, (section, key) in _SECTION_FLAGS.items():
        if flags.get(flag) is not None:
            where = f"--{flag.replace('_', '-')}"
            sections[section][key] = _check(where, f"{section}.{key}", _SECTIONS[section][key], flags[flag])
    if flags.get("label"):
        sections["node"]["labels"] = _check("--label", "node.labels", _labels, list(flags["label"]))
    if flags.get("no_http"):
        values["http"] = None
    if flags.get("owner_pid") is not None:
        values["owner_pid"] = _check("--owner-pid", "owner_pid", _positive_int, flags["owner_pid"])

    if values.get("role") == "agent" and not values.get("server"):
        raise ConfigError("role agent needs the server's URL: --server URL (or server = in the config)")
    if "runtime_dir" not in values:
        values["runtime_dir"] = default_runtime_dir(env)
    node = dict(sections["node"])
    fake_model = node.pop("fake_gpu_model", None)
    fake_memory = node.pop("fake_gpu_memory_mb", None)
    if "gpus" in node and node["gpus"].kind == "fake":
        extra = {k: v for k, v in (("fake_model", fake_model), ("fake_memory_mb", fake_memory)) if v is not None}
        node["gpus"] = attrs.evolve(node["gpus"], **extra)
    return Config(config_file=config_file, http_limits=HttpLimits(**sections["http"]),
                  store=StoreConfig(**sections["store"]), node=NodeConfig(**node),
                  monitor=MonitorConfig(**sections["monitor"]), retention=RetentionConfig(**sections["retention"]),
                  ui=UiConfig(**sections["ui"]), **values)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses per level of nested arrays and inline tables
        raise ConfigError(f"{path}: invalid TOML: arrays or tables nested too deeply") from None
