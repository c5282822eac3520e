"""Which remote daemon gpuplanectl drives, if any: ``--server``/``--token``/``--profile``,
``GPUPLANE_SERVER``/``GPUPLANE_TOKEN``/``GPUPLANE_PROFILE``, or a profile in ``ctl.toml``.

The profile file is ``$XDG_CONFIG_HOME/gpuplane/ctl.toml`` (default ``~/.config/gpuplane/ctl.toml``)::

    default_profile = "lab"          # optional: used when nothing else names a server

    [profiles.lab]
    server = "https://gpu.lab.example:8765"
    token_file = "~/.config/gpuplane/lab.token"   # or: token = "gpp_..."

Precedence, for the server and the token each: flags, then the environment, then the
profile (``--profile`` counts as a flag, ``GPUPLANE_PROFILE`` and ``default_profile`` as
the environment), then the local socket. An explicit ``--runtime-dir`` means the local
daemon. A profile's token is only ever sent to that profile's own server.

Everything a mistake here produces is a ``RemoteError`` (gpuplanectl exits 2), whose
message never contains a token: not the token itself, and not a URL that carried one.
Pure apart from reading the profile file and token files; no I/O to the network.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

PROFILE_FILE = ("gpuplane", "ctl.toml")
PROFILE_KEYS = frozenset({"server", "token", "token_file"})
DEFAULT_PORTS = {"http": 80, "https": 443}
# What an HTTP header value may carry: visible ASCII, no spaces, no line breaks.
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")


class RemoteError(Exception):
    """The remote settings are unusable (exit 2). The message never holds a token."""


class Server(NamedTuple):
    """A daemon's HTTP front: ``https://gpu.example.com:8765`` (optionally under a path prefix)."""

    scheme: str  # "http" or "https"
    host: str  # without brackets for IPv6
    port: int
    base: str  # a path prefix without the trailing "/" ("" usually), for a reverse proxy

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = "" if DEFAULT_PORTS[self.scheme] == self.port else f":{self.port}"
        return f"{self.scheme}://{host}{port}{self.base}"


class Remote:
    """The daemon to drive over HTTP, with the token for it (kept out of ``repr``)."""

    __slots__ = ("server", "token", "source", "again")

    def __init__(self, server: Server, token: str, source: str, again: str) -> None:
        self.server = server
        self.token = token
        self.source = source  # where the server came from: "--server", "GPUPLANE_SERVER", "profile lab"
        self.again = again  # how to invoke gpuplanectl for the same server, without the token

    def __repr__(self) -> str:
        return f"Remote({self.server.url!r}, source={self.source!r})"


def parse_server(text: str, where: str) -> Server:
    """``http[s]://HOST[:PORT][/PREFIX]`` -> Server.

    Raises:
        RemoteError: not an http(s) URL, or one that carries credentials (a token).
    """
    value = text.strip()
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise RemoteError(f"{where}: not a URL ({exc}); expected e.g. https://gpu.example.com:8765") from None
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment \
            or "gpp_" in value:
        # Whatever follows may be a secret: do not repeat it.
        raise RemoteError(f"{where}: the URL must not carry a token or credentials; give the token with "
                          f"--token, GPUPLANE_TOKEN or a profile's token/token_file")
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise RemoteError(f"{where}: expected an http:// or https:// URL like https://gpu.example.com:8765, "
                          f"got {value!r}")
    return Server(scheme, parts.hostname, port if port is not None else DEFAULT_PORTS[scheme],
                  parts.path.rstrip("/"))


def check_token(token: str, where: str) -> str:
    if not _TOKEN_CHARS.fullmatch(token):
        raise RemoteError(f"the token from {where} is empty or holds spaces or control characters")
    return token


def profile_path(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base, *PROFILE_FILE)


class Profile(NamedTuple):
    name: str
    server: Server
    token: str | None  # inline in the profile file
    token_file: Path | None
    path: Path  # the profile file
    mode: int  # its permission bits


def _read(path: Path) -> tuple[bytes, int]:
    with open(path, "rb") as f:
        return f.read(), stat.S_IMODE(os.fstat(f.fileno()).st_mode)


class ProfileFile:
    """``ctl.toml``, parsed. Only the profile asked for is checked in detail."""

    def __init__(self, path: Path, doc: Mapping[str, Any], mode: int) -> None:
        self.path = path
        self.mode = mode
        profiles = doc.get("profiles", {})
        if not isinstance(profiles, dict):
            raise RemoteError(f"{path}: 'profiles' must be a table of [profiles.NAME] tables")
        self.profiles: dict[str, Any] = profiles
        default = doc.get("default_profile")
        if default is not None and not isinstance(default, str):
            raise RemoteError(f"{path}: default_profile must be a profile's name (a string)")
        self.default = default or None

    @classmethod
    def load(cls, path: Path) -> ProfileFile | None:
        """None when there is no such file."""
        try:
            data, mode = _read(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RemoteError(f"cannot read {path}: {exc.strerror}") from None
        import tomllib  # only when there is a profile file

        try:
            doc = tomllib.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise RemoteError(f"{path} is not valid TOML: {exc}") from None
        except RecursionError:  # tomllib recurses per level of nesting
            raise RemoteError(f"{path} is not valid TOML: arrays or tables nested too deeply") from None
        return cls(path, doc, mode)

    def profile(self, name: str, source: str) -> Profile:
        raw = self.profiles.get(name)
        where = f"profile {name!r} in {self.path}"
        if raw is None:
            known = ", ".join(sorted(self.profiles)) or "none"
            raise RemoteError(f"no profile {name!r} (from {source}) in {self.path}; it has: {known}")
        if not isinstance(raw, dict):
            raise RemoteError(f"{where} must be a table: [profiles.{name}]")
        unknown = sorted(set(raw) - PROFILE_KEYS)
        if unknown:
            raise RemoteError(f"{where}: unknown key {unknown[0]!r} (a profile takes server, and token or token_file)")
        server = raw.get("server")
        if not isinstance(server, str):
            raise RemoteError(f"{where} has no server = \"https://...\"")
        token, token_file = raw.get("token"), raw.get("token_file")
        if token is not None and token_file is not None:
            raise RemoteError(f"{where} has both token and token_file; keep one")
        if token is not None and not isinstance(token, str):
            raise RemoteError(f"{where}: token must be a string")
        if token_file is not None and not isinstance(token_file, str):
            raise RemoteError(f"{where}: token_file must be a path (a string)")
        path = None
        if token_file is not None:
            path = Path(token_file).expanduser()
            path = path if path.is_absolute() else Path(os.path.normpath(self.path.parent / path))
        return Profile(name, parse_server(server, where), token, path, self.path, self.mode)


def _too_open(path: Path, mode: int) -> str | None:
    if not mode & 0o077:
        return None
    return (f"warning: {path} holds an API token and is readable by "
            f"{'group and others' if mode & 0o070 and mode & 0o007 else 'others' if mode & 0o007 else 'its group'} "
            f"(mode {mode:04o}); make it private: chmod 600 {path}")


def profile_token(profile: Profile, warn: Callable[[str], None]) -> str | None:
    """The profile's token (read from token_file if so), warning when its file is not private."""
    where = f"profile {profile.name!r}"
    if profile.token is not None:
        note = _too_open(profile.path, profile.mode)
        if note:
            warn(note)
        return check_token(profile.token, where)
    if profile.token_file is None:
        return None
    try:
        data, mode = _read(profile.token_file)
    except OSError as exc:
        raise RemoteError(f"{where}: cannot read its token_file {profile.token_file}: {exc.strerror}") from None
    note = _too_open(profile.token_file, mode)
    if note:
        warn(note)
    return check_token(data.decode("utf-8", "replace").strip(), f"{where}'s token_file")


def resolve(*, server: str | None, token: str | None, profile: str | None, runtime_dir_given: bool,
            env: Mapping[str, str], warn: Callable[[str], None]) -> Remote | None:
    """The remote daemon the options, environment and profile file name; None: the local socket.

    Raises:
        RemoteError: conflicting options, a bad URL or token, an unknown profile, a profile
            file that is not valid TOML, or a server without a token.
    """
    flags = [name for name, value in (("--server", server), ("--token", token), ("--profile", profile))
             if value is not None]
    if runtime_dir_given:
        if flags:
            raise RemoteError(f"--runtime-dir is for a daemon on this machine; it does not go with {', '.join(flags)}")
        return None
    env_server = env.get("GPUPLANE_SERVER") or None
    env_token = env.get("GPUPLANE_TOKEN") or None
    path = profile_path(env)
    cache: dict[str, Any] = {}

    def chosen() -> Profile | None:
        """The profile named by --profile, else GPUPLANE_PROFILE, else default_profile (read once)."""
        if "profile" not in cache:
            name, source = profile, "--profile"
            if name is None and env.get("GPUPLANE_PROFILE"):
                name, source = env["GPUPLANE_PROFILE"], "GPUPLANE_PROFILE"
            file = ProfileFile.load(path)
            if name is None and file is not None and file.default is not None:
                name, source = file.default, "default_profile"
            if name is not None and file is None:
                raise RemoteError(f"no profile {name!r} (from {source}): there is no {path}")
            cache["profile"] = file.profile(name, source) if name is not None and file is not None else None
        return cache["profile"]

    if profile is not None:
        chosen()  # a profile asked for by name must exist, even when flags override all of it

    if server is not None:
        target, source, again = parse_server(server, "--server"), "--server", f"gpuplanectl --server {server.strip()}"
    elif profile is not None or not env_server:
        found = chosen()
        if found is None:
            if token is not None:
                raise RemoteError("--token needs a server: add --server URL (or set GPUPLANE_SERVER, or use --profile NAME)")
            return None  # the local socket
        target, source = found.server, f"profile {found.name}"
        again = f"gpuplanectl --profile {found.name}" if profile is not None else "gpuplanectl"
    else:
        target, source, again = parse_server(env_server, "GPUPLANE_SERVER"), "GPUPLANE_SERVER", "gpuplanectl"

    if token is not None:
        return Remote(target, check_token(token, "--token"), source, again)
    # The profile's token before the environment's when --profile was given, after it otherwise;
    # and only ever to the profile's own server.
    for layer in ("profile", "env") if profile is not None else ("env", "profile"):
        if layer == "env" and env_token:
            return Remote(target, check_token(env_token, "GPUPLANE_TOKEN"), source, again)
        if layer == "profile":
            found = chosen()
            if found is not None and found.server == target:
                found_token = profile_token(found, warn)
                if found_token is not None:
                    return Remote(target, found_token, source, again)
    found = cache.get("profile")
    other = (f" (profile {found.name!r} is for {found.server.url}; its token goes nowhere else)"
             if found is not None and found.server != target else "")
    raise RemoteError(f"no API token for {target.url}{other}: give --token, set GPUPLANE_TOKEN, or put "
                      f"token_file in a [profiles.NAME] of {path} (create one with `gpuplanectl token create`)")
