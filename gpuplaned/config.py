"""Daemon configuration: defaults < TOML file < environment < command-line flags.

Every key is checked: an unknown key or a bad value is a ``ConfigError`` that names the key
(``store.max_batch``) and the file, and the daemon exits 2 without touching anything.

Each ``[table]`` is an attrs class (``StoreConfig``...) and the top level is ``Config``; each
field names the check its value passes, and the one converter structures each source (file,
environment, flags) into a Config through them (``_Sources``), refusing a key no class has.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import attrs
from cattrs.gen import make_dict_structure_fn, override

from gpuplaned.domain.gpu_free import MAX_UTIL_SAMPLES
from gpuplaned.protocol.converter import FieldInvalid, check, converter
from gpuplaned.protocol.discovery import default_runtime_dir
from gpuplaned.protocol.vocabulary import PLACEMENTS, PlacementMode
from gpuplaned.telemetry.backend import GpuSource, parse_gpus

ROLES = ("all", "server", "agent")
RUNNERS = ("local", "slurm")  # [node] runner: gpuplaned.backends
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


# The checks: each turns a value as a TOML file, the environment or a flag gives it into the
# field's value, or raises ValueError saying what it must be. A field names its check
# (``_key``); the converter runs it when it structures the class (``_section``). They run at
# the edge only: a Config built in code (tests, defaults such as the host name) is trusted.
_CHECK = "gpuplane.config.check"


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


def _int_between(low: int, high: int | None = None) -> Callable[[Any], int]:
    if high is not None:
        wanted = f"a whole number from {low} to {high}"
    else:
        wanted = "a positive integer" if low == 1 else f"an integer >= {low}"

    def check(value: Any) -> int:
        if type(value) is not int or value < low or (high is not None and value > high):
            raise ValueError(f"must be {wanted}; got {value!r}")
        return value

    return check


_positive_int = _int_between(1)
_non_negative_int = _int_between(0)


def _number_between(low: float, high: float) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if type(value) not in (int, float) or not low <= value <= high:
            raise ValueError(f"must be a number from {low:g} to {high:g}; got {value!r}")
        return float(value)

    return check


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false; got {value!r}")
    return value


def _parsed(parse: Callable[[str], Any]) -> Callable[[Any], Any]:
    """A check for a string value that ``parse`` turns into its real type."""

    def check(value: Any) -> Any:
        if not isinstance(value, str):
            raise ValueError(f"must be a string; got {value!r}")
        return parse(value)

    return check


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


def _key(rule: Callable[[Any], Any], default: Any = attrs.NOTHING, *, factory: Callable[[], Any] | None = None) -> Any:
    """A field that a config source may set, and the check its value passes."""
    return attrs.field(default=default, factory=factory, metadata={_CHECK: rule})


C = TypeVar("C")


def _section(cls: type[C]) -> type[C]:
    """Register ``cls`` with the converter: each field that has a check is structured by it
    (the rest by their own type: a section in Config), and a key it does not have is refused."""
    checks = {a.name: override(struct_hook=lambda value, _, rule=a.metadata[_CHECK]: rule(value))
              for a in attrs.fields(cls) if _CHECK in a.metadata}
    converter.register_structure_hook(cls, make_dict_structure_fn(cls, converter, **checks))
    return cls


_seconds = _number_between(0.1, 3600)
_percent = _number_between(0, 100)


_HOST_NAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
                        r"[A-Za-z0-9])?)*\.?")


def _host_names(value: Any) -> tuple[str, ...]:
    """A list of host names or IP addresses, without port or scheme, or ``"*"``."""
    if not isinstance(value, list):
        raise ValueError(f"must be a list of host names (e.g. [\"gpubox.lan\"]); got {value!r}")
    names = []
    for item in value:
        name = item[1:-1] if isinstance(item, str) and item.startswith("[") and item.endswith("]") else item
        if not isinstance(name, str) or not (name == "*" or _HOST_NAME.fullmatch(name) or _is_ip(name)):
            raise ValueError(f"must be host names or IP addresses without a port or scheme, or \"*\"; got {item!r}")
        names.append(name.lower().rstrip("."))
    return tuple(names)


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


@_section
@attrs.frozen
class HttpLimits:
    """How the HTTP servers treat connections (``[http]``; ``gpuplaned.http.connections``).

    The timeouts hold on the control socket too; the cap only on the TCP front.
    """

    # A connection with no request in progress is closed after this long; it also bounds
    # how long a request's headers may take (from the connection's start or its last reply).
    keep_alive_timeout_s: float = _key(_seconds, 5.0)
    body_timeout_s: float = _key(_seconds, 30.0)  # the longest a request's body may take to arrive (then 408)
    max_connections: int = _key(_int_between(1, 1_000_000), 256)  # open TCP connections; more are answered 503 and closed
    # A connection holds its slot against newcomers only once a request on it authenticated, and
    # only within these shares; any other is closed (oldest first) to let a new one in.
    # gpuplaned.http.connections.
    max_connections_per_address: int = _key(_int_between(1, 1_000_000), 128)  # from one client address
    max_connections_per_token: int = _key(_int_between(1, 1_000_000), 32)  # held by one token or browser session
    agent_connections_reserved: int = _key(_int_between(0, 1_000_000), 16)  # only agents may hold (at most half)
    mcp_sessions_per_token: int = _key(_int_between(1, 1000), 64)  # MCP sessions one token may have open at once
    # Host names a loopback front answers besides the loopback ones (DNS rebinding: a page of
    # another site whose name now points at 127.0.0.1 must not reach it); "*" is any. On a front
    # beyond loopback, None (unset) checks no Host. gpuplaned.http.front_guard.
    allowed_hosts: tuple[str, ...] | None = _key(_host_names, None)


@_section
@attrs.frozen
class StoreConfig:
    max_batch: int = _key(_positive_int, 1000)  # most writes folded into one transaction
    read_connections: int = _key(_positive_int, 4)


@_section
@attrs.frozen
class NodeConfig:
    name: str = _key(_name, factory=socket.gethostname)
    labels: tuple[str, ...] = _key(_labels, ())
    gpus: GpuSource = _key(_parsed(parse_gpus), GpuSource("auto"))
    max_cpu_jobs: int = _key(_non_negative_int, 2)
    # local: the launcher and its shims on this machine; slurm: sbatch to a cluster ([slurm]).
    runner: str = _key(_choice(RUNNERS), "local")
    log_tail_lines: int = _key(_positive_int, 2000)  # lines of each job's output kept in the store
    # Only for gpus = "fake:N" (load_config folds them into ``gpus``): what the fake GPUs say they are.
    fake_gpu_model: str | None = _key(_text, None)
    fake_gpu_memory_mb: int | None = _key(_positive_int, None)


@_section
@attrs.frozen
class MonitorConfig:
    sample_interval_s: float = _key(_seconds, 2.0)
    batch_interval_s: float = _key(_seconds, 5.0)  # metric points go to the store in batches this often
    disk_low_percent: float = _key(_percent, 5.0)  # DISK_LOW under this much free on the data or job disk
    idle_util_percent: float = _key(_percent, 20.0)  # GPU_UNDERUTILIZED: under this utilization...
    idle_memory_percent: float = _key(_percent, 30.0)  # ...and this much memory...
    idle_minutes: float = _key(_number_between(0, 7 * 24 * 60), 10.0)  # ...for this long
    foreign_gpu_busy: bool = _key(_bool, True)  # a GPU used by a process outside GPUPlane takes no new job...
    foreign_min_memory_mb: int = _key(_non_negative_int, 1024)  # ...once such processes hold this much of its memory (a desktop's display: less)


@_section
@attrs.frozen
class RetentionConfig:
    """How long node metrics are kept per resolution; training metrics are always kept."""

    node_raw_hours: float = _key(_number_between(0.1, 24 * 3650), 24.0)
    node_1m_days: float = _key(_number_between(0.01, 3650), 7.0)
    node_5m_days: float = _key(_number_between(0.01, 3650), 30.0)
    pass_interval_s: float = _key(_number_between(0.1, 86_400), 60.0)  # how often rollups, compaction and retention run


@_section
@attrs.frozen
class CheckpointsConfig:
    """How the node finds the checkpoints jobs save on their own (``[checkpoints]``; ``actors/ckptwatch.py``)."""

    stable_s: float = _key(_number_between(0.1, 3600), 10.0)  # size and mtime unchanged this long: complete
    rescan_interval_s: float = _key(_number_between(0.1, 3600), 2.0)  # a full pass this often, besides file events


@_section
@attrs.frozen
class TensorboardConfig:
    """How the node reads the TensorBoard event files jobs write (``[tensorboard]``; ``actors/tbtail.py``)."""

    poll_interval_s: float = _key(_number_between(0.05, 3600), 0.5)  # each live attempt's files are read this often
    crc_grace_s: float = _key(_number_between(0, 3600), 30.0)  # a record failing its CRC is retried this long, then skipped


@_section
@attrs.frozen
class UiConfig:
    """The browser UI on the HTTP front (``[ui]``; ``gpuplaned.http.ui_routes``, ``gpuplaned.service.api.ui_sessions``)."""

    web_dir: Path | None = _key(_path, None)  # the built app (index.html, assets/); None: the package's or the checkout's
    session_ttl_s: int = _key(_int_between(60, 366 * 86_400), 7 * 86_400)  # how long a browser stays signed in
    login_link_ttl_s: int = _key(_int_between(1, 3600), 120)  # how long a `gpuplanectl ui` link can be used (once)


@_section
@attrs.frozen
class DetectorConfig:
    """The event rules and their thresholds (``[detector]``; ``gpuplaned.domain.rules``,
    ``actors/detector.py``); every rule is on by default. GPU_UNDERUTILIZED and DISK_LOW are
    the node's, in ``[monitor]``."""

    loss_nan: bool = _key(_bool, True)  # LOSS_NAN: a loss got NaN or infinity
    loss_spike: bool = _key(_bool, True)  # LOSS_SPIKE: a loss jumps above its rolling median + spike_mads x MAD...
    spike_window: int = _key(_int_between(20, 10_000), 64)  # ...of this many finite values before it (20: its least)
    spike_mads: float = _key(_number_between(0.5, 1000), 6.0)  # ...times the window's MAD, and then either...
    spike_extreme: float = _key(_number_between(1, 1e6), 8.0)  # ...jumps this many times the window's max - median
    spike_hold: int = _key(_int_between(3, 10_000), 100)  # ...or stays up (not falling back) for this many values
    overfitting: bool = _key(_bool, True)  # OVERFITTING_SUSPECTED: an eval loss up from its best while train falls...
    overfit_rise_percent: float = _key(_number_between(0, 10_000), 10.0)  # ...by more than this...
    overfit_evals: int = _key(_int_between(1, 1000), 3)  # ...for this many evaluations in a row
    run_stalled: bool = _key(_bool, True)  # RUN_STALLED: a running job silent (no point, no log line)...
    stall_after_s: float = _key(_number_between(0.1, 7 * 86_400), 1200.0)  # ...this long
    interval_s: float = _key(_number_between(0.05, 3600), 10.0)  # how often the detector looks at running jobs
    run_started: bool = _key(_bool, True)  # RUN_STARTED: a run began
    run_finished: bool = _key(_bool, True)  # RUN_FINISHED: a run ended, whatever its status
    stall_restarts: int = _key(_int_between(0, 1000), 3)  # on_stalled = restart: at most this many per job, then gives up


@_section
@attrs.frozen
class TokensConfig:
    """Capability tokens' budgets and the audit log (``[tokens]``; ``gpuplaned.service.api.budgets``,
    ``gpuplaned.service.api.audit``, run by ``actors/policies.py``)."""

    budget_interval_s: float = _key(_number_between(0.1, 3600), 30.0)  # how often running jobs are charged against budgets
    audit_keep_days: float = _key(_number_between(1, 36_600), 90.0)  # audit rows older than this are dropped


@_section
@attrs.frozen
class UplinkConfig:
    """A remote agent's link to its server (``[uplink]``; ``actors/uplink.py``, ``gpuplaned.uplink``) and
    how the server judges it (``gpuplaned.service.link.agent_link``)."""

    token_file: Path | None = _key(_path, None)  # the agent token (else GPUPLANE_TOKEN); never logged
    heartbeat_s: float = _key(_number_between(0.05, 3600), 25.0)  # a heartbeat this often; 3 missed: OFFLINE, jobs LOST
    dispatch_ack_s: float = _key(_number_between(0.1, 86_400), 60.0)  # a dispatch not RUNNING by then is requeued (3 times)
    fsync: str = _key(_choice(("always", "interval", "never")), "interval")  # when spooled records reach the disk
    fsync_interval_s: float = _key(_number_between(0.001, 60), 0.2)  # fsync = "interval": at most this long unsynced
    spool_max_bytes: int = _key(_positive_int, 100 * 1000 * 1000)  # the spool's bound; oldest records dropped first
    spool_max_age_s: float = _key(_number_between(1, 366 * 86_400), 86_400.0)  # records older than this are dropped
    # A backlog is replayed in batches (a server transaction each) at most this fast, in records
    # and in body bytes: 1M small records in ~2 s, while the server's other writes go between batches.
    replay_records_per_s: int = _key(_positive_int, 500_000)
    replay_bytes_per_s: int = _key(_positive_int, 64 * 1000 * 1000)
    reconnect_max_s: float = _key(_number_between(0.5, 3600), 30.0)  # the longest wait between two dials (backoff)


def _slurm_time(value: Any) -> str:
    text = _text(value)
    if not _SLURM_TIME.fullmatch(text):
        raise ValueError("must be a Slurm time limit: MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS")
    return text


_SLURM_TIME = re.compile(r"\d+|\d+:\d{2}|\d+:\d{2}:\d{2}|\d+-\d+(:\d{2}(:\d{2})?)?")


@_section
@attrs.frozen
class SlurmConfig:
    """A node with ``[node] runner = "slurm"`` hands its jobs to a Slurm cluster
    (``gpuplaned.backends.slurm``). Its attempts' dirs lie under ``job_dir`` (else the home),
    on a filesystem the cluster's nodes share (docs/slurm.md)."""

    partition: str | None = _key(_text, None)  # None: the cluster's default partition
    account: str | None = _key(_text, None)
    qos: str | None = _key(_text, None)
    time_limit: str | None = _key(_slurm_time, None)  # a job's --time unless it has a timeout; None: the partition's
    # Where the attempts' dirs lie (<job_dir>/jobs/<job>/attempt-<n>): a filesystem the cluster's nodes
    # share. None: the home, which must then be shared itself (the store is best kept off NFS).
    job_dir: Path | None = _key(_path, None)
    bin_dir: Path | None = _key(_path, None)  # where sbatch, squeue, scontrol, scancel, sacct are; None: PATH
    python: Path | None = _key(_path, None)  # the interpreter that runs our shim on the compute node; None: this one's
    gpus_per_job: int = _key(_int_between(0, 1024), 8)  # the most GPUs one job may ask of this node
    max_jobs: int = _key(_int_between(1, 100_000), 100)  # our jobs handed to Slurm at once (queued there or running)
    poll_interval_s: float = _key(_number_between(0.05, 600), 2.0)  # one squeue for all our jobs this often
    poll_max_s: float = _key(_number_between(0.1, 3600), 30.0)  # the longest wait between polls while Slurm is down
    command_timeout_s: float = _key(_number_between(0.1, 600), 10.0)  # each client command's limit
    lost_after_s: float = _key(_number_between(0, 86_400), 60.0)  # a job no source accounts for this long is LOST
    signal_before_s: int = _key(_int_between(0, 65_535), 120)  # --signal=B:USR2@N: the warning before a time limit
    requeue: bool = _key(_bool, True)  # --requeue: a preempted job comes back as a new attempt
    # The URL compute nodes reach this daemon's HTTP front by (http://login1:8765): each job then gets
    # GPUPLANE_SERVER and a token of its own (service/api/job_tokens.py); None: the control socket.
    server_url: str | None = _key(_url, None)


@_section
@attrs.frozen
class SchedulerConfig:
    """How queued jobs are placed (``[scheduler]``; ``gpuplaned.domain.queue``)."""

    # pack: the node with the fewest free GPUs that fit; spread: the most. A job's own placement wins.
    placement: str = _key(_choice(PLACEMENTS), PlacementMode.PACK.value)
    # A GPU no job holds is free only while the median of its last free_util_samples utilisation
    # readings is under this percent (gpuplaned.domain.gpu_free); unset: utilisation is not judged.
    max_free_util: float | None = _key(_number_between(0.1, 100), None)
    free_util_samples: int = _key(_int_between(1, MAX_UTIL_SAMPLES), 5)


@_section
@attrs.frozen
class Config:
    role: str = _key(_choice(ROLES), "all")
    home: Path = _key(_path, factory=lambda: Path("~/.local/share/gpuplane").expanduser())
    runtime_dir: Path = _key(_path, factory=default_runtime_dir)
    group_access: bool = _key(_bool, False)  # the runtime dir's group may use the socket (gpuplaned.endpoint)
    listen: Listen | None = _key(_parsed(parse_listen), None)
    http: HttpFront | None = _key(_parsed(parse_http), DEFAULT_HTTP)  # None: no HTTP front
    http_limits: HttpLimits = HttpLimits()  # the file's [http] table (beside its listen, which is ``http``)
    server: str | None = _key(_url, None)
    log_level: str = _key(_choice(LOG_LEVELS), "info")
    owner_pid: int | None = _key(_positive_int, None)  # a flag only
    config_file: Path | None = None
    store: StoreConfig = StoreConfig()
    node: NodeConfig = attrs.field(factory=NodeConfig)
    monitor: MonitorConfig = MonitorConfig()
    retention: RetentionConfig = RetentionConfig()
    ui: UiConfig = UiConfig()
    checkpoints: CheckpointsConfig = CheckpointsConfig()
    tensorboard: TensorboardConfig = TensorboardConfig()
    detector: DetectorConfig = DetectorConfig()
    tokens: TokensConfig = TokensConfig()
    uplink: UplinkConfig = UplinkConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    slurm: SlurmConfig = SlurmConfig()

    @property
    def jobs_home(self) -> Path:
        """What holds the attempts' dirs (``gpuplaned.home.attempt_dir``): the home, or a Slurm
        node's ``[slurm] job_dir`` on a filesystem the cluster shares."""
        if self.node.runner == "slurm" and self.slurm.job_dir is not None:
            return self.slurm.job_dir
        return self.home

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


_FILE_KEYS = ("role", "home", "runtime_dir", "group_access", "listen", "http", "server", "log_level")  # beside the tables
_TABLES = {"http": "http_limits", "store": "store", "node": "node", "monitor": "monitor", "retention": "retention",
           "ui": "ui", "checkpoints": "checkpoints", "tensorboard": "tensorboard", "detector": "detector",
           "tokens": "tokens", "uplink": "uplink", "scheduler": "scheduler", "slurm": "slurm"}  # [table] -> its Config field
# Flags that set a key: flag name -> the Config key (dotted inside a section).
_FLAGS = {**{key: key for key in _FILE_KEYS}, "gpus": "node.gpus", "node_name": "node.name",
          "max_cpu_jobs": "node.max_cpu_jobs"}


class _Sources:
    """The values given so far, in Config's shape, and where each came from (a file, a
    variable, a flag) under the name it has there; a later source overrides an earlier one.

    ``check`` structures them into a Config: a fault is worded here, the one place, as
    ``<where>: <section>.<key> <what is wrong>``.
    """

    def __init__(self) -> None:
        self.raw: dict[str, Any] = {}
        self._origin: dict[str, tuple[str, str]] = {}  # dotted Config key -> (where, name)

    def set(self, where: str, key: str, value: Any, name: str | None = None) -> None:
        section, _, leaf = key.rpartition(".")
        (self.raw.setdefault(section, {}) if section else self.raw)[leaf] = value
        self._origin[key] = (where, name or key)

    def check(self) -> Config:
        try:
            return check(self.raw, Config)
        except FieldInvalid as fault:
            where, name = self._origin.get(fault.field, ("the configuration", fault.field))
            if fault.known is None:
                raise ConfigError(f"{where}: {name} {fault.message}") from None
            table = name.rpartition(".")[0]
            known = ("listen", *fault.known) if table == "http" else fault.known
            raise ConfigError(f"{where}: unknown key {name} (known: "
                              + ", ".join(f"{table}.{k}" for k in known) + ")") from None

    def read_file(self, path: Path) -> None:
        where = str(path)
        for key, value in _read_toml(path).items():
            if key in _TABLES and (isinstance(value, dict) or key not in _FILE_KEYS):  # http: a string or a table
                if not isinstance(value, dict):
                    raise ConfigError(f"{where}: [{key}] must be a table")
                for sub, sub_value in value.items():
                    if (key, sub) == ("http", "listen"):  # the front's address: Config.http
                        self.set(where, "http", sub_value, "http.listen")
                    else:
                        self.set(where, f"{_TABLES[key]}.{sub}", sub_value, f"{key}.{sub}")
            elif key in _FILE_KEYS:
                self.set(where, key, value)
            else:
                known = ", ".join(list(_FILE_KEYS) + [f"[{s}]" for s in _TABLES])
                raise ConfigError(f"{where}: unknown key {key} (known: {known})")


def load_config(
    flags: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
) -> Config:
    """Build the configuration.

    Each source is checked once it is read (so a bad value is named even where a later
    source overrides it), through the converter and each field's check.

    Args:
        flags: values given on the command line (None for "not given"); ``config`` names the file.
        env: the environment (defaults to ``os.environ``).

    Raises:
        ConfigError: an unreadable or unparsable file, an unknown key or a bad value.
    """
    env = os.environ if env is None else env
    sources = _Sources()

    explicit = flags.get("config")
    path = Path(explicit).expanduser() if explicit else default_config_path(env)
    config_file: Path | None = None
    if explicit or path.exists():
        sources.read_file(path)
        config_file = path.absolute()
        sources.check()

    for key, var in (("home", "GPUPLANE_HOME"), ("runtime_dir", "GPUPLANE_RUNTIME_DIR"),
                     ("ui.web_dir", "GPUPLANE_WEB_DIR"), ("http", "GPUPLANE_HTTP")):
        if env.get(var):
            sources.set(f"environment {var}", key, env[var])
    sources.check()

    for flag, key in _FLAGS.items():
        if flags.get(flag) is not None:
            sources.set(f"--{flag.replace('_', '-')}", key, flags[flag])
    if flags.get("label"):
        sources.set("--label", "node.labels", list(flags["label"]))
    if flags.get("no_http"):
        sources.set("--no-http", "http", "off")
    if flags.get("owner_pid") is not None:
        sources.set("--owner-pid", "owner_pid", flags["owner_pid"])
    cfg = sources.check()

    if cfg.role == "agent" and not cfg.server:
        raise ConfigError("role agent needs the server's URL: --server URL (or server = in the config)")
    node = cfg.node
    if node.gpus.kind == "fake":
        extra = {k: v for k, v in (("fake_model", node.fake_gpu_model), ("fake_memory_mb", node.fake_gpu_memory_mb))
                 if v is not None}
        node = attrs.evolve(node, gpus=attrs.evolve(node.gpus, **extra))
    runtime_dir = cfg.runtime_dir if "runtime_dir" in sources.raw else default_runtime_dir(env)
    return attrs.evolve(cfg, config_file=config_file, runtime_dir=runtime_dir, node=node)


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
