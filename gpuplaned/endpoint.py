"""Claiming the control endpoint, and publishing it in the port-file.

Decisions (seed 003), in order:

1. The runtime dir is created 0700; one owned by another user, or a symlink, is refused.
   With ``group_access`` (the packaged system unit) it is 0750, the socket 0660 and the
   port-file 0640, so members of the dir's group can use the daemon; others still cannot.
2. ``gpuplaned.lock`` (flock) is held for the daemon's lifetime: a second daemon for the
   same runtime dir exits 3 and touches nothing.
3. At the socket path: nothing -> bind. A socket a live daemon answers on -> exit 3. A
   socket nobody answers on (left by a SIGKILL) -> reclaim and bind. Anything else (a
   regular file, a directory) -> leave it alone and fall back to loopback TCP, unless the
   path came from an explicit ``--listen``, which fails loudly instead.

We bind the listening socket ourselves and hand hypercorn a duplicate (``fd://``), because
hypercorn would delete whatever socket file it finds at a ``unix:`` bind path. Keeping the
original open also means the endpoint stays bound while the control actor restarts.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import secrets
import socket
import stat
from pathlib import Path

import attrs

from gpuplaned.config import Listen
from gpuplaned.protocol.discovery import (
    LOCK_NAME,
    PORTFILE_NAME,
    SECRET_NAME,
    SOCKET_NAME,
    PortFile,
    PortFileError,
    parse_portfile,
)

log = logging.getLogger("gpuplaned.endpoint")

# sun_path is 108 bytes on Linux, including the terminating NUL.
MAX_UNIX_PATH = 107


class EndpointBusy(Exception):
    """Another daemon owns the endpoint; exit 3."""


class EndpointError(Exception):
    """The endpoint cannot be claimed (bad runtime dir, bind failure); exit 1."""


@attrs.define
class ClaimedEndpoint:
    runtime_dir: Path
    sock: socket.socket
    unix_path: str | None  # None when serving loopback TCP
    tcp_port: int | None
    lock_fd: int
    secret: str | None  # bearer secret required on the TCP fallback
    _inode: int | None = None
    group_access: bool = False  # the port-file is readable by the runtime dir's group

    def portfile(self) -> PortFile:
        return PortFile(pid=os.getpid(), unix=self.unix_path, tcp_port=self.tcp_port)

    def hypercorn_bind(self) -> str:
        """A fresh duplicate of the listening socket for one hypercorn run."""
        return f"fd://{os.dup(self.sock.fileno())}"

    def release(self) -> None:
        """Close the socket, unlink it if it is still ours, drop the lock. Idempotent."""
        if self.unix_path is not None and self._inode is not None:
            try:
                st = os.lstat(self.unix_path)
                if stat.S_ISSOCK(st.st_mode) and st.st_ino == self._inode:
                    os.unlink(self.unix_path)
            except FileNotFoundError:
                pass
            self._inode = None
        self.sock.close()
        if self.secret is not None:
            _unlink_quietly(self.runtime_dir / SECRET_NAME)
            self.secret = None
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1


def prepare_runtime_dir(path: Path, *, group_access: bool = False) -> None:
    """Create ``path`` 0700 (0750 with ``group_access``; parents too) or check an existing one
    is ours and private.

    Raises:
        EndpointError: a symlink, not a directory, or owned by another user.
    """
    mode = 0o750 if group_access else 0o700
    try:
        path.mkdir(mode=mode, parents=True, exist_ok=True)
    except OSError as exc:
        raise EndpointError(f"cannot create runtime dir {path}: {exc.strerror}") from None
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise EndpointError(f"runtime dir {path} is not a directory (or is a symlink)")
    if st.st_uid != os.getuid():
        raise EndpointError(f"runtime dir {path} belongs to uid {st.st_uid}, not to us ({os.getuid()})")
    if stat.S_IMODE(st.st_mode) & ~mode & 0o777:
        log.warning("runtime dir %s was mode %o; tightening to %04o", path, stat.S_IMODE(st.st_mode), mode)
        os.chmod(path, mode)


def claim_endpoint(runtime_dir: Path, listen: Listen | None, *, group_access: bool = False) -> ClaimedEndpoint:
    """Lock the runtime dir and bind the control socket (see the module docstring).

    Raises:
        EndpointBusy: another daemon holds the runtime dir or answers on the socket.
        EndpointError: anything else that stops us from listening.
    """
    prepare_runtime_dir(runtime_dir, group_access=group_access)
    lock_fd = _lock(runtime_dir)
    try:
        if listen is not None and listen.unix is None:
            sock = _bind_tcp(listen.host or "127.0.0.1", listen.port or 0, explicit=True)
            return _tcp_endpoint(runtime_dir, sock, lock_fd)
        path = listen.unix if listen is not None else str(runtime_dir / SOCKET_NAME)
        explicit = listen is not None
        sock = _claim_unix(path, explicit=explicit, group_access=group_access)
        if sock is None:
            return _tcp_endpoint(runtime_dir, _bind_tcp("127.0.0.1", 0, explicit=False), lock_fd)
        return ClaimedEndpoint(runtime_dir, sock, path, None, lock_fd, None, os.stat(path).st_ino, group_access)
    except BaseException:
        os.close(lock_fd)
        raise


def _lock(runtime_dir: Path) -> int:
    fd = os.open(runtime_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        owner = _portfile_pid(runtime_dir)
        raise EndpointBusy(
            f"another gpuplaned{f' (pid {owner})' if owner else ''} already runs for {runtime_dir}"
        ) from None
    return fd


def _portfile_pid(runtime_dir: Path) -> int | None:
    try:
        return parse_portfile((runtime_dir / PORTFILE_NAME).read_text()).pid
    except (OSError, PortFileError):
        return None


def _claim_unix(path: str, *, explicit: bool, group_access: bool = False) -> socket.socket | None:
    """Bind ``path``; None means "fall back to TCP" (never for an explicit path)."""
    if len(os.fsencode(path)) > MAX_UNIX_PATH:
        message = f"socket path is {len(os.fsencode(path))} bytes, over the {MAX_UNIX_PATH}-byte limit: {path}"
        if explicit:
            raise EndpointError(message)
        log.warning("%s; falling back to loopback TCP", message)
        return None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISSOCK(st.st_mode):
            message = f"{path} exists and is not a socket; leaving it alone"
            if explicit:
                raise EndpointError(message)
            log.warning("%s; falling back to loopback TCP", message)
            return None
        if _socket_answers(path):
            raise EndpointBusy(f"a live gpuplaned already serves {path}")
        log.info("reclaiming stale socket %s (its daemon is gone)", path)
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o117 if group_access else 0o177)  # the socket file is born 0660 or 0600
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise EndpointBusy(f"{path} was bound by another process just now") from None
        raise EndpointError(f"cannot bind {path}: {exc.strerror}") from None
    finally:
        os.umask(old_umask)
    sock.listen(128)
    return sock


def _socket_answers(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
            return False
        raise EndpointError(f"cannot probe {path}: {exc.strerror}") from None
    finally:
        probe.close()
    return True


def _bind_tcp(host: str, port: int, *, explicit: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE and explicit:
            raise EndpointBusy(f"tcp://{host}:{port} is already in use") from None
        raise EndpointError(f"cannot bind tcp://{host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    return sock


def _tcp_endpoint(runtime_dir: Path, sock: socket.socket, lock_fd: int) -> ClaimedEndpoint:
    secret = secrets.token_urlsafe(32)
    _write_private(runtime_dir / SECRET_NAME, secret + "\n")
    return ClaimedEndpoint(runtime_dir, sock, None, sock.getsockname()[1], lock_fd, secret)


def _write_private(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``text`` atomically with ``mode``: temp file in the same dir, fsync, rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, mode)
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def publish_portfile(endpoint: ClaimedEndpoint) -> Path:
    path = endpoint.runtime_dir / PORTFILE_NAME
    _write_private(path, endpoint.portfile().render(), 0o640 if endpoint.group_access else 0o600)
    return path


def remove_portfile_if_ours(runtime_dir: Path) -> bool:
    """Remove the port-file only while it names our pid (a later daemon may own it now)."""
    path = runtime_dir / PORTFILE_NAME
    if _portfile_pid(runtime_dir) != os.getpid():
        return False
    _unlink_quietly(path)
    return True
