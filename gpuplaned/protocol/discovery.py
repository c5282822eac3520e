"""Endpoint discovery: where the runtime dir is, and the port-file that says where the daemon listens.

The port-file is a minimal line protocol (seed 003). It carries no credentials::

    protocol=1
    pid=<daemon pid>
    unix=<absolute socket path>      (or: sock=<loopback TCP port>)
    EOF

The final ``EOF`` line tells a complete file from one caught half-written, although the
daemon writes it atomically (temp file in the same dir, chmod 0600, rename).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import attrs

from gpuplaned.protocol.version import PORTFILE_PROTOCOL

SOCKET_NAME = "gpuplaned.sock"
PORTFILE_NAME = "gpuplaned.port"
LOCK_NAME = "gpuplaned.lock"
# Bearer secret for the control API when it had to fall back to loopback TCP, where file
# permissions no longer keep other users out. Lives beside the port-file, mode 0600.
SECRET_NAME = "gpuplaned.secret"


class PortFileError(ValueError):
    """A port-file that is missing, incomplete or malformed."""


@attrs.frozen
class PortFile:
    pid: int
    unix: str | None = None
    tcp_port: int | None = None
    protocol: int = PORTFILE_PROTOCOL

    def __attrs_post_init__(self) -> None:
        if (self.unix is None) == (self.tcp_port is None):
            raise PortFileError("a port-file names exactly one of unix= or sock=")

    def render(self) -> str:
        endpoint = f"unix={self.unix}" if self.unix is not None else f"sock={self.tcp_port}"
        return f"protocol={self.protocol}\npid={self.pid}\n{endpoint}\nEOF\n"

    @property
    def endpoint(self) -> str:
        if self.unix is not None:
            return f"unix://{self.unix}"
        return f"tcp://127.0.0.1:{self.tcp_port}"


def parse_portfile(text: str) -> PortFile:
    """Parse and validate a port-file.

    Raises:
        PortFileError: naming what is wrong.
    """
    lines = text.splitlines()
    if not lines or lines[-1] != "EOF":
        raise PortFileError("port-file is incomplete (no final EOF line)")
    fields: dict[str, str] = {}
    for number, line in enumerate(lines[:-1], start=1):
        key, sep, value = line.partition("=")
        if not sep:
            raise PortFileError(f"port-file line {number} is not key=value: {line!r}")
        if key in fields:
            raise PortFileError(f"port-file repeats {key}=")
        fields[key] = value
    unknown = set(fields) - {"protocol", "pid", "unix", "sock"}
    if unknown:
        raise PortFileError(f"port-file has unknown field(s): {', '.join(sorted(unknown))}")
    if fields.get("protocol") != str(PORTFILE_PROTOCOL):
        raise PortFileError(
            f"port-file protocol is {fields.get('protocol')!r}, this client speaks {PORTFILE_PROTOCOL}"
        )
    pid = _positive_int(fields, "pid")
    unix = fields.get("unix")
    if unix is not None and not os.path.isabs(unix):
        raise PortFileError(f"port-file unix= path is not absolute: {unix!r}")
    port = _positive_int(fields, "sock") if "sock" in fields else None
    if port is not None and port > 65535:
        raise PortFileError(f"port-file sock= is not a TCP port: {port}")
    return PortFile(pid=pid, unix=unix, tcp_port=port)


def _positive_int(fields: Mapping[str, str], key: str) -> int:
    raw = fields.get(key)
    if raw is None:
        raise PortFileError(f"port-file has no {key}=")
    if not raw.isdigit() or int(raw) <= 0:
        raise PortFileError(f"port-file {key}= is not a positive integer: {raw!r}")
    return int(raw)


def default_runtime_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$GPUPLANE_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/gpuplane``, else ``/tmp/gpuplane-<uid>``."""
    env = os.environ if env is None else env
    if env.get("GPUPLANE_RUNTIME_DIR"):
        return Path(env["GPUPLANE_RUNTIME_DIR"]).expanduser().absolute()
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "gpuplane"
    return Path(f"/tmp/gpuplane-{os.getuid()}")


def read_portfile(runtime_dir: Path) -> PortFile:
    """Read ``gpuplaned.port`` from ``runtime_dir``.

    Raises:
        FileNotFoundError: no daemon has published an endpoint there.
        PortFileError: the file is malformed.
    """
    return parse_portfile((runtime_dir / PORTFILE_NAME).read_text(encoding="utf-8"))


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs; an exited process its parent has not reaped (a zombie) is not alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # no procfs here: kill(0) is all we know
    # The state follows the parenthesised command name, which may itself contain ")".
    return stat.rpartition(")")[2].split()[:1] not in (["Z"], ["X"])
