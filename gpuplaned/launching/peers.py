"""Who is at the other end of the control socket: the user, or a process of one of this node's jobs.

The control socket's folder is the user's own, so whatever connects to it runs as the user
(DESIGN: trusted by file permissions). Jobs run as that user too, and they must not get the
user's powers through it: a limited token's job once made itself an admin token there (issue
29 item 6). The kernel names the process that connected (``SO_PEERCRED``, put in each request's ASGI scope as ``PEER``), and its ancestors
say whether GPUPlane started it, on evidence rather than on anything the process says:

- every process of a job descends from the job's shim, a child subreaper: a process that
  loses its parent, ``setsid()`` or not, is re-parented to the shim; a job whose shim was
  killed has its processes re-parented to the launcher, a subreaper too;
- so a peer with the launcher or a shim (our shim program, by its command line) among its
  ancestors is a process of a job. Which one: the live job whose shim is among its
  ancestors, or whose session (the shim's) or process group (its main process's) it is in.
  A session or group id is never given to another process while anything is in it.

A process GPUPlane started that no live job claims (the runner is restarting; a leftover)
is a ``JobPeer`` with no job, and gets nothing. What this cannot see is a process a job had
started outside its tree by asking another service (``systemd-run --user``, ``ssh
localhost``, cron): isolation between processes of one user is not a security boundary, and
docs/security.md says so.

Synchronous and cheap: a few ``/proc`` reads per ancestor (tens of microseconds a request).
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import attrs

from gpuplaned.launching.client import SHIM_PATH
from gpuplaned.protocol.errors import ApiError, ErrorCode

__all__ = ["PEER", "JobPeer", "PeerCred", "beyond_sdk", "identify", "identify_once", "peer_cred", "unclaimed"]

MAX_DEPTH = 128  # ancestors looked at; a deeper tree is not a job's (the kernel has no such limit)
PEER = "gpuplane.peer"  # ASGI scope key: the ``PeerCred`` of a control-socket request's process
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@attrs.define(eq=False)
class PeerCred:
    """The process that connected to a Unix socket, as the kernel recorded it at ``connect()``
    (who it is: ``identify_once``), one per connection."""

    pid: int
    uid: int
    gid: int
    # What ``identify_once`` found for this connection's process: it stays what it was (a
    # process cannot move into a job's tree or out of it), so the next request on it is free.
    found: list[JobPeer | None] = attrs.field(factory=list)


class Runner(Protocol):
    """The node's runner as ``identify_once`` reads it (``gpuplaned.node_context.RunningJobs``)."""

    @property
    def live(self) -> Mapping[str, LiveJob]: ...


def identify_once(cred: PeerCred, runner: Callable[[], Runner | None]) -> JobPeer | None:
    """``identify`` of the connection's process among ``runner()``'s live jobs (none while the
    runner is away), looked up once a connection. A process no live job claims yet is looked
    up again next time: its job may be listed by then."""
    if cred.found:
        return cred.found[0]
    running = runner()
    peer = identify(cred.pid, running.live.values() if running is not None else ())
    if peer is None or peer.job_id is not None:
        cred.found.append(peer)
    return peer


def peer_cred(sock: socket.socket) -> PeerCred | None:
    """``SO_PEERCRED`` of a connected Unix socket; None for any other socket, or when unknown."""
    if sock.family != socket.AF_UNIX:
        return None
    try:
        pid, uid, gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    except OSError:
        return None
    return PeerCred(pid, uid, gid) if pid > 0 else None


class LiveJob(Protocol):
    """What tells a live job's processes (``identify``): its ids, its shim, its process group.
    The runner's view of a job (``gpuplaned.node_context.LiveJobView``) has these and more."""

    @property
    def job_id(self) -> str: ...

    @property
    def attempt(self) -> int: ...

    @property
    def run_id(self) -> str | None: ...

    @property
    def shim_pid(self) -> int: ...

    @property
    def pgid(self) -> int | None: ...


@attrs.frozen
class JobPeer:
    """A process of a job: ``job_id`` None when no live job claims it (it gets nothing)."""

    pid: int
    job_id: str | None
    attempt: int | None = None
    run_id: str | None = None


def unclaimed(peer: JobPeer) -> ApiError:
    """What a process GPUPlane started, but that no live job claims, is told on the control socket."""
    return ApiError(ErrorCode.FORBIDDEN, f"process {peer.pid} was started by GPUPlane (it runs under a job's shim) "
                    "but no running job of this node claims it, so it may not use the control socket",
                    {"pid": peer.pid})


def beyond_sdk(who: str, job_id: str, method: str, path: str) -> ApiError:
    """What a job's process (``who``) is told when it asks the control socket for more than the SDK's routes."""
    return ApiError(ErrorCode.FORBIDDEN, f"{who} may use only the SDK's routes on the control socket (its "
                    f"sessions, and its run's summary), not {method} {path}: a job acts for its run, never as "
                    "the user who owns the socket (a token over the HTTP front can do more: GPUPLANE_SERVER "
                    "and GPUPLANE_TOKEN)", {"job_id": job_id})


@attrs.frozen
class _Proc:
    pid: int
    ppid: int
    pgrp: int
    session: int


def identify(pid: int, live: Iterable[LiveJob], *, daemon_pid: int | None = None,
             shim_program: str = str(SHIM_PATH)) -> JobPeer | None:
    """The job whose process ``pid`` is; None when GPUPlane did not start it (the user's own).

    ``daemon_pid`` (default: this process): the daemon itself is the user's (a client in its
    own process).
    """
    if pid == (os.getpid() if daemon_pid is None else daemon_pid):
        return None
    lineage = _lineage(pid)
    if not lineage:  # gone already: nothing to vouch for it
        return JobPeer(pid, None)
    for job in live:
        for proc in lineage:
            if proc.pid == job.shim_pid or proc.session == job.shim_pid or (job.pgid and proc.pgrp == job.pgid):
                return JobPeer(pid, job.job_id, job.attempt, job.run_id)
    # The launcher and each shim lead a session of their own (``setsid``): only a session
    # leader's command line is worth reading (a shell's login or tmux's, besides ours).
    if any(proc.pid == proc.session and _runs(proc.pid, shim_program) for proc in lineage[1:]):
        return JobPeer(pid, None)
    return None


def _lineage(pid: int) -> list[_Proc]:
    """``pid`` and its ancestors, nearest first, up to (not including) pid 1 or a kernel thread."""
    chain: list[_Proc] = []
    while pid > 1 and len(chain) < MAX_DEPTH:
        proc = _stat(pid)
        if proc is None:
            break
        chain.append(proc)
        pid = proc.ppid
    return chain


def _read(path: str) -> bytes | None:
    """A small ``/proc`` file (a raw read: half the cost of ``open()``'s buffered one)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def _stat(pid: int) -> _Proc | None:
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = stat.rpartition(b")")[2].split()  # the name, in parentheses, may hold anything
    try:
        return _Proc(pid, int(fields[1]), int(fields[2]), int(fields[3]))
    except (IndexError, ValueError):
        return None


def _runs(pid: int, program: str) -> bool:
    """Whether ``pid`` runs ``program`` (the launcher, and the shims it forks, run the shim's file)."""
    cmdline = _read(f"/proc/{pid}/cmdline")
    return cmdline is not None and os.fsencode(program) in cmdline.split(b"\0")[:4]
